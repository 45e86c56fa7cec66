"""Entropy floor of the question-formation LM task: exact under our generator, estimated for real files.

An example is the LM sequence ``<sos> w1..wk . task o1..om <eos>``; the loss counts its 2k + 4 tokens
after ``<sos>`` (see :func:`assocmem.qf.generate.lm_tokens`). The output is a deterministic function of
(sentence, task), so H(sequence) = H(sentence, task | split), and the Bayes-optimal token-averaged
cross-entropy over a large sample converges to

    floor = E[-log p(sequence)] / E[number of predicted tokens].

Exact computation. The grammar is finite, so :func:`assocmem.qf.grammar.enumerate_templates` lists
all 272 preterminal templates, checking that no template has two derivations
and that preterminal word sets are disjoint and uniform. A sentence therefore determines its template,
and p(sentence) = p(template) / K(template), K being the number of word fillings. A split is a mixture of
*cells* (template, task); inside a cell every admissible sentence is equally likely, so

    H = -sum_cells w_c log(w_c / K_c),   E[tokens] = sum_cells w_c (2 k_c + 4).

Template probabilities p_t come from the generator's weights (:mod:`assocmem.qf.weights`: fitted or
published). Cells: train/dev/test hold (t, decl) with weight P(decl) p_t and (t, quest) with P(quest) p_t
unless t has a subject relative clause; gen holds (t, quest) for subject-RC templates whose two
auxiliaries share a preterminal, restricted to the (n - 1)/n of fillings where the two auxiliaries
differ. Fitted gen has its own template probabilities and McCoy's quota: its SRC and ORC templates form
two pools of exactly n - n//3 and n//3 lines, mixed in those proportions (:func:`split_pools`).

Dedupe (generator default). Sentences are deduplicated in the stream, so a split is a uniformly
shuffled set of *distinct* sentences, and its marginal distribution is not the PCFG's: after M draws
the expected number of distinct sentences of a template is K (1 - (1 - p_t/K)^M), which saturates for
the few small templates (the 2,808 four-word sentences are all drawn within ~100k draws). We take each
pool's marginal as w_c proportional to that expectation, with M solved so the expected pool size equals
the requested size. Approximation error: (i) using expected counts for realized ones is O(1/pool size);
``tests/unit/qf/test_floor.py`` checks the Monte Carlo mean of -log q over a generated pool against the value
within 4 standard errors. (ii) A model that has memorised the other pool members could also exclude
them; ``exclusion_bound_nats_per_token`` = sum_c w_c log(K_c / (K_c - u_c + 1)) / E[tokens] bounds what
that knowledge can save (u_c = expected distinct sentences in the cell). Without dedupe the value is exact.

The floor restricted to output tokens (o1..om, <eos>) is exactly 0, since the output is determined by
the input; it is returned as ``output_floor_nats_per_token`` for completeness. Every floor is given with
and without <eos> (:data:`EOS_CONVENTION`).

Real files (McCoy's) have no known generator: :func:`plugin_floor_estimate` estimates their floor by the
Miller-Madow-corrected plug-in entropy of the (task, template) frequencies plus the exact within-template
word entropy, with a bootstrap standard error; :func:`estimator_bias` measures the estimator's bias at a
given file size on samples from a known distribution.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import brentq

from assocmem.errors import AssocmemError
from assocmem.qf.generate import DEFAULT_SIZES, P_QUEST, QFExample
from assocmem.qf.grammar import Lexicon, Template, question_lexicon, template_of
from assocmem.qf.weights import QFDistribution, distribution, gen_quota_sizes, rc_group, read_fitted

IID_SPLITS = ("train", "dev", "test")
EOS_CONVENTION = (
    "EOS convention: a k-word example is the LM sequence <sos> w1..wk . task o1..o(k+1) <eos>; 'with EOS' "
    "averages the sequence entropy over its 2k+4 tokens after <sos> up to and including <eos>, as the "
    "training loss does; 'without EOS' divides the same entropy by 2k+3 (<eos> is determined by the "
    "preceding tokens and adds no entropy)."
)


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


def _iid_size(sizes: dict[str, int]) -> int:
    return sizes["train"] + sizes["dev"] + sizes["test"]


def _fitted_gen_cells(dist: QFDistribution) -> list[Cell]:
    """Gen cells of a distribution with its own gen stream: every drawn sentence is a question candidate."""
    cells = []
    for t in dist.gen or ():
        fraction = gen_admissible_fraction(t, dist.lexicon) if t.subject_rc else 0.0
        if t.prob > 0 and fraction > 0:
            cells.append(Cell(t, "quest", 1.0, fraction))
    return cells


def split_pools(split: str, dist: QFDistribution, sizes: dict[str, int]) -> list[tuple[list[Cell], int]]:
    """The pools a split is drawn from, as (unweighted cells, lines): one pool, or gen's SRC and ORC quotas."""
    if split in IID_SPLITS:
        return [(split_cells(dist.iid, dist.lexicon, "train"), _iid_size(sizes))]
    if split != "gen":
        raise AssocmemError(f"unknown question-formation split {split!r} (expected train/dev/test/gen)")
    if dist.gen is None:
        return [(split_cells(dist.iid, dist.lexicon, "gen"), sizes["gen"])]
    cells = _fitted_gen_cells(dist)
    if not dist.gen_quota:
        return [(cells, sizes["gen"])]
    quota = gen_quota_sizes(sizes["gen"])
    return [([c for c in cells if rc_group(c.template) == group], size) for group, size in quota.items() if size]


