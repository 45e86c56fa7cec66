"""Exact entropy floor: hand-computed grammar, brute force, derivation log-probs and Monte Carlo."""

from __future__ import annotations

import itertools
import math
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from qf_oracles import n_predicted_tokens

from assocmem.errors import AssocmemError
from assocmem.qf.floor import (
    EOS_CONVENTION,
    Cell,
    entropy_floor,
    estimator_bias,
    miller_madow_entropy,
    plugin_floor_estimate,
    split_cells,
    split_distribution,
    split_floors,
)
from assocmem.qf.generate import P_QUEST, QFExample, generate_splits, parse_line, passes_gen_filter
from assocmem.qf.grammar import (
    QUESTION_GRAMMAR,
    Lexicon,
    Rule,
    Template,
    build_lexicon,
    enumerate_templates,
    question_lexicon,
    question_templates,
    template_of,
)
from assocmem.qf.weights import distribution, gen_quota_sizes, published_distribution, rc_group


def _grammar(np_weights: tuple[float, float] = (3, 1), n_det: int = 2, n_verbs: int = 3) -> tuple[Rule, ...]:
    """Tiny grammar: 'Det N_S (RC_S) Aux_S V_intrans .' with optional subject relative clause."""
    rules = [
        Rule(1, "ROOT", ("S", ".")),
        Rule(1, "S", ("NP_M_S", "VP_M_S")),
        Rule(np_weights[0], "NP_M_S", ("Det", "N_S")),
        Rule(np_weights[1], "NP_M_S", ("Det", "N_S", "RC_S")),
        Rule(1, "VP_M_S", ("Aux_S", "V_intrans")),
        Rule(1, "RC_S", ("Rel", "Aux_S", "V_intrans")),
        Rule(1, "N_S", ("x",)),
        Rule(1, "Aux_S", ("does",)),
        Rule(1, "Aux_S", ("doesn't",)),
        Rule(1, "Rel", ("who",)),
    ]
    rules += [Rule(1, "Det", (f"d{i}",)) for i in range(n_det)]
    rules += [Rule(1, "V_intrans", (f"v{i}",)) for i in range(n_verbs)]
    return tuple(rules)


# --- oracles: -log q of one sequence, from its derivation or from the cell table ----------------------------


def derivation_neg_logprob(template: Template, task: str, split: str,
                           grammar: tuple[Rule, ...] = QUESTION_GRAMMAR) -> float:
    """-log p(sentence, task | split) under a grammar's printed weights, without dedupe, along the derivation.

    = -(sum of rule log-probabilities) + (sum of log word counts) - log P(task) + log P(accept). Gen-filter
    rejects are excluded by the acceptance probability; admitted sentences keep their PCFG odds.
    """
    rule_logp = _rule_logprobs(grammar)
    lexicon = _grammar_tables(grammar)[1]
    word_logcount = sum(math.log(len(lexicon.words[s])) for s in template.symbols if s in lexicon.words)
    task_logp = math.log(P_QUEST if task == "quest" else 1 - P_QUEST)
    return (-sum(rule_logp[i] for i in template.rule_ids) + word_logcount - task_logp
            + math.log(acceptance_probability(split, grammar)))


@cache
def _rule_logprobs(grammar: tuple[Rule, ...]) -> tuple[float, ...]:
    totals: dict[str, float] = {}
    for rule in grammar:
        totals[rule.lhs] = totals.get(rule.lhs, 0.0) + rule.weight
    return tuple(math.log(rule.weight / totals[rule.lhs]) for rule in grammar)


@cache
def acceptance_probability(split: str, grammar: tuple[Rule, ...] = QUESTION_GRAMMAR) -> float:
    """P(a stream draw lands in the split's pool), without dedupe."""
    return sum(c.pcfg_mass for c in split_cells(*_grammar_tables(grammar), split))


def _grammar_tables(grammar: tuple[Rule, ...]) -> tuple[tuple[Template, ...], Lexicon]:
    if grammar is QUESTION_GRAMMAR:
        return question_templates(), question_lexicon()
    return enumerate_templates(grammar), build_lexicon(grammar)


