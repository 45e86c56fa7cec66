"""The fitted question-formation grammar: MLE with censoring, annotations, the shipped file and its fidelity."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import SHARED
from hypothesis import given, settings
from hypothesis import strategies as st

from assocmem.errors import AssocmemError
from assocmem.io import sha256_file
from assocmem.qf.audit import audit_reference
from assocmem.qf.fit import build_fit
from assocmem.qf.floor import plugin_floor_estimate
from assocmem.qf.generate import P_QUEST, generate_splits, parse_line, read_qf
from assocmem.qf.grammar import QUESTION_GRAMMAR, question_templates, template_of
from assocmem.qf.heldout import FIDELITY_THRESHOLD, heldout_fidelity, protocol_calibration
from assocmem.qf.mle import (
    censored_subject_mle,
    fit_distribution,
    fit_gen_table,
    fit_table,
    n_free_parameters,
    parse_templates,
    quota_prefix,
)
from assocmem.qf.weights import (
    ANNOTATIONS,
    distribution,
    read_fitted,
    rule_contexts,
    rule_keys,
    table_from_rows,
    template_probabilities,
)

QF_SHARED = SHARED / "data" / "question_formation"
needs_shared = pytest.mark.skipif(not (QF_SHARED / "question.gen").is_file() or
                                  not (QF_SHARED / "question.dev").is_file(), reason="../shared QF data absent")
RULE = {(r.lhs, " ".join(r.rhs)): i for i, r in enumerate(QUESTION_GRAMMAR)}


def _template(sentence: str):
    template = template_of(tuple(sentence.split()))
    assert template is not None
    return template


# --- annotations ------------------------------------------------------------------------------------


def test_rule_contexts_follow_the_annotation() -> None:
    t = _template("the newt that does swim doesn't admire my yak who doesn't sleep .")
    contexts = dict((QUESTION_GRAMMAR[r].lhs, c) for c, r in rule_contexts(t, "position+subject"))
    assert contexts["VP_M_S"] == "subj=RC"
    assert contexts["NP_M_S"] == "" and contexts["NP_O"] == ""
    uses = rule_contexts(t, "position+subject")
    rc_contexts = [c for c, r in uses if QUESTION_GRAMMAR[r].lhs == "RC_S"]
    assert rc_contexts == ["in=subj", "in=obj"]  # subject RC first, object RC second
    assert {c for c, _ in rule_contexts(t, "none")} == {""}
    assert [r for _, r in rule_contexts(t, "none")] == list(t.rule_ids)


def test_free_parameters_grow_with_the_annotation() -> None:
    counts = {a: n_free_parameters(a) for a in ANNOTATIONS}
    assert counts == {"none": 19, "subject": 23, "position": 26, "position+subject": 30}


def _random_table(annotation: str, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    table = {}
    for context, lhs in rule_keys(annotation):
        rules = [i for i, r in enumerate(QUESTION_GRAMMAR) if r.lhs == lhs]
        weights = rng.random(len(rules)) + 0.01
        table[(context, lhs)] = dict(zip(rules, weights / weights.sum(), strict=True))
    return table


@settings(max_examples=20, deadline=None)
@given(st.sampled_from(sorted(ANNOTATIONS)), st.integers(0, 2**31))
def test_any_annotated_table_gives_a_distribution_over_templates(annotation: str, seed: int) -> None:
    probs = template_probabilities(_random_table(annotation, seed), annotation)
    assert len(probs) == 272 and min(probs) > 0
    assert math.fsum(probs) == pytest.approx(1.0, rel=1e-12)


# --- the censored MLE of the subject choice -----------------------------------------------------------

CELLS = [(RULE[("S", "NP_M_S VP_M_S")], RULE[("NP_M_S", rhs)]) for rhs in ("Det N_S", "Det N_S Prep Det N",
                                                                           "Det N_S RC_S")]
CELLS += [(RULE[("S", "NP_M_P VP_M_P")], RULE[("NP_M_P", rhs)]) for rhs in ("Det N_P", "Det N_P Prep Det N",
                                                                           "Det N_P RC_P")]
RC_CELLS = {CELLS[2], CELLS[5]}


def _loglik(pi: dict, counts: Counter) -> float:
    share = sum(p for c, p in pi.items() if c in RC_CELLS)
    return sum(n * math.log(pi[c]) for c, n in counts.items()) - sum(counts.values()) * math.log(1 - P_QUEST * share)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 400), min_size=6, max_size=6), st.lists(st.floats(0.01, 1), min_size=6, max_size=6))
def test_censored_mle_beats_any_other_distribution(counts_list: list[int], other: list[float]) -> None:
    counts = Counter(dict(zip(CELLS, counts_list, strict=True)))
    mle = censored_subject_mle(counts)
    assert math.fsum(mle.values()) == pytest.approx(1.0)
    alternative = {c: w / sum(other) for c, w in zip(CELLS, other, strict=True)}
    assert _loglik(mle, counts) >= _loglik(alternative, counts) - 1e-9


def test_censored_mle_without_rc_lines_puts_no_mass_on_rc() -> None:
    counts = Counter({CELLS[0]: 10, CELLS[3]: 30})
    assert censored_subject_mle(counts) == {CELLS[0]: 0.25, CELLS[3]: 0.75}


def _iid_sample(dist, n: int, rng: np.random.Generator) -> list:
    """Templates of iid lines drawn like McCoy's: stream, fair coin, subject-RC questions withheld."""
    probs = np.array([t.prob for t in dist.iid])
    draws = rng.choice(len(probs), size=int(n / 0.8), p=probs / probs.sum())
    quest = rng.random(len(draws)) < P_QUEST
    kept = [dist.iid[k] for k, q in zip(draws, quest, strict=True) if not (q and dist.iid[k].subject_rc)]
    return kept[:n]