def split_distribution(split: str = "train", *, n_train: int = DEFAULT_SIZES["train"],
                       n_dev: int = DEFAULT_SIZES["dev"], n_test: int = DEFAULT_SIZES["test"],
                       n_gen: int = DEFAULT_SIZES["gen"], dedupe: bool = True,
                       weights: str | QFDistribution = "fitted") -> tuple[list[Cell], dict]:
    """Weighted cells of a split and bookkeeping (pool size, expected draws, expected distinct counts).

    Several pools (gen under the SRC:ORC quota) are mixed in proportion to their line counts; their
    templates are disjoint, so the cells stay disjoint.
    """
    dist = distribution(weights)
    sizes = {"train": n_train, "dev": n_dev, "test": n_test, "gen": n_gen}
    pools = split_pools(split, dist, sizes)
    total = sum(size for _, size in pools)
    weighted: list[Cell] = []
    distinct: list[float] = []
    draws: list[float] = []
    for cells, size in pools:
        share = size / total if total else 1.0
        if dedupe:
            cells, pool_draws, pool_distinct = _weights_dedupe(cells, size)
            draws.append(pool_draws)
            distinct += pool_distinct
        else:
            cells = _weights_no_dedupe(cells)
        weighted += [c.reweighted(c.weight * share) for c in cells]
    info: dict = {"pool_size": total, "expected_draws": max(draws) if draws else None, "distinct": distinct,
                  "pools": [size for _, size in pools]}
    return weighted, info


