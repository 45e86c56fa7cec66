"""Exact entropy floor of the question-formation LM task under our generator.

An example is the LM sequence ``<sos> w1..wk . task o1..om <eos>``; the loss counts its 2k + 4 tokens
after ``<sos>`` (see :func:`assocmem.qf.generate.lm_tokens`). The output is a deterministic function of
(sentence, task), so H(sequence) = H(sentence, task | split), and the Bayes-optimal token-averaged
cross-entropy over a large sample converges to

    floor = E[-log p(sequence)] / E[number of predicted tokens].

Exact computation. The grammar is finite, so :func:`assocmem.qf.grammar.enumerate_templates` lists
all 272 preterminal templates with their probabilities, checking that no template has two derivations
and that preterminal word sets are disjoint and uniform. A sentence therefore determines its template,
and p(sentence) = p(template) / K(template), K being the number of word fillings. A split is a mixture of
*cells* (template, task); inside a cell every admissible sentence is equally likely, so

    H = -sum_cells w_c log(w_c / K_c),   E[tokens] = sum_cells w_c (2 k_c + 4).

Cells: train/dev/test hold (t, decl) with weight P(decl) p_t and (t, quest) with P(quest) p_t unless t
has a subject relative clause; gen holds (t, quest) for subject-RC templates whose two auxiliaries share
a preterminal, restricted to the (n - 1)/n of fillings where the two auxiliaries differ.

Dedupe (generator default). Sentences are deduplicated in the stream, so a split is a uniformly
shuffled set of *distinct* sentences, and its marginal distribution is not the PCFG's: after M draws
the expected number of distinct sentences of a template is K (1 - (1 - p_t/K)^M), which saturates for
the few small templates (the 2,808 four-word sentences are all drawn within ~100k draws). We take each
pool's marginal as w_c proportional to that expectation, with M solved so the expected pool size equals
the requested size. Approximation error: (i) using expected counts for realized ones is O(1/pool size);
``tests/test_floor.py`` checks the Monte Carlo mean of -log q over a generated pool against the value
within 4 standard errors. (ii) A model that has memorised the other pool members could also exclude
them; ``exclusion_bound_nats_per_token`` = sum_c w_c log(K_c / (K_c - u_c + 1)) / E[tokens] bounds what
that knowledge can save (u_c = expected distinct sentences in the cell). Without dedupe the value is exact.

The floor restricted to output tokens (o1..om, <eos>) is exactly 0, since the output is determined by
the input; it is returned as ``output_floor_nats_per_token`` for completeness.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

from scipy.optimize import brentq

from assocmem.io import AssocmemError
from assocmem.qf.generate import DEFAULT_SIZES, P_QUEST, QFExample
from assocmem.qf.grammar import (
    QUESTION_GRAMMAR,
    Lexicon,
    Rule,
    Template,
    build_lexicon,
    enumerate_templates,
    question_lexicon,
    question_templates,
)

IID_SPLITS = ("train", "dev", "test")


@dataclass(frozen=True)
class Cell:
    """(template, task) restricted to its admissible fillings, with its probability in the split."""

    template: Template
    task: str
    task_prob: float
    admissible: float  # fraction of the template's fillings allowed in the split (gen filter), else 1
    weight: float = 0.0

    @property
    def n_sentences(self) -> float:
        """Admissible word fillings K_c (all equiprobable)."""
        return math.exp(self.template.log_word_choices) * self.admissible

    @property
    def pcfg_mass(self) -> float:
        """Probability that one stream draw hits this cell (before dedupe and normalisation)."""
        return self.template.prob * self.task_prob * self.admissible

    def reweighted(self, weight: float) -> Cell:
        return Cell(self.template, self.task, self.task_prob, self.admissible, weight)


def gen_admissible_fraction(template: Template, lexicon: Lexicon) -> float:
    """Fraction of a template's fillings that pass McCoy's gen filter (two same-number, unequal auxes)."""
    slots = template.aux_slots
    if len(slots) != 2 or template.symbols[slots[0]] != template.symbols[slots[1]]:
        return 0.0
    n = len(lexicon.words[template.symbols[slots[0]]])
    return (n - 1) / n


def split_cells(templates: tuple[Template, ...], lexicon: Lexicon, split: str) -> list[Cell]:
    """The (template, task) cells of a split, unweighted."""
    cells = []
    for t in templates:
        if split in IID_SPLITS:
            cells.append(Cell(t, "decl", 1 - P_QUEST, 1.0))
            if not t.subject_rc:
                cells.append(Cell(t, "quest", P_QUEST, 1.0))
        elif split == "gen":
            fraction = gen_admissible_fraction(t, lexicon) if t.subject_rc else 0.0
            if fraction > 0:
                cells.append(Cell(t, "quest", P_QUEST, fraction))
        else:
            raise AssocmemError(f"unknown question-formation split {split!r} (expected train/dev/test/gen)")
    return cells


def _expected_distinct(cell: Cell, draws: float) -> float:
    """Expected distinct sentences in the cell after ``draws`` stream draws.

    A sentence enters on its first draw and gets its task coin once, hence the task factor.
    """
    per_sentence = cell.template.prob / math.exp(cell.template.log_word_choices)
    seen_fraction = 1.0 if math.isinf(draws) else -math.expm1(draws * math.log1p(-per_sentence))
    return cell.n_sentences * seen_fraction * cell.task_prob


def _weights_no_dedupe(cells: list[Cell]) -> list[Cell]:
    total = sum(c.pcfg_mass for c in cells)
    return [c.reweighted(c.pcfg_mass / total) for c in cells]


def _solve_draws(cells: list[Cell], pool_size: int) -> float:
    if pool_size <= 0:
        raise AssocmemError(f"pool size must be positive for a deduplicated split, got {pool_size}")
    capacity = sum(_expected_distinct(c, math.inf) for c in cells)
    if pool_size >= capacity:
        raise AssocmemError(f"pool size {pool_size} exceeds the {capacity:.0f} distinct examples available")
    return brentq(lambda m: sum(_expected_distinct(c, m) for c in cells) - pool_size, 0.0, 1e15,
                  xtol=1e-6, rtol=1e-12)


def _weights_dedupe(cells: list[Cell], pool_size: int) -> tuple[list[Cell], float, list[float]]:
    draws = _solve_draws(cells, pool_size)
    distinct = [_expected_distinct(c, draws) for c in cells]
    total = sum(distinct)
    weighted = [c.reweighted(u / total) for c, u in zip(cells, distinct, strict=True)]
    return weighted, draws, distinct


def _entropy(cells: list[Cell]) -> float:
    return -sum(c.weight * math.log(c.weight / c.n_sentences) for c in cells if c.weight > 0)


def _pool_size(split: str, sizes: dict[str, int]) -> int:
    if split == "gen":
        return sizes["gen"]
    return sizes["train"] + sizes["dev"] + sizes["test"]


def split_distribution(split: str = "train", *, n_train: int = DEFAULT_SIZES["train"],
                       n_dev: int = DEFAULT_SIZES["dev"], n_test: int = DEFAULT_SIZES["test"],
                       n_gen: int = DEFAULT_SIZES["gen"], dedupe: bool = True,
                       grammar: tuple[Rule, ...] = QUESTION_GRAMMAR) -> tuple[list[Cell], dict]:
    """Weighted cells of a split and bookkeeping (pool size, expected draws, expected distinct counts)."""
    cells = split_cells(*_grammar_tables(grammar), split)
    sizes = {"train": n_train, "dev": n_dev, "test": n_test, "gen": n_gen}
    info: dict = {"pool_size": _pool_size(split, sizes), "expected_draws": None}
    if dedupe:
        cells, draws, distinct = _weights_dedupe(cells, info["pool_size"])
        info.update(expected_draws=draws, distinct=distinct)
    else:
        cells = _weights_no_dedupe(cells)
    return cells, info


def entropy_floor(split: str = "train", *, n_train: int = DEFAULT_SIZES["train"],
                  n_dev: int = DEFAULT_SIZES["dev"], n_test: int = DEFAULT_SIZES["test"],
                  n_gen: int = DEFAULT_SIZES["gen"], dedupe: bool = True,
                  grammar: tuple[Rule, ...] = QUESTION_GRAMMAR) -> dict:
    """Bayes-optimal per-token cross-entropy (nats) of the LM sequences of ``split``.

    train/dev/test share one distribution, gen has its own. Sizes matter only with ``dedupe`` (the
    generator default), which makes the value an approximation (see module docstring). Returns the floor,
    the sequence entropy, expected predicted tokens, expected sentence length (words, without '.'),
    numbers of templates and cells, the floor over source tokens only, the output-token floor (0 by
    determinism), and for dedupe the expected draws, the exclusion bound and the undeduplicated floor.
    """
    cells, info = split_distribution(split, n_train=n_train, n_dev=n_dev, n_test=n_test, n_gen=n_gen,
                                     dedupe=dedupe, grammar=grammar)
    entropy = _entropy(cells)
    tokens = sum(c.weight * (2 * c.template.n_words + 4) for c in cells)
    source_tokens = sum(c.weight * (c.template.n_words + 2) for c in cells)
    result = {
        "split": split,
        "distribution": "gen" if split == "gen" else "iid",
        "dedupe": dedupe,
        "pool_size": info["pool_size"],
        "floor_nats_per_token": entropy / tokens,
        "seq_entropy_nats": entropy,
        "expected_predicted_tokens": tokens,
        "expected_sentence_length": sum(c.weight * c.template.n_words for c in cells),
        "n_templates": len({c.template.symbols for c in cells if c.weight > 0}),
        "n_cells": sum(c.weight > 0 for c in cells),
        "source_floor_nats_per_token": entropy / source_tokens,
        "output_floor_nats_per_token": 0.0,
        "output_floor_note": "outputs are a deterministic function of (sentence, task): zero entropy",
        "task_fraction_quest": sum(c.weight for c in cells if c.task == "quest"),
        "expected_draws": info["expected_draws"],
        "exclusion_bound_nats_per_token": 0.0,
    }
    if dedupe:
        saved = sum(c.weight * math.log(c.n_sentences / max(c.n_sentences - u + 1, 1.0))
                    for c, u in zip(cells, info["distinct"], strict=True))
        plain = entropy_floor(split, dedupe=False, grammar=grammar)
        result.update(exclusion_bound_nats_per_token=saved / tokens,
                      no_dedupe_floor_nats_per_token=plain["floor_nats_per_token"])
    return result


def derivation_neg_logprob(template: Template, task: str, split: str,
                           grammar: tuple[Rule, ...] = QUESTION_GRAMMAR) -> float:
    """-log p(sentence, task | split) without dedupe, summed along the derivation.

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


def split_floors(sizes: dict[str, int]) -> dict:
    """Exact floors of the training distribution (shared by train/dev/test) and of the gen split."""
    size_args = {f"n_{split}": sizes[split] for split in ("train", "dev", "test", "gen")}
    floors: dict = {split: entropy_floor(split, **size_args) for split in ("train", "gen")}
    floors["note"] = ("exact for the generator's distribution; applies to downloaded data only if it "
                      "follows the same distribution")
    return floors