def _table_prob(table: dict, context: str, lhs: str, rhs: str) -> float:
    return table[(context, lhs)][RULE[(lhs, rhs)]]


def test_iid_fit_recovers_the_generating_table_and_naive_counts_do_not() -> None:
    truth = distribution("fitted")
    sample = _iid_sample(truth, 60_000, np.random.default_rng(3))
    fitted, _ = fit_table(sample, "position+subject", censored=True)
    naive, _ = fit_table(sample, "position+subject", censored=False)
    true_table = table_from_rows(read_fitted()["model"]["iid"], "shipped")
    p_true = _table_prob(true_table, "", "NP_M_S", "Det N_S RC_S")
    p_fit = _table_prob(fitted, "", "NP_M_S", "Det N_S RC_S")
    p_naive = _table_prob(naive, "", "NP_M_S", "Det N_S RC_S")
    stderr = math.sqrt(p_true * (1 - p_true) / (len(sample) * 0.48 * 0.8))
    assert abs(p_fit - p_true) < 4 * stderr
    assert p_naive < p_true - 10 * stderr  # withholding hides RC subjects from the quest half
    p_intrans = _table_prob(true_table, "subj=PP", "VP_M_S", "Aux_S V_intrans")
    assert _table_prob(fitted, "subj=PP", "VP_M_S", "Aux_S V_intrans") == pytest.approx(p_intrans, abs=0.03)


def test_gen_fit_reads_the_quota_from_the_stream_prefix() -> None:
    truth = distribution("fitted")
    splits, _ = generate_splits(n_train=0, n_dev=0, n_test=0, n_gen=6000, seed=8, weights=truth)
    gen = [template_of(parse_line(line, "gen").words) for line in splits["gen"]]
    groups = Counter(t.rc_kind == "ORC" for t in gen)
    assert groups[True] == 2000 and groups[False] == 4000  # the quota: n // 3 ORC
    prefix = quota_prefix(gen)
    assert all(t.rc_kind == "ORC" for t in gen[prefix:]) and gen[prefix - 1].rc_kind != "ORC"
    table, _ = fit_gen_table(gen, "position+subject")
    true_table = table_from_rows(read_fitted()["model"]["gen"], "shipped")
    orc = ("RC_S", "Rel Det N_S Aux_S V_trans")
    p_true, p_fit = (_table_prob(t, "in=subj", *orc) for t in (true_table, table))
    assert p_fit == pytest.approx(p_true, abs=0.03)
    naive = Counter(t.rc_kind == "ORC" for t in gen)[True] / len(gen)
    assert naive == pytest.approx(1 / 3) and p_true < 0.3  # the naive share is the quota's, not the stream's


def test_fit_distribution_is_normalised_and_supports_its_training_lines() -> None:
    templates = question_templates()
    dev = [templates[i] for i in (0, 5, 40, 41, 100, 150, 200, 250)]
    gen = [t for t in templates if t.subject_rc and t.rc_kind and len(t.aux_slots) == 2][:20]
    dist, tables = fit_distribution(dev, gen, "none")
    assert math.fsum(t.prob for t in dist.iid) == pytest.approx(1.0)
    assert all(t.prob > 0 for t in dist.iid if t in dev)
    assert {row["lhs"] for row in tables["iid"]} >= {"S", "NP_M_S", "VP_M_S", "NP_O"}


def test_unparsable_line_names_file_and_line() -> None:
    example = parse_line("the yak does fly . decl\tthe yak does fly .", "x:1")
    with pytest.raises(AssocmemError, match="dev.txt:1: sentence is not generated by question.gr"):
        parse_templates([example], "dev.txt")


def test_protocol_calibration_reports_rates() -> None:
    truth = distribution("fitted").iid
    result = protocol_calibration(truth, "none", n_dev=400, n_rep=3, n_boot=20)
    rates = result["pass_rate_per_fold_and_measure"]
    assert set(rates) == {"template", "length", "task"}
    assert all(0 <= v <= 1 for v in rates.values())
    assert result["pass_rate_all_measures_both_folds"] <= min(rates.values())


# --- the shipped file ----------------------------------------------------------------------------------


