"""The held-out fidelity of a fitted question-formation grammar and the choice of its annotation: fit on one half of
McCoy's dev (or gen) lines, generate, compare with the other half beside its sampling-noise floor; and how often that
check passes for a model class that contains the truth (:func:`protocol_calibration`). :mod:`assocmem.qf.fit` states
the protocol and its caveats.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from assocmem.qf.compare import FIDELITY_MEASURES, fidelity_row, fidelity_rows
from assocmem.qf.generate import P_QUEST, QFExample, generate_splits, parse_line
from assocmem.qf.grammar import Template, question_lexicon, question_templates
from assocmem.qf.mle import fit_gen_table, fitted_iid_templates, gen_model, n_free_parameters
from assocmem.qf.weights import ANNOTATIONS, QFDistribution, reweighted, template_probabilities

FIDELITY_THRESHOLD = 1.5
HELDOUT_SIZES = {"n_train": 100_000, "n_dev": 1_000, "n_test": 10_000, "n_gen": 0}
FIT_SEED = 20_240_517
N_BOOT = 1000


def iid_cell_probabilities(dist: QFDistribution) -> dict[tuple[str, tuple[str, ...]], float]:
    """P(task, template) of an iid line: fair coin, subject-RC questions withheld (dedupe ignored)."""
    cells = {}
    for t in dist.iid:
        cells[("decl", t.symbols)] = (1 - P_QUEST) * t.prob
        if not t.subject_rc:
            cells[("quest", t.symbols)] = P_QUEST * t.prob
    total = sum(cells.values())
    return {k: v / total for k, v in cells.items()}


def heldout_loglik(dist: QFDistribution, heldout: Sequence[tuple[QFExample, Template]]) -> dict[str, Any]:
    """Mean log-probability of the held-out lines' (task, template) and how many the model cannot produce."""
    cells = iid_cell_probabilities(dist)
    values = [cells.get((e.task, t.symbols), 0.0) for e, t in heldout]
    supported = [math.log(v) for v in values if v > 0]
    return {"mean_loglik_supported": float(np.mean(supported)) if supported else None,
            "unsupported_lines": sum(v == 0 for v in values), "n": len(values)}


def _generated_train(dist: QFDistribution, seed: int) -> list[QFExample]:
    splits, _ = generate_splits(**HELDOUT_SIZES, seed=seed, weights=dist)
    return [parse_line(line, "generated") for line in splits["train"]]


def heldout_fold(fit_half: Sequence[tuple[QFExample, Template]], test_half: Sequence[tuple[QFExample, Template]],
                 gen: tuple[Template, ...], annotation: str, *, seed: int, n_boot: int = N_BOOT) -> dict[str, Any]:
    """Fit the iid table on ``fit_half``, generate (``gen``: the gen model), and compare with ``test_half``,
    which the fit never saw."""
    dist = QFDistribution("fitted-half", fitted_iid_templates([t for _, t in fit_half], annotation), gen,
                          question_lexicon(), gen_quota=True)
    generated = _generated_train(dist, seed)
    rows = fidelity_rows(generated, [e for e, _ in test_half], n_boot=n_boot, seed=seed,
                         threshold=FIDELITY_THRESHOLD)
    return {"rows": rows, "passes": all(row["passes"] for row in rows),
            "heldout_loglik": heldout_loglik(dist, test_half), "n_fit": len(fit_half), "n_heldout": len(test_half)}


def heldout_fidelity(dev: Sequence[tuple[QFExample, Template]], gen: tuple[Template, ...], annotation: str, *,
                     seed: int = FIT_SEED, n_boot: int = N_BOOT) -> dict[str, Any]:
    """Both folds: first half of dev (file order) -> second half, and second -> first. ``gen``: the gen
    model's templates (:func:`gen_model`); it does not affect the iid lines compared here."""
    half = len(dev) // 2
    first, second = list(dev[:half]), list(dev[half:])
    folds = {"fit_first_half_test_second": heldout_fold(first, second, gen, annotation, seed=seed, n_boot=n_boot),
             "fit_second_half_test_first": heldout_fold(second, first, gen, annotation, seed=seed + 1,
                                                        n_boot=n_boot)}
    return {"annotation": annotation, "free_parameters_per_table": n_free_parameters(annotation),
            "folds": folds, "passes": all(fold["passes"] for fold in folds.values())}


def gen_heldout_fidelity(gen: Sequence[tuple[QFExample, Template]], annotation: str, *, seed: int = FIT_SEED,
                         n_boot: int = N_BOOT) -> dict[str, Any]:
    """The gen table's own held-out check: fit on every other line of McCoy's gen, generate a gen split of
    the full file's size under the quota, compare with the remaining lines (both folds). Halves interleave
    because the file is in generation order (its tail is all ORC). The task row is trivially 0."""
    halves = (list(gen[0::2]), list(gen[1::2]))
    folds = {}
    for name, (fit_half, test_half), offset in (("fit_even_lines_test_odd", halves, 0),
                                                ("fit_odd_lines_test_even", halves[::-1], 1)):
        table, _ = fit_gen_table([t for _, t in fit_half], annotation)
        dist = QFDistribution("fitted-gen-half", question_templates(),
                              reweighted(template_probabilities(table, annotation)), question_lexicon(), gen_quota=True)
        splits, _ = generate_splits(n_train=0, n_dev=0, n_test=0, n_gen=len(gen), seed=seed + offset, weights=dist)
        generated = [parse_line(line, "generated") for line in splits["gen"]]
        rows = fidelity_rows(generated, [e for e, _ in test_half], n_boot=n_boot, seed=seed + offset,
                             threshold=FIDELITY_THRESHOLD)
        folds[name] = {"rows": rows, "passes": all(row["passes"] for row in rows)}
    return {"annotation": annotation, "folds": folds, "passes": all(f["passes"] for f in folds.values())}