def entropy_floor(split: str = "train", *, n_train: int = DEFAULT_SIZES["train"],
                  n_dev: int = DEFAULT_SIZES["dev"], n_test: int = DEFAULT_SIZES["test"],
                  n_gen: int = DEFAULT_SIZES["gen"], dedupe: bool = True,
                  weights: str | QFDistribution = "fitted") -> dict:
    """Bayes-optimal per-token cross-entropy (nats) of the LM sequences of ``split``.

    train/dev/test share one distribution, gen has its own. ``weights``: the generator's distribution
    (``fitted``, ``published`` or a :class:`QFDistribution`). Sizes matter only with ``dedupe`` (the
    generator default), which makes the value an approximation (see module docstring). Returns the floor
    with and without the <eos> token (see EOS_CONVENTION), the sequence entropy, expected predicted tokens,
    expected sentence length (words, without '.'), numbers of templates and cells, the floor over source
    tokens only, the output-token floor (0 by determinism), and for dedupe the expected draws, the
    exclusion bound and the undeduplicated floor.
    """
    dist = distribution(weights)
    sizes = {"n_train": n_train, "n_dev": n_dev, "n_test": n_test, "n_gen": n_gen}
    cells, info = split_distribution(split, **sizes, dedupe=dedupe, weights=dist)
    entropy = _entropy(cells)
    tokens = sum(c.weight * (2 * c.template.n_words + 4) for c in cells)
    source_tokens = sum(c.weight * (c.template.n_words + 2) for c in cells)
    result = {
        "split": split,
        "distribution": "gen" if split == "gen" else "iid",
        "grammar_weights": dist.name,
        "dedupe": dedupe,
        "pool_size": info["pool_size"],
        "floor_nats_per_token": entropy / tokens,
        "floor_nats_per_token_no_eos": entropy / (tokens - 1),
        "eos_convention": EOS_CONVENTION,
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
        plain = entropy_floor(split, dedupe=False, weights=dist)
        result.update(exclusion_bound_nats_per_token=saved / tokens,
                      no_dedupe_floor_nats_per_token=plain["floor_nats_per_token"])
    return result


def split_floors(sizes: dict[str, int], weights: str | QFDistribution = "fitted") -> dict:
    """Exact floors of the generator's training distribution (shared by train/dev/test) and of its gen split."""
    size_args = {f"n_{split}": sizes[split] for split in ("train", "dev", "test", "gen")}
    floors: dict = {split: entropy_floor(split, **size_args, weights=weights) for split in ("train", "gen")}
    floors["grammar_weights"] = distribution(weights).name
    floors["eos_convention"] = EOS_CONVENTION
    floors["note"] = ("exact (up to the dedupe approximation) for the generator's distribution; McCoy's own files "
                      "have the estimated floors under 'reference'")
    return floors


# --- the floor of real data: a plug-in estimate ---------------------------------------------------------


def _line_values(examples: Sequence[QFExample]) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Per line: (task, template) cell id, log of the template's admissible word fillings, predicted tokens."""
    lexicon = question_lexicon()
    ids: dict[tuple[str, tuple[str, ...]], int] = {}
    cells, fillings, tokens = [], [], []
    for number, example in enumerate(examples, start=1):
        template = template_of(example.words)
        if template is None:
            raise AssocmemError(f"line {number}: sentence outside question.gr; no floor estimate is possible")
        admissible = 1.0
        if example.task == "quest" and template.subject_rc:
            admissible = gen_admissible_fraction(template, lexicon)
        cells.append(ids.setdefault((example.task, template.symbols), len(ids)))
        fillings.append(template.log_word_choices + math.log(admissible))
        tokens.append(2 * template.n_words + 4)
    return np.array(cells), np.array(fillings), np.array(tokens, dtype=float), len(ids)


def miller_madow_entropy(counts: np.ndarray) -> tuple[float, float]:
    """Plug-in entropy (nats) of a histogram and its Miller-Madow correction (m - 1) / (2N)."""
    counts = counts[counts > 0]
    n = counts.sum()
    p = counts / n
    return float(-(p * np.log(p)).sum()), (len(counts) - 1) / (2 * n)


def _mm_floor(counts: np.ndarray, mean_fillings: float, mean_tokens: float) -> tuple[float, float, float]:
    """(floor with EOS, floor without EOS, sequence entropy) from cell counts and line means."""
    plugin, correction = miller_madow_entropy(counts)
    entropy = plugin + correction + mean_fillings
    return entropy / mean_tokens, entropy / (mean_tokens - 1), entropy


def plugin_floor_estimate(examples: Sequence[QFExample], *, n_boot: int = 200, seed: int = 0) -> dict[str, Any]:
    """Entropy floor of a real file: Miller-Madow plug-in over (task, template) cells plus the exact word entropy.

    H(sequence) = H(task, template) + E[log admissible fillings], since words are uniform within each
    preterminal given the template (McCoy's files pass that check, see compare.word_uniformity). The
    first term is the plug-in entropy of the observed cell frequencies with the Miller-Madow correction
    (m - 1)/(2N), m = observed cells; the second is a sample mean. Standard errors: bootstrap over lines.
    """
    cells, fillings, tokens, n_cells = _line_values(examples)
    n = len(cells)
    floor, floor_no_eos, entropy = _mm_floor(np.bincount(cells, minlength=n_cells), fillings.mean(), tokens.mean())
    plugin, correction = miller_madow_entropy(np.bincount(cells))
    rng = np.random.default_rng(seed)
    boot = np.array([_mm_floor(np.bincount(cells[idx], minlength=n_cells), fillings[idx].mean(),
                               tokens[idx].mean())[:2] for idx in rng.integers(0, n, size=(n_boot, n))])
    return {
        "estimator": PLUGIN_METHOD,
        "floor_nats_per_token": floor,
        "floor_nats_per_token_no_eos": floor_no_eos,
        "standard_error": float(boot[:, 0].std(ddof=1)),
        "standard_error_no_eos": float(boot[:, 1].std(ddof=1)),
        "seq_entropy_nats": entropy,
        "cell_entropy_plugin_nats": plugin,
        "miller_madow_correction_nats": correction,
        "word_entropy_nats": float(fillings.mean()),
        "expected_predicted_tokens": float(tokens.mean()),
        "n_lines": n,
        "n_cells_observed": n_cells,
        "n_boot": n_boot,
        "eos_convention": EOS_CONVENTION,
    }


def estimator_bias(weights: str | QFDistribution, *, n_lines: int, n_rep: int = 200, seed: int = 0) -> dict[str, Any]:
    """How far the Miller-Madow estimate from ``n_lines`` iid lines lands from a known exact floor.

    Draws ``n_rep`` samples of (task, template) cells from the distribution (no dedupe) and compares the
    estimate with the exact undeduplicated floor: the estimator's bias and spread at McCoy's file size.
    """
    cells, _ = split_distribution("train", dedupe=False, weights=weights)
    cells = [c for c in cells if c.weight > 0]
    probs = np.array([c.weight for c in cells])
    fillings = np.array([math.log(c.n_sentences) for c in cells])
    tokens = np.array([2 * c.template.n_words + 4 for c in cells], dtype=float)
    truth = entropy_floor("train", dedupe=False, weights=weights)["floor_nats_per_token"]
    rng = np.random.default_rng(seed)
    estimates, plugins = [], []
    for counts in rng.multinomial(n_lines, probs / probs.sum(), size=n_rep):
        mean_fillings, mean_tokens = counts @ fillings / n_lines, counts @ tokens / n_lines
        estimates.append(_mm_floor(counts, mean_fillings, mean_tokens)[0])
        plugins.append((miller_madow_entropy(counts)[0] + mean_fillings) / mean_tokens)
    return {"true_floor_nats_per_token": truth, "mean_estimate": float(np.mean(estimates)),
            "sd_estimate": float(np.std(estimates, ddof=1)), "bias": float(np.mean(estimates) - truth),
            "bias_without_correction": float(np.mean(plugins) - truth), "n_lines": n_lines, "n_rep": n_rep}


FLOOR_TABLE_HEADER = ["distribution", "method", "floor with EOS (nats/token)", "floor without EOS (nats/token)",
                      "uncertainty"]
PLUGIN_METHOD = "Miller-Madow plug-in over (task, template) + exact word entropy"


def floor_table(floors: dict[str, Any]) -> list[list[Any]]:
    """Rows of the report's floor table from the data_audit's floor.json (:func:`audit_floors`): exact floors
    of our generator, Miller-Madow estimates (with bootstrap standard errors) for real files."""
    weights = floors.get("grammar_weights", "published")
    rows = [[f"our {name} distribution", f"exact ({weights} grammar)", f["floor_nats_per_token"],
             f["floor_nats_per_token_no_eos"],
             f"dedupe approximation; exclusion bound {f['exclusion_bound_nats_per_token']:.1e}"]
            for name, f in (("training", floors["train"]), ("gen", floors["gen"]))]
    reference = floors.get("reference", {})
    estimates = []
    if shipped := reference.get("shipped"):
        estimates += [(f"McCoy {split} ({shipped['sources'][split]['sha256'][:12]}, fit-time)",
                       shipped["estimates"][split]) for split in ("dev", "gen")]
    if "reference_dev" in reference:
        estimates.append((f"configured reference {reference['reference_dev']['path']}", reference["reference_dev"]))
    estimates += [(f"downloaded McCoy {split}", e) for split, e in reference.get("downloaded", {}).items()]
    return rows + [[name, PLUGIN_METHOD, e["floor_nats_per_token"], e["floor_nats_per_token_no_eos"],
                    f"± {e['standard_error']:.4f} (bootstrap s.e.)"] for name, e in estimates]


def reference_floors(params: dict[str, Any], raw_dir: Path) -> dict[str, Any]:
    """Miller-Madow floor estimates of real files: the shipped fit-time ones (McCoy's dev and gen), the
    configured ``reference_dev``, and, for downloaded data, the downloaded train and gen files."""
    from assocmem.qf.generate import read_qf

    fit = read_fitted()
    shipped = {"estimates": fit["reference_floors"], "sources": fit["sources"], "date": fit["date"],
               "origin": "measured when the shipped grammar was fitted"}
    result: dict[str, Any] = {"shipped": shipped}
    if params["reference_dev"]:
        result["reference_dev"] = {"path": str(params["reference_dev"]),
                                   **plugin_floor_estimate(read_qf(params["reference_dev"]))}
    if params["source"] == "download":
        result["downloaded"] = {split: plugin_floor_estimate(read_qf(Path(raw_dir) / f"question.{split}"))
                                for split in ("train", "gen")}
    return result


def audit_floors(params: dict[str, Any], raw_dir: Path) -> dict[str, Any]:
    """The data_audit stage's floor.json: exact floors of the generating model and estimates for real files.

    Downloaded data has no known generator, so its 'train'/'gen' floors are those of the fitted grammar
    (the best model of McCoy's files we have) and 'reference' holds the estimates measured on the files.
    """
    from assocmem.qf.variant import Variant, variant_floor

    weights = params["grammar_weights"] if params["source"] == "generate" else "fitted"
    variant = Variant.from_config(params.get("variant"))
    floors = {split: variant_floor(record, variant) if isinstance(record, dict) else record
              for split, record in split_floors(params["sizes"], weights).items()}
    if params["source"] == "download":
        floors["note"] = ("downloaded files: 'train' and 'gen' are the exact floors of the fitted grammar at these "
                          "sizes, a model of McCoy's files; 'reference.downloaded' holds estimates from the files")
    floors["reference"] = reference_floors(params, raw_dir)
    return floors