def cell_neg_logprobs(cells: list[Cell]) -> dict[tuple[tuple[str, ...], str], float]:
    """(template symbols, task) -> -log q(sentence, task) for any sentence of that cell."""
    return {(c.template.symbols, c.task): -math.log(c.weight / c.n_sentences) for c in cells if c.weight > 0}


def example_neg_logprob(example: QFExample, table: dict[tuple[tuple[str, ...], str], float]) -> float:
    """-log q(example) from :func:`cell_neg_logprobs`; inf when the split cannot contain the example."""
    owner = question_lexicon().owner
    symbols = tuple(owner.get(w, w) for w in example.words)
    return table.get((symbols, example.task), math.inf)


# --- exact floors: hand-computed, brute force, derivations, Monte Carlo ------------------------------------


def test_hand_computed_tiny_grammar() -> None:
    # T1 = Det N Aux V .           p = 3/4, K = 2*1*2*3 = 12, k = 4 words -> 12 predicted tokens
    # T2 = Det N Rel Aux V Aux V . p = 1/4, K = 2*1*1*2*3*2*3 = 72, k = 7 -> 18 predicted tokens
    # train: (T1,decl) 3/8, (T1,quest) 3/8, (T2,decl) 1/8, renormalised by 7/8 -> 3/7, 3/7, 1/7.
    grammar = _grammar()
    train = entropy_floor("train", dedupe=False, weights=published_distribution(grammar))
    entropy = 2 * (3 / 7) * math.log(12 / (3 / 7)) + (1 / 7) * math.log(72 / (1 / 7))
    assert train["seq_entropy_nats"] == pytest.approx(entropy, rel=1e-12)
    assert train["expected_predicted_tokens"] == pytest.approx(90 / 7, rel=1e-12)
    assert train["floor_nats_per_token"] == pytest.approx((6 * math.log(28) + math.log(504)) / 90, rel=1e-12)
    assert train["output_floor_nats_per_token"] == 0.0
    assert train["n_templates"] == 2 and train["n_cells"] == 3
    # gen: (T2, quest) whose two auxiliaries differ: 36 equiprobable sentences of 18 tokens.
    gen = entropy_floor("gen", dedupe=False, weights=published_distribution(grammar))
    assert gen["floor_nats_per_token"] == pytest.approx(math.log(36) / 18, rel=1e-12)
    assert acceptance_probability("train", grammar) == pytest.approx(7 / 8)
    assert acceptance_probability("gen", grammar) == pytest.approx(1 / 4 * 1 / 2 * 1 / 2)


def test_dedupe_limits_on_tiny_grammar() -> None:
    weights = published_distribution(_grammar())
    plain = entropy_floor("train", dedupe=False, weights=weights)["floor_nats_per_token"]
    tiny_pool = entropy_floor("train", n_train=1, n_dev=0, n_test=0, weights=weights)
    assert tiny_pool["floor_nats_per_token"] == pytest.approx(plain, rel=1e-3)
    # Capacity is 48 distinct (sentence, task) pairs (12 + 36); a full pool is uniform over 96 possible
    # pairs (each sentence with either task), 1/4 of mass on T1 (12 tokens), 3/4 on T2 (18 tokens).
    full = entropy_floor("train", n_train=47, n_dev=0, n_test=0, weights=weights)
    assert full["floor_nats_per_token"] == pytest.approx(math.log(96) / 16.5, rel=0.02)
    with pytest.raises(AssocmemError, match="exceeds"):
        entropy_floor("train", n_train=48, n_dev=0, n_test=0, weights=weights)
    with pytest.raises(AssocmemError, match="positive"):
        entropy_floor("gen", n_gen=0, weights=weights)


def _brute_force(grammar: tuple[Rule, ...], split: str) -> tuple[float, float]:
    """Entropy and expected tokens by listing every sentence of every template."""
    lexicon = build_lexicon(grammar)
    masses = []
    for t in enumerate_templates(grammar):
        fillings = itertools.product(*[lexicon.words.get(s, (s,)) for s in t.symbols])
        for words in fillings:
            p = t.prob / math.exp(t.log_word_choices)
            if split == "train":
                masses.append((p * 0.5, t.n_words))
                if not t.subject_rc:
                    masses.append((p * 0.5, t.n_words))
            elif t.subject_rc and passes_gen_filter(words, t):
                masses.append((p * 0.5, t.n_words))
    total = sum(m for m, _ in masses)
    entropy = -sum(m / total * math.log(m / total) for m, _ in masses)
    return entropy, sum(m / total * (2 * k + 4) for m, k in masses)