def candidate_order() -> list[str]:
    """Annotations from the fewest free parameters to the most (ties: the order of ANNOTATIONS)."""
    return sorted(ANNOTATIONS, key=n_free_parameters)


def select_annotation(dev: Sequence[tuple[QFExample, Template]], gen: Sequence[Template], *, seed: int = FIT_SEED,
                      n_boot: int = N_BOOT) -> tuple[str, str, list[dict[str, Any]]]:
    """The annotation to ship, the rule that chose it, and every candidate's held-out result.

    Rule: the simplest annotation whose held-out fidelity passes. If none passes, the one with the best
    held-out log-likelihood (fewest unsupported lines, then highest mean log-probability, over both
    folds) is shipped and marked as failing.
    """
    candidates = [heldout_fidelity(dev, gen_model(gen, annotation), annotation, seed=seed, n_boot=n_boot)
                  for annotation in candidate_order()]
    passing = [c for c in candidates if c["passes"]]
    if passing:
        return passing[0]["annotation"], "simplest candidate that passes the held-out fidelity check", candidates
    best = max(candidates, key=_heldout_score)
    return best["annotation"], "no candidate passes; best held-out log-likelihood", candidates


def _heldout_score(candidate: dict[str, Any]) -> tuple[int, float]:
    folds = [fold["heldout_loglik"] for fold in candidate["folds"].values()]
    return -sum(f["unsupported_lines"] for f in folds), float(np.mean([f["mean_loglik_supported"] for f in folds]))


# --- how often the held-out check passes for a model class that contains the truth --------------------


def _iid_cell_space() -> list[tuple[str, Template]]:
    """Every (task, template) an iid line can have: decl for all templates, quest without subject RC."""
    space = [("decl", t) for t in question_templates()]
    return space + [("quest", t) for t in question_templates() if not t.subject_rc]


def _cell_vector(templates: Sequence[Template], space: Sequence[tuple[str, Template]]) -> np.ndarray:
    probs = {t.symbols: t.prob for t in templates}
    values = np.array([(P_QUEST if task == "quest" else 1 - P_QUEST) * probs[t.symbols] for task, t in space])
    return values / values.sum()


def protocol_calibration(truth: Sequence[Template], annotation: str, *, n_dev: int, n_rep: int = 200,
                         seed: int = FIT_SEED, n_boot: int = 200) -> dict[str, Any]:
    """Pass rates of the held-out check when the data really come from ``truth`` and the candidate class
    (``annotation``) contains it: simulated dev files of ``n_dev`` lines, the same two folds, threshold and
    generated size. Simulated at the (task, template) level without dedupe; the half-size fit's estimation
    error is what makes a correct model fail, which the noise floor (sampling noise only) does not include.
    """
    rng = np.random.default_rng(seed)
    space = _iid_cell_space()
    truth_probs = _cell_vector(truth, space)
    groups = {"template": np.arange(len(space)), "length": np.array([t.n_words for _, t in space]),
              "task": np.array([task == "quest" for task, _ in space], dtype=int)}
    results: dict[str, list[float]] = {m: [] for m in FIDELITY_MEASURES}
    passes_all, passes_template = [], []
    for _ in range(n_rep):
        lines = rng.choice(len(space), size=n_dev, p=truth_probs)
        halves = (lines[: n_dev // 2], lines[n_dev // 2 :])
        rows = []
        for fit_half, test_half in (halves, halves[::-1]):
            model = fitted_iid_templates([space[i][1] for i in fit_half], annotation)
            generated = rng.multinomial(HELDOUT_SIZES["n_train"], _cell_vector(model, space))
            reference = np.bincount(test_half, minlength=len(space))
            for measure, group in groups.items():
                rows.append(fidelity_row(measure, np.bincount(group, generated).astype(float),
                                         np.bincount(group, reference).astype(float), n_boot=n_boot, rng=rng,
                                         threshold=FIDELITY_THRESHOLD))
        for row in rows:
            results[row["measure"]].append(row["passes"])
        passes_all.append(all(row["passes"] for row in rows))
        passes_template.append(all(row["passes"] for row in rows if row["measure"] == "template"))
    return {"annotation": annotation, "n_dev": n_dev, "n_rep": n_rep, "n_boot": n_boot,
            "pass_rate_all_measures_both_folds": float(np.mean(passes_all)),
            "pass_rate_template_both_folds": float(np.mean(passes_template)),
            "pass_rate_per_fold_and_measure": {m: float(np.mean(v)) for m, v in results.items()},
            "truth": "the shipped fit (all of dev + gen), as if it were McCoy's generator"}
