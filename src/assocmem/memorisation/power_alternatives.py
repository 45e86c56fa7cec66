"""Power of a memorisation design against the truths a referee names (issue 38, item 1), not only the model it fits.

Truths, each at every law's b (1, 1.35, 2), all fitted to a recorded grid so their boundaries sit where the data
put them:

- ``pure``: N_b = c D^b (no overhead), c and the sharpness k at the profile maximum with N0 = 0;
- ``overhead``: N_b = N0 + c D^b, N0, c and k at the profile maximum at that b;
- ``budget``: the overhead truth is the capacity boundary, but the grid sees a boundary moved up by the exposure
  budget: log N_seen(D) = log N_b(D) + δ0 + δ1 (log D - log D_ref), (δ0, δ1) the linear fit in log D of the shift
  between the boundary within half the budget and at the full budget in the record (the next doubling of the
  budget assumed to move it as much as the last). The truth is the capacity b.

Under every truth the boundary within half the budget lies (δ0, δ1) above the one the grid sees at the full budget,
as in the record: each run's two outcomes are drawn from one uniform, so a run stored within half is stored.

Each simulated grid is fitted three times: by the overhead model (:mod:`assocmem.memorisation.boundary_overhead`;
its b interval read through the profile gap at the truth and at each law), by the pure power law
(:mod:`assocmem.memorisation.boundary`) and, with ``two_budget``, by the two-budget model
(:mod:`assocmem.memorisation.boundary_budget`, read as the overhead model). A design decides (``can_decide``) only
if the chosen model's interval covers the truth in >= 90% of grids under every truth and the wrong law of ``pairs``
is excluded in >= 80%.
"""

from __future__ import annotations

from itertools import permutations
from typing import Any

import numpy as np
import pandas as pd
from scipy import special, stats

from assocmem.errors import AssocmemError
from assocmem.memorisation import boundary as mb
from assocmem.memorisation import boundary_budget as bb
from assocmem.memorisation import boundary_overhead as bo
from assocmem.memorisation import boundary_power as bp

FAMILIES = ("pure", "overhead", "budget")
FAMILY_LABELS = {"pure": "pure power law (no overhead)", "overhead": "power law plus a fixed overhead",
                 "budget": "overhead, boundary moved by the exposure budget"}
MIN_COVERAGE = bp.MIN_COVERAGE
MIN_POWER = bp.MIN_POWER


