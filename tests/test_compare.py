"""compare_splits: TVD maths, noise yardstick, and the comparison with McCoy's dev split."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from assocmem.qf.compare import compare_splits, tvd
from assocmem.qf.generate import QFExample, generate_splits, parse_line, read_qf

QF_SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "question_formation"

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


@pytest.mark.skipif(not (QF_SHARED / "question.dev").is_file(), reason="../shared question.dev absent")
def test_comparison_with_mccoy_dev(qf_same_distribution: tuple) -> None:
    generated, _ = qf_same_distribution
    result = compare_splits(generated, read_qf(QF_SHARED / "question.dev"), n_boot=50)
    json.dumps(result)
    reference = result["rates"]["reference"]
    assert result["n"]["reference"] == 1000
    assert result["parse"]["reference_unparsable"] == 0 and result["parse"]["reference_wrong_target"] == 0
    assert reference["subject_rc_in_quest"] == 0.0  # the withholding rule
    assert result["task_fraction"]["reference"]["decl"] == pytest.approx(0.594)
    assert result["task_fraction"]["binomial_p"] > 0.01  # fair coin, then withhold
    assert result["duplicates"]["reference"] == 0
    # The documented, unmodelled gap: McCoy's iid lines have far fewer intransitive main verbs.
    assert reference["intransitive"] == pytest.approx(0.098)
    assert result["frame_test"]["p_value"] < 1e-6
    assert result["template"]["tvd"] > result["template"]["noise"]["vs_generated_q95"]