@settings(max_examples=40, deadline=None)
@given(st.floats(0.05, 20), st.floats(0.05, 20), st.integers(1, 3), st.integers(1, 4),
       st.sampled_from(["train", "gen"]))
def test_floor_equals_brute_force(w_bare: float, w_rc: float, n_det: int, n_verbs: int, split: str) -> None:
    grammar = _grammar((w_bare, w_rc), n_det, n_verbs)
    entropy, tokens = _brute_force(grammar, split)
    result = entropy_floor(split, dedupe=False, weights=published_distribution(grammar))
    assert result["seq_entropy_nats"] == pytest.approx(entropy, rel=1e-9, abs=1e-12)
    assert result["expected_predicted_tokens"] == pytest.approx(tokens, rel=1e-12)


@pytest.mark.parametrize("split", ["train", "gen"])
def test_cell_values_equal_derivation_logprobs(split: str) -> None:
    cells, _ = split_distribution(split, dedupe=False, weights="published")
    for cell in cells:
        expected = -math.log(cell.weight / cell.n_sentences)
        assert derivation_neg_logprob(cell.template, cell.task, split) == pytest.approx(expected, rel=1e-12)


def test_question_grammar_values() -> None:
    train = entropy_floor("train", dedupe=False, weights="published")
    gen = entropy_floor("gen", dedupe=False, weights="published")
    assert train["n_templates"] == 272 and gen["n_templates"] == 56
    assert train["expected_predicted_tokens"] == pytest.approx(2 * train["expected_sentence_length"] + 4)
    assert train["floor_nats_per_token"] == pytest.approx(0.9868982549669907, rel=1e-12)
    assert gen["floor_nats_per_token"] == pytest.approx(0.8264170823786489, rel=1e-12)
    assert entropy_floor("dev", dedupe=False, weights="published") == {**train, "split": "dev"}
    deduped = entropy_floor("train", weights="published")
    assert deduped["no_dedupe_floor_nats_per_token"] == train["floor_nats_per_token"]
    assert 0 < deduped["exclusion_bound_nats_per_token"] < 0.01
    assert deduped["expected_draws"] > 111_000
    with pytest.raises(AssocmemError, match="unknown"):
        entropy_floor("validation")


def _monte_carlo(lines: list[str], split: str, table: dict, derivation: bool) -> tuple[float, float, float]:
    examples = [parse_line(line, split) for line in lines]
    if derivation:
        values = np.array([derivation_neg_logprob(template_of(e.words), e.task, split) for e in examples])
    else:
        values = np.array([example_neg_logprob(e, table) for e in examples])
    tokens = np.array([n_predicted_tokens(e) for e in examples])
    return float(values.mean()), float(values.std(ddof=1) / math.sqrt(len(values))), float(tokens.mean())


@pytest.mark.parametrize("weights", ["published", "fitted"])
@pytest.mark.parametrize("dedupe", [False, True])
@pytest.mark.parametrize("split", ["train", "gen"])
def test_monte_carlo_agrees_with_exact(weights: str, dedupe: bool, split: str) -> None:
    sizes = {"n_train": 20000, "n_dev": 0, "n_test": 0, "n_gen": 3000}
    splits, _ = generate_splits(seed=2024, dedupe=dedupe, weights=weights, **sizes)
    cells, _ = split_distribution(split, dedupe=dedupe, weights=weights, **sizes)
    # Published without dedupe: per-sequence values from the derivation alone (rule log-probs, word
    # log-counts, task, acceptance); otherwise from the (deduplicated, quota-mixed) cell weights.
    derivation = weights == "published" and not dedupe
    mean, stderr, tokens = _monte_carlo(splits[split], split, cell_neg_logprobs(cells), derivation=derivation)
    exact = entropy_floor(split, dedupe=dedupe, weights=weights, **sizes)
    assert abs(mean - exact["seq_entropy_nats"]) < 4 * stderr
    assert tokens == pytest.approx(exact["expected_predicted_tokens"], abs=0.3)


# --- fitted weights: quota pools, EOS convention -----------------------------------------------------------