def _two_fixed(values: dict[int, float]) -> bo.Mapping:
    keep = [i for i in range(4) if i not in values]
    jac = np.eye(4)[:, keep]

    def mapping(free: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        phi = np.zeros(4)
        phi[keep] = free
        for index, value in values.items():
            phi[index] = value
        return phi, jac

    return mapping


def _budget_shift(runs: pd.DataFrame, log_d_ref: float) -> tuple[float, float]:
    """(δ0, δ1): the half-budget boundary minus the full-budget one, linear in log D - log D_ref."""
    if "stored_at_half_budget" not in runs.columns:
        return 0.0, 0.0
    full = bo.fit_overhead(runs)
    half = bo.fit_overhead(runs.assign(stored=runs["stored_at_half_budget"]))
    z = np.log(np.unique(runs["n_facts"].to_numpy(float))) - log_d_ref
    shift = bo.log_boundary(half.phi, z) - bo.log_boundary(full.phi, z)  # same runs, same D_ref
    slope, intercept = np.polyfit(z, shift, 1) if z.size > 1 else (0.0, float(shift[0]))
    return float(intercept), float(slope)


def truths(runs: pd.DataFrame) -> dict[str, Any]:
    """Every family's truth at every law, fitted to ``runs`` (φ in the record's D_ref; shift (δ0, δ1))."""
    fit = bo.fit_overhead(runs)
    data = fit.data
    shift = _budget_shift(runs, data.log_d_ref)
    no_overhead = float(data.x.min()) - bo.OVERHEAD_FLOOR
    rows = []
    for law, b in mb.LAWS.items():
        _, overhead = bo.profile_b(data, b, fit.phi)
        start = [np.array([fit.phi[0], float(bo.log_boundary(fit.phi, np.zeros(1))[0])])]
        _, pure = bo._profile(data, _two_fixed({1: no_overhead, 3: b}), start, [data.bounds[0], data.bounds[2]])
        for family, phi in (("pure", pure), ("overhead", overhead), ("budget", overhead)):
            rows.append({"family": family, "law": law, "b": b, "phi": [float(v) for v in phi],
                         "n0": float(np.exp(phi[1])) if family != "pure" else 0.0,
                         "c": float(np.exp(phi[2] - b * data.log_d_ref)), "k": float(np.exp(phi[0])),
                         "shift": list(shift) if family == "budget" else [0.0, 0.0], "half_shift": list(shift)})
    return {"log_d_ref": data.log_d_ref, "budget_shift": list(shift), "rows": rows}


def _seen_boundary(truth: dict[str, Any], log_d: np.ndarray, log_d_ref: float) -> np.ndarray:
    z = log_d - log_d_ref
    delta0, delta1 = truth["shift"]
    return bo.log_boundary(np.asarray(truth["phi"]), z) + delta0 + delta1 * z


def _half_shift(truth: dict[str, Any], log_d: np.ndarray, log_d_ref: float) -> np.ndarray:
    delta0, delta1 = truth.get("half_shift", (0.0, 0.0))
    return np.maximum(delta0 + delta1 * (log_d - log_d_ref), 0.0)


def simulate(design: pd.DataFrame, truth: dict[str, Any], log_d_ref: float, rng: np.random.Generator
             ) -> pd.DataFrame:
    """``stored`` (within the budget) and ``stored_at_half_budget`` per run, from one uniform each."""
    log_n, log_d = np.log(design["n_params"].to_numpy(float)), np.log(design["n_facts"].to_numpy(float))
    seen = _seen_boundary(truth, log_d, log_d_ref)
    draw = rng.random(len(design))
    full = special.expit(truth["k"] * (log_n - seen))
    half = special.expit(truth["k"] * (log_n - seen - _half_shift(truth, log_d, log_d_ref)))
    return design.assign(stored=draw < full, stored_at_half_budget=draw < half)


def _one_grid(runs: pd.DataFrame, truth: dict[str, Any], log_d_ref: float, two_budget: bool = False
              ) -> tuple[np.ndarray, ...]:
    """(b̂, covers, excludes per law) for the overhead fit, the pure fit and (``two_budget``) the two-budget fit;
    NaN rows where a fit fails."""
    laws = list(mb.LAWS.values())
    failed = np.full(2 + len(laws), np.nan)
    try:
        data = bo.data_of(runs)
    except AssocmemError:
        return failed, failed.copy(), failed.copy()
    start = np.asarray(truth["phi"], dtype=float).copy()
    start[2] += truth["b"] * (log_d_ref - data.log_d_ref)  # m at this design's D_ref
    value, phi = bo.maximise(data, [start])
    gap = np.array([bo.gap_b(data, value, b, phi)[0] for b in (truth["b"], *laws)])
    overhead = _gap_row(phi[3], gap)
    budget = _two_budget_row(runs, phi, truth["b"], laws) if two_budget else failed.copy()
    return overhead, _pure_fit_row(runs, truth["b"], np.array(laws)), budget


def _gap_row(b_hat: float, gap: np.ndarray) -> np.ndarray:
    """(b̂, the profile gap at the truth, at each law)."""
    gap = gap - min(0.0, float(gap.min()))  # a profile above the fit: the fit had stopped short of its maximum
    return np.array([b_hat, *gap], dtype=float)


def _at_threshold(gap_rows: np.ndarray, threshold: float) -> np.ndarray:
    """(b̂, covers, excludes per law) per grid from its gap row; a failed fit (NaN b̂) stays all NaN."""
    rows = np.column_stack([gap_rows[:, 0], gap_rows[:, 1] <= threshold, gap_rows[:, 2:] > threshold])
    rows[np.isnan(gap_rows[:, 0])] = np.nan
    return rows


def _two_budget_row(runs: pd.DataFrame, phi: np.ndarray, b_true: float, laws: list[float]) -> np.ndarray:
    try:
        fit = bb.fit_two_budget(runs, phi)
    except AssocmemError:
        return np.full(2 + len(laws), np.nan)
    return _gap_row(float(fit.theta[bb.B_INDEX]), np.array([fit.gap_at_b(b) for b in (b_true, *laws)]))


def _pure_fit_row(runs: pd.DataFrame, b_true: float, laws: np.ndarray) -> np.ndarray:
    """(b̂, covers, excludes per law) of the pipeline's pure power-law fit; all NaN where that fit fails."""
    try:
        _, b_hat, low, high = mb._b_fit(mb._runs_grid(runs, "power"))
    except AssocmemError:
        return np.full(2 + len(laws), np.nan)
    return np.array([b_hat, low <= b_true <= high, *((laws < low) | (laws > high))], dtype=float)


def _summary(results: np.ndarray, truth_law: str) -> dict[str, Any]:
    ok = ~np.isnan(results[:, 0])
    n_sim = len(results)
    return {"coverage": float(np.nansum(results[:, 1]) / n_sim),
            "median_b": float(np.median(results[ok, 0])) if ok.any() else float("nan"),
            "failed": float(1 - ok.mean()),
            "excludes": {law: float(np.nansum(results[:, 2 + i]) / n_sim)
                         for i, law in enumerate(mb.LAWS) if law != truth_law}}


def design_power(design: pd.DataFrame, truth_set: dict[str, Any], *, n_sim: int, seed: int,
                 families: tuple[str, ...] = FAMILIES, two_budget: bool = False,
                 two_budget_threshold: float | None = None, keep_gaps: bool = False) -> dict[str, Any]:
    """Per truth (family × law): the overhead and pure fits' (and with ``two_budget`` the two-budget fit's, its
    interval at ``two_budget_threshold``, default χ²₁'s) coverage, median b̂, failed share and exclusions;
    ``keep_gaps``: each grid's two-budget profile gaps at the truth and at each law too (``two_budget_gaps``,
    rounded to 1e-6), which :func:`calibrated_threshold` and :func:`at_threshold` read."""
    if n_sim < 1:
        raise AssocmemError(f"power against the alternatives: n_sim must be >= 1, got {n_sim}")
    threshold = bb.check_threshold(two_budget_threshold)
    rng = np.random.default_rng(seed)
    rows = []
    for truth in (t for t in truth_set["rows"] if t["family"] in families):
        results = [_one_grid(simulate(design, truth, truth_set["log_d_ref"], rng), truth, truth_set["log_d_ref"],
                             two_budget) for _ in range(n_sim)]
        overhead, pure, budget = (np.array([r[i] for r in results]) for i in (0, 1, 2))
        row = {"family": truth["family"], "law": truth["law"], "b": truth["b"], "n0": truth["n0"], "c": truth["c"],
               "k": truth["k"], "shift": truth["shift"],
               "overhead": _summary(_at_threshold(overhead, bo.THRESHOLD), truth["law"]),
               "pure": _summary(pure, truth["law"])}
        if two_budget:
            budget = np.round(budget, 6) if keep_gaps else budget
            row["two_budget"] = _summary(_at_threshold(budget, threshold), truth["law"])
            if keep_gaps:
                row["two_budget_gaps"] = budget.tolist()
        rows.append(row)
    return {"n_sim": n_sim, "seed": seed, "level": bo.LEVEL, "budget_shift": truth_set["budget_shift"],
            "runs": len(design), "two_budget_threshold": threshold if two_budget else None, "rows": rows}


def calibrated_threshold(power: dict[str, Any], level: float = bo.LEVEL, confidence: float = 0.9) -> dict[str, Any]:
    """The critical value for the two-budget profile gap that covers the truth in ``level`` of the grids under
    every truth of ``power`` (simulated with ``keep_gaps``): per truth the smallest c with gap(b_true) <= c in at
    least ``level`` of its grids (a failed fit never covers), the largest of them over the truths (the truths are
    the nuisance a referee names: the interval must hold under each), never below χ²₁'s (calibration only
    widens). Stated before it is used: it is read from its own simulated grids (``power``'s seed) and judged on
    others (:func:`at_threshold`). Its sampling uncertainty, ``threshold_interval``: per truth the distribution-free
    order-statistic interval of the ``level`` quantile at ``confidence``, the largest ends over the truths."""
    per_truth = []
    for row in power["rows"]:
        gaps = np.array(row["two_budget_gaps"], dtype=float)
        at_truth = np.sort(np.where(np.isnan(gaps[:, 0]), np.inf, gaps[:, 1]))
        need = int(np.ceil(level * at_truth.size - 1e-9))  # grids that must cover (1e-9: 0.95 × 20 is 19.000…04)
        low, high = _quantile_ranks(at_truth.size, level, confidence)
        upper = float(at_truth[high - 1]) if high <= at_truth.size else float("inf")
        per_truth.append({"family": row["family"], "law": row["law"], "quantile": float(at_truth[need - 1]),
                          "interval": [float(at_truth[low - 1]), upper]})
    worst = max(per_truth, key=lambda r: r["quantile"])
    ends = [max(bo.THRESHOLD, *(r["interval"][i] for r in per_truth)) for i in (0, 1)]
    return {"threshold": max(bo.THRESHOLD, worst["quantile"]), "level": level, "seed": power["seed"],
            "n_sim": power["n_sim"], "chi2_threshold": bo.THRESHOLD, "worst": worst, "threshold_interval": ends,
            "confidence": confidence, "per_truth": per_truth}


def _quantile_ranks(n: int, level: float, confidence: float) -> tuple[int, int]:
    """1-based ranks (r, s) with P(x_(r) <= q_level <= x_(s)) >= ``confidence`` for n draws (binomial counts);
    s = n + 1 where too few draws bound it above."""
    tail = (1 - confidence) / 2
    low = int(stats.binom.ppf(tail, n, level))
    high = int(stats.binom.ppf(1 - tail, n, level)) + 1
    return max(low, 1), high


def at_threshold(power: dict[str, Any], threshold: float, model: str = "two_budget_calibrated") -> dict[str, Any]:
    """``power`` (simulated with ``keep_gaps``) with each row's two-budget summary at ``threshold`` added as
    ``model``: the same grids read with another critical value."""
    threshold = bb.check_threshold(threshold)
    rows = [{**row, model: _summary(_at_threshold(np.array(row["two_budget_gaps"], dtype=float), threshold),
                                    row["law"])} for row in power["rows"]]
    return {**power, "rows": rows, f"{model}_threshold": threshold}


def can_decide(power: dict[str, Any], pairs: tuple[tuple[str, str], ...] | None = None,
               model: str = "overhead") -> tuple[bool, str]:
    """Coverage >= 90% under every truth and, for every (true, other) of ``pairs`` (default all ordered pairs of
    laws), the other excluded in >= 80% of the grids of each family; the reason names the weakest number."""
    rows = power["rows"]
    worst = min(rows, key=lambda r: r[model]["coverage"])
    if worst[model]["coverage"] < MIN_COVERAGE:
        return False, (f"its interval is not calibrated: coverage {worst[model]['coverage']:.0%} under the "
                       f"{FAMILY_LABELS[worst['family']]} truth at b = {worst['b']:.3g} (needed {MIN_COVERAGE:.0%}) "
                       f"in {power['n_sim']} simulated grids")
    wanted = pairs or tuple(permutations(mb.LAWS, 2))
    weakest = min(((r, other) for r in rows for true, other in wanted if r["law"] == true),
                  key=lambda item: item[0][model]["excludes"][item[1]])
    row, other = weakest
    share = row[model]["excludes"][other]
    if share < MIN_POWER:
        return False, (f"it cannot tell b = {row['b']:.3g} ({row['law']}) from b = {mb.LAWS[other]:.3g} ({other}) "
                       f"under the {FAMILY_LABELS[row['family']]} truth: its interval excludes "
                       f"{mb.LAWS[other]:.3g} in {share:.0%} of grids (needed {MIN_POWER:.0%})")
    return True, (f"calibrated (coverage >= {worst[model]['coverage']:.0%} under every truth) and able to tell the "
                  f"laws apart: the weakest, {row['law']} against {other} under the "
                  f"{FAMILY_LABELS[row['family']]} truth, excluded in {share:.0%} of simulated grids")