def test_shipped_fit_carries_provenance_and_fit_time_numbers() -> None:
    fit = read_fitted()
    assert set(fit["sources"]) == {"dev", "gen"}
    assert all(len(source["sha256"]) == 64 for source in fit["sources"].values())
    assert fit["method"] and fit["date"] and fit["model"]["annotation"] in ANNOTATIONS
    rows = fit["heldout_fidelity"]["folds"]["fit_first_half_test_second"]["rows"]
    assert {row["measure"] for row in rows} == {"template", "length", "task"}
    assert all(row["noise_floor"] > 0 for row in rows)
    assert 0 <= fit["calibration"]["pass_rate_all_measures_both_folds"] <= 1
    for estimate in fit["reference_floors"]["dev"], fit["reference_floors"]["gen"]:
        assert estimate["floor_nats_per_token"] < estimate["floor_nats_per_token_no_eos"]
        assert estimate["standard_error"] > 0


def test_missing_fitted_file_says_how_to_regenerate(tmp_path: Path) -> None:
    with pytest.raises(AssocmemError, match="python -m assocmem.qf.fit"):
        read_fitted(tmp_path / "nope.json")


@pytest.fixture(scope="module")
def mccoy() -> dict:
    dev = parse_templates(read_qf(QF_SHARED / "question.dev"), "question.dev")
    gen = parse_templates(read_qf(QF_SHARED / "question.gen"), "question.gen")
    return {"dev": dev, "gen": gen}


@needs_shared
def test_shipped_file_reproduces_from_the_fit(mccoy: dict) -> None:
    """The tables, provenance and real-data floors of the shipped file follow from McCoy's files. (The model
    selection over all candidates: the next test.)"""
    fit = read_fitted()
    assert fit["sources"]["dev"]["sha256"] == sha256_file(QF_SHARED / "question.dev")
    assert fit["sources"]["gen"]["sha256"] == sha256_file(QF_SHARED / "question.gen")
    annotation = fit["model"]["annotation"]
    _, tables = fit_distribution([t for _, t in mccoy["dev"]], [t for _, t in mccoy["gen"]], annotation)
    for name in ("iid", "gen"):
        shipped = [row | {"prob": pytest.approx(row["prob"], rel=1e-12, abs=1e-15)} for row in fit["model"][name]]
        assert shipped == tables[name]
    seed = fit["selection"]["seed"]
    assert plugin_floor_estimate([e for e, _ in mccoy["dev"]], seed=seed) == fit["reference_floors"]["dev"]


def _approx_tree(value: Any) -> Any:
    """``value`` with every float replaced by pytest.approx at 1e-9 relative (a sum's last bits vary by host)."""
    if isinstance(value, dict):
        return {key: _approx_tree(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_approx_tree(item) for item in value]
    return pytest.approx(value, rel=1e-9, abs=1e-12) if isinstance(value, float) else value


@needs_shared
def test_the_whole_shipped_file_is_what_the_fit_writes_today() -> None:
    """``python -m assocmem.qf.fit`` on McCoy's files rewrites the shipped file, its date aside: the selection over
    every candidate, the calibration, the gen table's held-out check and the floors, not only the tables. A
    change to the fit's code that moves any of them leaves the shipped file stale, and this fails."""
    shipped = read_fitted()
    today = build_fit(QF_SHARED / "question.dev", QF_SHARED / "question.gen", seed=shipped["selection"]["seed"],
                      n_boot=shipped["selection"]["n_boot"])
    assert set(today) == set(shipped)
    for key in sorted(set(shipped) - {"date"}):
        assert today[key] == _approx_tree(shipped[key]), key


@needs_shared
def test_heldout_half_is_within_noise_on_templates(mccoy: dict) -> None:
    """Fit on one half of McCoy's dev (+ gen), generate, compare with the unseen half: templates within 1.5x
    the noise floor in both folds; the numbers equal the shipped fit-time ones."""
    fit = read_fitted()
    annotation = fit["model"]["annotation"]
    gen_model = distribution("fitted").gen
    result = heldout_fidelity(mccoy["dev"], gen_model, annotation, seed=fit["selection"]["seed"],
                              n_boot=fit["selection"]["n_boot"])
    for fold in result["folds"].values():
        [template] = [row for row in fold["rows"] if row["measure"] == "template"]
        assert template["tv"] <= FIDELITY_THRESHOLD * template["noise_floor"]
    assert result["folds"] == fit["heldout_fidelity"]["folds"]


@needs_shared
def test_audit_marks_the_fitting_file_as_in_sample(tmp_path: Path) -> None:
    splits, _ = generate_splits(n_train=3000, n_dev=0, n_test=0, n_gen=0, seed=4)
    train = tmp_path / "question.train"
    train.write_text("".join(splits["train"]))
    params = {"reference_dev": str(QF_SHARED / "question.dev"), "source": "generate", "grammar_weights": "fitted"}
    result = audit_reference(train, params, n_boot=50)
    assert result["available"] and result["in_sample"]
    assert {row["measure"] for row in result["direct_fidelity"]} == {"template", "length", "task"}
    assert set(result["heldout"]["folds"]) == {"fit_first_half_test_second", "fit_second_half_test_first"}
    no_reference = audit_reference(train, params | {"reference_dev": None})
    assert not no_reference["available"] and no_reference["shipped_fit"]["annotation"]