def test_fitted_gen_mixes_the_quota_pools_exactly() -> None:
    cells, info = split_distribution("gen", n_gen=3000, weights="fitted")
    orc = sum(c.weight for c in cells if rc_group(c.template) == "ORC")
    assert orc == pytest.approx(gen_quota_sizes(3000)["ORC"] / 3000, rel=1e-12)
    assert info["pools"] == [2000, 1000]
    assert all(c.task == "quest" and c.template.subject_rc for c in cells)


@pytest.mark.parametrize("weights", ["published", "fitted"])
def test_floor_with_and_without_eos(weights: str) -> None:
    result = entropy_floor("train", weights=weights)
    assert result["floor_nats_per_token_no_eos"] == pytest.approx(
        result["seq_entropy_nats"] / (result["expected_predicted_tokens"] - 1), rel=1e-12)
    assert result["eos_convention"] == EOS_CONVENTION and "2k+4" in EOS_CONVENTION
    floors = split_floors({"train": 2000, "dev": 100, "test": 200, "gen": 200}, weights)
    assert floors["grammar_weights"] == weights and floors["gen"]["grammar_weights"] == weights


def test_fitted_and_published_floors_differ() -> None:
    fitted = entropy_floor("train", dedupe=False, weights="fitted")["floor_nats_per_token"]
    published = entropy_floor("train", dedupe=False, weights="published")["floor_nats_per_token"]
    assert abs(fitted - published) > 0.001


# --- plug-in estimate for real files --------------------------------------------------------------------


@given(st.lists(st.integers(0, 50), min_size=1, max_size=30).filter(lambda c: sum(c) > 0))
def test_miller_madow_is_plugin_plus_half_cells_over_n(counts: list[int]) -> None:
    array = np.array(counts, dtype=float)
    plugin, correction = miller_madow_entropy(array)
    p = array[array > 0] / array.sum()
    assert plugin == pytest.approx(float(-(p * np.log(p)).sum()), abs=1e-12)
    assert correction == pytest.approx((np.count_nonzero(array) - 1) / (2 * array.sum()))


def test_plugin_estimate_lands_near_the_exact_floor() -> None:
    """On 20,000 generated lines (no dedupe) the estimate is within 4 standard errors of the exact floor."""
    splits, _ = generate_splits(n_train=20000, n_dev=0, n_test=0, n_gen=0, seed=31, dedupe=False)
    estimate = plugin_floor_estimate([parse_line(x, "t") for x in splits["train"]], n_boot=50, seed=1)
    exact = entropy_floor("train", dedupe=False, weights="fitted")
    assert abs(estimate["floor_nats_per_token"] - exact["floor_nats_per_token"]) < 4 * estimate["standard_error"]
    assert estimate["floor_nats_per_token_no_eos"] > estimate["floor_nats_per_token"]


def test_estimator_bias_is_small_at_mccoys_file_size() -> None:
    check = estimator_bias(distribution("fitted"), n_lines=1000, n_rep=30, seed=2)
    assert check["true_floor_nats_per_token"] == entropy_floor("train", dedupe=False)["floor_nats_per_token"]
    assert abs(check["bias"]) < abs(check["bias_without_correction"])  # Miller-Madow removes most of the bias
    assert abs(check["bias"]) < 3 * check["sd_estimate"]


def test_floor_table_lists_exact_and_estimated_floors(tmp_path: Path) -> None:
    from assocmem.qf.floor import FLOOR_TABLE_HEADER, audit_floors, floor_table

    params = {"sizes": {"train": 2000, "dev": 100, "test": 200, "gen": 200}, "source": "generate",
              "grammar_weights": "fitted", "reference_dev": None}
    floors = audit_floors(params, tmp_path)
    rows = floor_table(floors)
    assert [row[0] for row in rows] == ["our training distribution", "our gen distribution",
                                        *(f"McCoy {s} ({floors['reference']['shipped']['sources'][s]['sha256'][:12]}, "
                                          "fit-time)" for s in ("dev", "gen"))]
    assert all(len(row) == len(FLOOR_TABLE_HEADER) and row[2] < row[3] for row in rows)  # EOS lowers the floor
    assert rows[0][2] == floors["train"]["floor_nats_per_token"]
