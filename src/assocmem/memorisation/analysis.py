"""Everything the report says about one memorisation grid, computed once by the ``sweep`` stage and written as JSON.

Primary model (issue 41): the capacity boundary N_b(D) = N0 + c D^b read from two budgets
(:mod:`assocmem.memorisation.boundary_budget`: each run's outcome within half and within the whole exposure
budget, the boundary's remaining move with more budget a nuisance), wherever the runs record the half-budget
outcome; else the one-budget fit with a fixed overhead (:mod:`assocmem.memorisation.boundary_overhead`, issue 38),
which stays beside it. Either's verdict waits on its power against the truths a referee names
(:mod:`assocmem.memorisation.power_alternatives`: a pure power law, an overhead, a budget-limited boundary): the
one-budget fit is blind to the last (its coverage there 18% at b = 1 in the decisive design).
The pure power law N_b(D) ∝ D^b (:mod:`assocmem.memorisation.boundary`) is kept beside them as a sensitivity row,
with its own power simulation. Power first: grids simulated at this very design (its N and D values and
seeds, at the fitted sharpness k and at a near step) with b = 1, 1.35 and 2 must be recovered with calibrated
intervals, and the paper's 2 told apart from 1 and from 1.35, before the fitted b may carry a verdict on the paper's
claim (``can_decide``); whether 1 and 1.35 are also told apart decides only which of them the report may name
(``tells_every_law_apart``). The sensitivity rows refit b under reasonable alternative
choices: the recall that counts as stored, a smaller exposure budget (read from each run's recall history), and
the grid without its smallest D or N.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from assocmem.errors import AssocmemError
from assocmem.memorisation import boundary as mb
from assocmem.memorisation import boundary_budget as bb
from assocmem.memorisation import boundary_overhead as bo
from assocmem.memorisation import boundary_power as bp
from assocmem.memorisation import power_alternatives as pa
from assocmem.memorisation.cells import grid_table, stored_at

K_RANGE = (0.5, 100.0)  # the fitted sharpness as the power simulation uses it (where simulated fits are stable)
K_SHARP = 100.0  # a transition within 1% of N: the second power simulation
SENSITIVITY_THRESHOLDS = (0.8, 0.9, 0.95, 0.99)
MAX_ALTERNATIVE_SIMS = 100  # grids per truth against the alternatives (9 truths, three fits each)
PURE_CHOICE = "pure power law, no overhead (Firth)"
ONE_BUDGET_CHOICE = "one budget: the overhead fit to the full-budget outcomes alone"


def two_budgets(runs: pd.DataFrame) -> bool:
    """Whether the runs record the half-budget outcome the two-budget fit reads."""
    return "stored_at_half_budget" in runs.columns


def _fit_row(choice: str, runs: pd.DataFrame, two_budget: bool = False,
             interval_threshold: float | None = None) -> dict[str, Any]:
    try:
        if two_budget:
            fit = bb.fit_two_budget(runs)
            b = float(fit.theta[bb.B_INDEX])
            low, high = fit.b_interval(interval_threshold)
        else:
            fit = bo.fit_overhead(runs)
            b = fit.b
            low, high = fit.b_interval()
    except AssocmemError as err:
        return {"choice": choice, "b": np.nan, "low": np.nan, "high": np.nan, "runs": len(runs), "note": str(err)}
    return {"choice": choice, "b": b, "low": low, "high": high, "runs": len(runs), "note": ""}


def _pure_row(runs: pd.DataFrame) -> dict[str, Any]:
    try:
        fit = mb.fit_storage_boundary(runs)
    except AssocmemError as err:
        return {"choice": PURE_CHOICE, "b": np.nan, "low": np.nan, "high": np.nan, "runs": len(runs),
                "note": str(err)}
    return {"choice": PURE_CHOICE, "b": fit.b, "low": fit.b_low, "high": fit.b_high, "runs": len(runs), "note": ""}


def _fitted_row(choice: str, runs: pd.DataFrame, record: dict[str, Any] | None, two_budget: bool,
                interval_threshold: float | None = None) -> dict[str, Any]:
    """The row of a fit :func:`overhead_analysis` already made on ``runs`` (its record), else fitted here."""
    if record is None:
        return _fit_row(choice, runs, two_budget, interval_threshold)
    return {"choice": choice, "b": record["b"], "low": record["b_low"], "high": record["b_high"], "runs": len(runs),
            "note": ""}


def sensitivity(runs: pd.DataFrame, threshold: float, stop_at: float,
                fitted: dict[str, Any] | None = None, interval_threshold: float | None = None
                ) -> list[dict[str, Any]]:
    """b of the primary model and its interval under each alternative choice (the first row is the primary
    analysis); where the primary reads two budgets, the one-budget overhead fit and its half-budget refit follow;
    the pure power law is the last row. ``fitted``: :func:`overhead_analysis` on the same runs, whose fits the
    primary and one-budget rows take instead of fitting again; ``interval_threshold``: the two-budget rows'
    critical value (default χ²₁'s)."""
    two = two_budgets(runs)
    fitted = fitted or {}
    rows = [_fitted_row(f"recall >= {threshold:g} counts as stored (primary)", runs,
                        fitted.get("two_budget_fit" if two else "overhead_fit"), two, interval_threshold)]
    rows += [_fit_row(f"recall >= {t:g} counts as stored", stored_at(runs, t), two, interval_threshold)
             for t in SENSITIVITY_THRESHOLDS if t != threshold and t <= stop_at]
    smallest_d, smallest_n = runs["n_facts"].min(), runs["n_params"].min()
    rows.append(_fit_row("without the smallest D", runs[runs["n_facts"] > smallest_d], two, interval_threshold))
    rows.append(_fit_row("without the smallest N", runs[runs["n_params"] > smallest_n], two, interval_threshold))
    if two:
        rows.append(_fitted_row(ONE_BUDGET_CHOICE, runs, fitted.get("overhead_fit"), False))
        half = runs.assign(stored=runs["stored_at_half_budget"])
        rows.append(_fit_row("one budget: stored within half the exposure budget", half))
    rows.append(_pure_row(runs))
    return rows


def pattern_summary(patterns: list[dict[str, Any]], threshold: float) -> dict[str, Any]:
    """The radius (half the median NN distance of the stored patterns) over r*, among runs that stored their facts
    and among those that did not."""
    frame = pd.DataFrame(patterns)
    if frame.empty:
        return {"stored_runs": 0, "not_stored_runs": 0}
    stored = frame["recall"] >= threshold
    ratio = frame["radius_over_r_star"]
    return {"stored_runs": int(stored.sum()), "not_stored_runs": int((~stored).sum()),
            "stored_ratio_median": float(ratio[stored].median()) if stored.any() else None,
            "stored_ratio_range": [float(ratio[stored].min()), float(ratio[stored].max())] if stored.any() else None,
            "not_stored_ratio_median": float(ratio[~stored].median()) if (~stored).any() else None}


def analyse(runs: pd.DataFrame, information: dict[str, Any], threshold: float, stop_at: float, *,
            power_sims: int, seed: int, patterns: list[dict[str, Any]] | None = None,
            progress: Callable[[str], None] | None = None, alternative_sims: int | None = None,
            interval_threshold: float | None = None) -> dict[str, Any]:
    """The memorisation grid's analyses. ``runs``: one row per run (:func:`assocmem.memorisation.cells.read_runs`),
    ``information``: the facts' information record (bits per fact), ``threshold``: the recall that counts as
    stored (<= ``stop_at``, where training stopped); ``alternative_sims``: grids per truth of the power against
    the alternatives (default ``power_sims``, at most MAX_ALTERNATIVE_SIMS); ``interval_threshold``: the two-budget
    interval's critical value, stated by the config before the grid ran (default χ²₁'s)."""
    alternative_sims = min(power_sims, MAX_ALTERNATIVE_SIMS) if alternative_sims is None else alternative_sims
    runs = stored_at(runs, threshold)
    bits_per_fact = float(information["information"]["bits_per_fact"])
    per_d = mb.per_d_boundaries(runs)
    result: dict[str, Any] = {
        "kind": "memorisation", "threshold": threshold, "stop_at_recall": stop_at, "bits_per_fact": bits_per_fact,
        "n_runs": len(runs), "seeds": int(runs["seed"].nunique()),
        "n_params": sorted(int(n) for n in runs["n_params"].unique()),
        "n_facts": sorted(int(d) for d in runs["n_facts"].unique()),
        "runs": runs.to_dict(orient="records"), "grid": grid_table(runs).to_dict(orient="records"),
        "per_d": per_d.to_dict(orient="records"), "laws": dict(mb.LAWS), "law_labels": dict(mb.LAW_LABELS),
        "patterns": patterns or [], "pattern_summary": pattern_summary(patterns or [], threshold)}
    n_span = float(runs["n_params"].max() / runs["n_params"].min())
    d_span = float(runs["n_facts"].max() / runs["n_facts"].min())
    result.update(n_span=n_span, d_span=d_span, n_span_covers_d_squared=bool(n_span >= d_span ** 2))
    try:
        fit = mb.fit_storage_boundary(runs)
    except AssocmemError as err:
        return {**result, "fit": None, "reason": str(err),
                **overhead_analysis(runs, bits_per_fact, power_sims=alternative_sims, seed=seed, progress=progress,
                                    interval_threshold=interval_threshold)}
    if progress:
        progress(f"storage boundary b = {fit.b:.2f} [{fit.b_low:.2f}, {fit.b_high:.2f}]; simulating its power")
    k = float(np.clip(fit.k, *K_RANGE))
    design = runs[["n_params", "n_facts", "seed"]]
    # at the fitted sharpness and at a near step (Firth shrinks k: the fitted one flatters the design), the boundary
    # jittered within half an N step, since a boundary pinned on the grid's middle makes 1.35 and 2 look alike
    powers = [bp.design_power(design, k=value, n_sim=power_sims, seed=seed, jitter=True) for value in (k, K_SHARP)]
    paper = [bp.can_decide(power, bp.PAPER_PAIRS) for power in powers]
    every = [bp.can_decide(power) for power in powers]
    decide = all(ok for ok, _ in paper)
    reason = next((why for ok, why in paper if not ok), paper[0][1])
    tells_all = all(ok for ok, _ in every)
    all_reason = next((why for ok, why in every if not ok), every[0][1])
    d_ref = fit.d_ref
    bits = mb.bits_per_parameter(fit, bits_per_fact, d_ref)
    bits_per_d = [dict(zip(("n_facts", "bits_per_param", "low", "high"), (d, *mb.bits_per_parameter(
        fit, bits_per_fact, d)), strict=True)) for d in fit.sizes]
    primary = overhead_analysis(runs, bits_per_fact, power_sims=alternative_sims, seed=seed, progress=progress,
                                interval_threshold=interval_threshold)
    return {**result, "fit": fit.as_record(), "power": powers[0], "power_sharp": powers[1], "power_k": k,
            "can_decide": decide, "power_reason": reason, "tells_every_law_apart": tells_all,
            "every_law_reason": all_reason, "law_verdict": mb.law_verdict(fit),
            "bits_per_param": {"d": d_ref, "value": bits[0], "low": bits[1], "high": bits[2]},
            "bits_per_param_by_d": bits_per_d,
            "censored_d": [row["n_facts"] for row in result["per_d"] if row["censoring"] != "inside"],
            "sensitivity": sensitivity(runs, threshold, stop_at, primary, interval_threshold), **primary}


def overhead_analysis(runs: pd.DataFrame, bits_per_fact: float, *, power_sims: int, seed: int,
                      progress: Callable[[str], None] | None = None, interval_threshold: float | None = None
                      ) -> dict[str, Any]:
    """The primary analysis: the overhead fit with its intervals, the two-budget fit where the runs record the
    half-budget outcome (then the primary, ``primary_model``; its interval and power at ``interval_threshold``,
    default χ²₁'s), and the power of both against the three truths at this design; ``overhead_fit`` None (with
    ``overhead_reason``) where the grid has no fit."""
    try:
        fit = bo.fit_overhead(runs)
        record = bo.overhead_record(fit, bits_per_fact)
    except AssocmemError as err:
        return {"overhead_fit": None, "overhead_reason": str(err), "alternatives": None,
                "alternatives_can_decide": False, "alternatives_reason": f"no overhead fit: {err}"}
    record["law_verdict"] = {name: not record["b_low"] <= b <= record["b_high"] for name, b in mb.LAWS.items()}
    two = _two_budget_fit(runs, fit.phi, interval_threshold) if two_budgets(runs) else {}
    primary = "two_budget" if two.get("two_budget_fit") else "overhead"
    if progress:
        progress(f"overhead boundary b = {record['b']:.2f} [{record['b_low']:.2f}, {record['b_high']:.2f}], "
                 f"N0 = {record['n0']:.4g}; primary: {primary}; simulating its power against the alternatives")
    out = {"overhead_fit": record, **two, "primary_model": primary}
    try:
        power = pa.design_power(runs[["n_params", "n_facts", "seed"]], pa.truths(runs), n_sim=power_sims,
                                seed=seed, two_budget=primary == "two_budget",
                                two_budget_threshold=interval_threshold)
    except AssocmemError as err:
        return {**out, "alternatives": None, "alternatives_can_decide": False,
                "alternatives_reason": f"no truths to simulate from this grid: {err}"}
    decide, reason = pa.can_decide(power, bp.PAPER_PAIRS, model=primary)
    every, every_reason = pa.can_decide(power, model=primary)
    return {**out, "alternatives": power, "alternatives_can_decide": decide, "alternatives_reason": reason,
            "alternatives_tell_every_law_apart": every, "alternatives_every_law_reason": every_reason}


def _two_budget_fit(runs: pd.DataFrame, phi: np.ndarray, interval_threshold: float | None) -> dict[str, Any]:
    try:
        return {"two_budget_fit": bb.two_budget_record(bb.fit_two_budget(runs, phi), interval_threshold)}
    except AssocmemError as err:
        return {"two_budget_fit": None, "two_budget_reason": str(err)}


def headline(analysis: dict[str, Any]) -> str:
    """One line for the terminal and the log."""
    fit = analysis.get("overhead_fit")
    if fit is None:
        return f"no storage boundary fit: {analysis.get('overhead_reason', analysis.get('reason'))}"
    line = (f"storage boundary N_b = N0 + c D^b: b = {fit['b']:.2f}, 95% CI [{fit['b_low']:.2f}, "
            f"{fit['b_high']:.2f}], N0 = {fit['n0']:,.0f} [{fit['n0_low']:,.0f}, {fit['n0_high']:,.0f}]; ")
    two = analysis.get("two_budget_fit") if analysis.get("primary_model") == "two_budget" else None
    if two is not None:
        critical = f", critical value {two['threshold']:.2f} calibrated at the design" if two.get("calibrated") else ""
        line += (f"read from two budgets (primary): b = {two['b']:.2f}, 95% CI [{two['b_low']:.2f}, "
                 f"{two['b_high']:.2f}]{critical}; ")
    return line + analysis["alternatives_reason"]
