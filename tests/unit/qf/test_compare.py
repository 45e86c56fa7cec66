"""compare_splits: TVD maths, noise yardstick, and the comparison with McCoy's dev split."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers import SHARED
from hypothesis import given, settings
from hypothesis import strategies as st

from assocmem.qf.compare import FIDELITY_MEASURES, compare_splits, count_tv, fidelity_rows, noise_draws, tvd
from assocmem.qf.generate import QFExample, generate_splits, parse_line, read_qf

QF_SHARED = SHARED / "data" / "question_formation"

distributions = st.dictionaries(st.integers(0, 6), st.floats(0.01, 1.0), min_size=1).map(
    lambda d: {k: v / sum(d.values()) for k, v in d.items()})


@given(distributions, distributions)
def test_tvd_is_a_bounded_symmetric_distance(p: dict, q: dict) -> None:
    assert tvd(p, q) == pytest.approx(tvd(q, p))
    assert -1e-12 <= tvd(p, q) <= 1 + 1e-12
    assert tvd(p, p) == pytest.approx(0.0, abs=1e-12)


def test_tvd_of_disjoint_supports_is_one() -> None:
    assert tvd({"a": 1.0}, {"b": 1.0}) == 1.0
    assert tvd({"a": 0.5, "b": 0.5}, {"a": 1.0}) == 0.5


@pytest.fixture(scope="module")
def qf_same_distribution() -> tuple[list[QFExample], list[QFExample]]:
    splits, _ = generate_splits(n_train=20000, n_dev=0, n_test=1000, n_gen=0, seed=99)
    parse = lambda lines: [parse_line(line, "generated") for line in lines]  # noqa: E731
    return parse(splits["train"]), parse(splits["test"])


def test_same_distribution_stays_within_noise(qf_same_distribution: tuple) -> None:
    generated, reference = qf_same_distribution
    result = compare_splits(generated, reference, n_boot=50)
    json.dumps(result)  # JSON-serialisable
    assert result["parse"] == {"generated_unparsable": 0, "reference_unparsable": 0,
                               "generated_wrong_target": 0, "reference_wrong_target": 0}
    for block in ("length", "template", "frame"):
        noise = result[block]["noise"]
        assert 0 < noise["vs_generated_mean"] < noise["pair_mean"]
        assert result[block]["tvd"] < noise["pair_q95"]
    assert result["frame_test"]["p_value"] > 0.001
    assert result["task_fraction"]["binomial_p"] > 0.001
    assert result["duplicates"] == {"generated": 0, "reference": 0}
    assert result["reference_sentences_in_generated"] == 0  # dedupe: splits are disjoint


def test_unparsable_and_wrong_targets_are_counted(qf_same_distribution: tuple) -> None:
    generated, _ = qf_same_distribution
    odd = [
        parse_line("the yak does fly . decl\tthe yak does fly .", "x:1"),
        parse_line("the yak does swim . quest\tthe yak does swim ?", "x:2"),
    ]
    result = compare_splits(generated[:2000], odd, n_boot=5)
    assert result["parse"]["reference_unparsable"] == 1
    assert result["parse"]["reference_wrong_target"] == 1


needs_dev = pytest.mark.skipif(not (QF_SHARED / "question.dev").is_file(), reason="../shared question.dev absent")


def _generated(weights: str, n: int = 20000) -> list[QFExample]:
    splits, _ = generate_splits(n_train=n, n_dev=0, n_test=0, n_gen=0, seed=99, weights=weights)
    return [parse_line(line, "generated") for line in splits["train"]]


@needs_dev
def test_published_grammar_is_far_from_mccoy_dev() -> None:
    result = compare_splits(_generated("published"), read_qf(QF_SHARED / "question.dev"), n_boot=50)
    json.dumps(result)
    reference = result["rates"]["reference"]
    assert result["n"]["reference"] == 1000
    assert result["parse"]["reference_unparsable"] == 0 and result["parse"]["reference_wrong_target"] == 0
    assert reference["subject_rc_in_quest"] == 0.0  # the withholding rule
    assert result["task_fraction"]["reference"]["decl"] == pytest.approx(0.594)
    assert result["task_fraction"]["binomial_p"] > 0.01  # fair coin, then withhold
    assert result["duplicates"]["reference"] == 0
    # The gap the fit closes: McCoy's iid lines have far fewer intransitive main verbs.
    assert reference["intransitive"] == pytest.approx(0.098)
    assert result["rates"]["generated"]["intransitive"] > 0.3
    assert result["frame_test"]["p_value"] < 1e-6
    assert result["template"]["tvd"] > result["template"]["noise"]["vs_generated_q95"]


@needs_dev
def test_fitted_grammar_matches_mccoy_dev_in_sample() -> None:
    """In-sample (the shipped fit used this file): rates and frames agree within sampling noise."""
    reference = read_qf(QF_SHARED / "question.dev")
    result = compare_splits(_generated("fitted"), reference, n_boot=50)
    ours, theirs = result["rates"]["generated"], result["rates"]["reference"]
    assert ours["intransitive"] == pytest.approx(theirs["intransitive"], abs=3 * (0.1 * 0.9 / 1000) ** 0.5)
    assert result["frame_test"]["p_value"] > 1e-3
    rows = {row["measure"]: row for row in fidelity_rows(_generated("fitted"), reference, n_boot=100)}
    assert rows["length"]["ratio"] < 2 and rows["template"]["ratio"] < 1.5


# --- fidelity rows -------------------------------------------------------------------------------------


def test_fidelity_rows_within_noise_for_one_distribution(qf_same_distribution: tuple) -> None:
    generated, reference = qf_same_distribution
    rows = fidelity_rows(generated, reference, n_boot=200, seed=3)
    assert [row["measure"] for row in rows] == list(FIDELITY_MEASURES)
    for row in rows:
        assert 0 < row["noise_floor"] <= row["noise_q95"]
        assert row["tv"] < 2.5 * row["noise_floor"]
        assert row["n_generated"] == 20000 and row["n_reference"] == 1000
        assert 0 < row["null_pass_rate"] <= 1


def test_fidelity_rows_flag_a_different_distribution() -> None:
    published, fitted = _generated("published", 5000), _generated("fitted", 20000)
    rows = {row["measure"]: row for row in fidelity_rows(fitted, published[:1000], n_boot=100)}
    assert not rows["length"]["passes"] and rows["length"]["ratio"] > 3
    assert not rows["template"]["passes"]


@given(st.lists(st.integers(0, 30), min_size=2, max_size=12), st.integers(1, 200), st.integers(0, 2**31))
@settings(max_examples=30, deadline=None)
def test_noise_draws_are_tv_distances(counts: list[int], n_ref: int, seed: int) -> None:
    gen = np.array(counts, dtype=float) + 1
    draws = noise_draws(gen, n_ref, 20, np.random.default_rng(seed))
    assert draws.shape == (20,) and np.all((draws >= 0) & (draws <= 1))
    assert count_tv(gen, gen) == 0.0


def test_fidelity_table_without_reference_shows_the_shipped_numbers(tmp_path: Path) -> None:
    from assocmem.qf.audit import audit_reference
    from assocmem.qf.compare import FIDELITY_TABLE_HEADER, fidelity_table

    audit = audit_reference(tmp_path / "unused.train", {"reference_dev": None, "source": "generate",
                                                        "grammar_weights": "fitted"})
    rows = fidelity_table(audit)
    assert all(len(row) == len(FIDELITY_TABLE_HEADER) for row in rows)
    dev_rows = [row for row in rows if row[0].startswith("McCoy dev (shipped")]
    gen_rows = [row for row in rows if row[0].startswith("McCoy gen (shipped")]
    assert len(dev_rows) == 6 and len(gen_rows) == 4  # gen's one-category task split is left out
    shipped = audit["shipped_fit"]["heldout_fidelity"]["folds"]["fit_first_half_test_second"]["rows"]
    assert [row[3] for row in dev_rows[:3]] == [row["tv"] for row in shipped]
    assert {row[6] for row in rows} <= {"PASS", "FAIL"}
