"""Everything the report says about one scaling sweep, computed once by the ``sweep`` stage and written as JSON.

Two estimates of the boundary exponent b sit side by side:

* the **parametric fit** (:mod:`assocmem.sweep.boundary`), whose profile-likelihood interval is checked by
  simulating grids of this very design (N and D values, seeds, measured noise) with known b before a verdict may
  rest on it (``power``; ``power_misfit``, the same with the grid's own misfit added to every simulated cell; and
  ``power_budget``, with each cell raised by the shortfall its budget-limited runs show
  (``boundary.budget_shortfall``): a verdict needs all three calibrated and able to tell 2 from 1), and whose
  fitted boundary is checked to lie inside the N grid (no extrapolation);
* the **threshold estimator** (:mod:`assocmem.sweep.laws`: per D the smallest N within the tolerance of the best,
  then a line through those points), kept as a description: with one point per D its bootstrap resamples a handful
  of points, and a boundary at either end of the N grid is censored.

``boundary["sensitivity"]`` refits b under reasonable alternative choices (the runs used, the noise model, the
grid's ends); a verdict that changes under one of them is reported as fragile.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from assocmem.errors import AssocmemError
from assocmem.sweep import boundary as bd
from assocmem.sweep import laws
from assocmem.sweep.cells import measured_noise

PerDJson = dict[str, float]
MISFIT_SHARE = 4  # the misfit and budget truths get a quarter of power_sims per b each (at least MIN_MISFIT_SIMS)
MIN_MISFIT_SIMS = 5
SIMULATED_ALPHA_RANGE = (0.1, 2.0)  # the fitted alpha the power simulation uses, kept to where fits are stable


def _fit_or_none(cells: pd.DataFrame, noise: dict[float, float], per_cell: bool = False) -> bd.BoundaryFit | None:
    try:
        return bd.fit_boundary_exponent(cells, noise, per_cell=per_cell)
    except AssocmemError:
        return None


def _fit_row(choice: str, fit: bd.BoundaryFit | None, calibrated: bool) -> dict[str, Any]:
    if fit is None:
        return {"choice": choice, "b": np.nan, "low": np.nan, "high": np.nan, "calibrated": calibrated}
    return {"choice": choice, "b": fit.b, "low": fit.b_low, "high": fit.b_high, "calibrated": calibrated}


def boundary_sensitivity(cells: pd.DataFrame, noise: dict[float, float], primary: bd.BoundaryFit,
                         threshold: dict[str, Any]) -> list[dict[str, Any]]:
    """b and its interval under each alternative choice; ``calibrated`` marks the rows whose interval is the
    parametric one that the power simulation checks (the threshold rows are descriptive)."""
    stopped = cells[~cells["budget_limited"].astype(bool)] if "budget_limited" in cells.columns else cells
    smallest_d, smallest_n = cells["n_tokens"].min(), cells["n_params"].min()
    largest_noise = max(noise.values())
    rows = [_fit_row("parametric, every run, noise per D (primary)", primary, True),
            _fit_row("runs that met their early-stopping rule only", _fit_or_none(stopped, noise), True),
            _fit_row("noise per cell (the larger of its own seed SD and its D's)",
                     _fit_or_none(cells, noise, per_cell=True), True),
            _fit_row("one noise for every D (the largest)", _fit_or_none(cells, dict.fromkeys(noise, largest_noise)),
                     True),
            _fit_row("without the smallest D", _fit_or_none(cells[cells["n_tokens"] > smallest_d], noise), True),
            _fit_row("without the smallest N", _fit_or_none(cells[cells["n_params"] > smallest_n], noise), True)]
    low, high = threshold["ci"]
    rows.append({"choice": "threshold estimator, tolerance x1 (bootstrap over boundary points)",
                 "b": threshold["slope"], "low": low, "high": high, "calibrated": False})
    rows += [{"choice": f"threshold estimator, tolerance x{factor:g}", "b": slope, "low": np.nan, "high": np.nan,
              "calibrated": False} for factor, slope in threshold["at_factor"].items()]
    return rows


def _budget_power(design: pd.DataFrame, noise: dict[float, float], tol: float, alpha: float,
                  shortfall: dict[tuple[float, float], float], model_power: dict[str, Any], *, n_sim: int,
                  seed: int) -> dict[str, Any]:
    """The power under the budget-limited truth; where no run hit its budget that truth is the fitted model, whose
    power is already simulated."""
    if not any(value > 0 for value in shortfall.values()):
        return {**model_power, "truth": f"{bd.BUDGET_TRUTH} (none: the fitted model)",
                "max_shortfall": 0.0}
    power = bd.design_power(design, noise, tol, alpha=alpha, n_sim=n_sim, seed=seed, misfit=shortfall,
                            truth=bd.BUDGET_TRUTH)
    return {**power, "max_shortfall": max(shortfall.values())}


def boundary_analysis(cells: pd.DataFrame, noise: dict[float, float], tolerance: laws.PerD,
                      threshold: dict[str, Any], *, power_sims: int, seed: int,
                      progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The parametric boundary fit, its power at this design and its sensitivity (see the module docstring);
    ``fit`` None and a ``reason`` where the grid is too small for the fit."""
    try:
        fit = bd.fit_boundary_exponent(cells, noise)
    except AssocmemError as err:
        return {"fit": None, "reason": str(err), "laws": dict(bd.LAWS)}
    tol = float(np.median(laws.value_range(tolerance)))
    n_range = (float(cells["n_params"].min()), float(cells["n_params"].max()))
    d_range = (float(cells["n_tokens"].min()), float(cells["n_tokens"].max()))
    alpha = float(np.clip(fit.alpha, *SIMULATED_ALPHA_RANGE))
    design = cells[["n_tokens", "n_params", "seed"]]
    power = bd.design_power(design, noise, tol, alpha=alpha, n_sim=power_sims, seed=seed, progress=progress)
    # issue 38: truths the fit does not assume: the misfit this grid shows, and a boundary moved by the step budget
    alternative_sims = max(MIN_MISFIT_SIMS, power_sims // MISFIT_SHARE)
    misfit_power = bd.design_power(design, noise, tol, alpha=alpha, n_sim=alternative_sims, seed=seed + 1,
                                   misfit=bd.fit_misfit(fit, cells))
    budget_power = _budget_power(design, noise, tol, alpha, bd.budget_shortfall(cells), power,
                                 n_sim=alternative_sims, seed=seed + 2)
    detect, reason = bd.can_detect_under_every_truth(power, misfit_power, budget_power)
    return {"fit": fit.as_record(), "tolerance": tol, "n_boundary": fit.boundary(tol).tolist(),
            "power_misfit": misfit_power, "can_detect_with_misfit": bd.can_detect_paper_b(misfit_power)[0],
            "power_budget": budget_power, "can_detect_with_budget": bd.can_detect_paper_b(budget_power)[0],
            "in_grid": bd.boundary_in_grid(fit, tol, n_range).tolist(), "n_range": n_range, "d_range": d_range,
            "grid_reach": bd.grid_reach(n_range, d_range), "power": power, "can_detect": detect,
            "power_reason": reason, "detectable_range": bd.detectable_range(power),
            "laws": dict(bd.LAWS), "sensitivity": boundary_sensitivity(cells, noise, fit, threshold)}


def analyse(cells: pd.DataFrame, sweep_cfg: dict[str, Any], *, seed: int,
            progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The sweep's analyses (laws.analyse, the parametric boundary) and their bookkeeping."""
    noise, noise_source = measured_noise(cells)
    tolerance = sweep_cfg["tolerance"] or laws.scaled(noise, 2.0)
    result = laws.analyse(cells, tolerance=tolerance, noise=noise, n_boot=sweep_cfg["n_boot"], seed=seed)
    at_factor = {factor: laws.fit_boundary(laws.boundary_points(cells, laws.scaled(tolerance, factor)))["slope"]
                 for factor in (0.5, 2.0)}
    threshold = {"slope": result["boundary"]["slope"], "ci": result["boundary_slope_ci"], "at_factor": at_factor}
    result.update(noise_source=noise_source, tolerance_source="config" if sweep_cfg["tolerance"] else "2 x noise",
                  n_cells=int(len(cells.groupby(["n_params", "n_tokens"]))), n_runs=len(cells),
                  n_params_span=float(cells["n_params"].max() / cells["n_params"].min()),
                  n_tokens_span=float(cells["n_tokens"].max() / cells["n_tokens"].min()),
                  sensitivity={f"x{factor:g}": slope for factor, slope in at_factor.items()},
                  parametric_boundary=boundary_analysis(cells, noise, tolerance, threshold,
                                                        power_sims=sweep_cfg["power_sims"], seed=seed,
                                                        progress=progress),
                  cells=cells.to_dict(orient="records"))
    return result


def _per_d_to_json(value: laws.PerD) -> float | PerDJson:
    return {repr(float(d)): float(v) for d, v in value.items()} if isinstance(value, dict) else float(value)


def _per_d_from_json(value: float | PerDJson) -> laws.PerD:
    return {float(d): float(v) for d, v in value.items()} if isinstance(value, dict) else float(value)


def to_json(analysis: dict[str, Any]) -> dict[str, Any]:
    """JSON keys are strings: the per-D noise and tolerance are keyed by repr(D)."""
    return {**analysis, "noise": _per_d_to_json(analysis["noise"]),
            "tolerance": _per_d_to_json(analysis["tolerance"])}


def from_json(analysis: dict[str, Any]) -> dict[str, Any]:
    """The analysis as :func:`analyse` computed it: per-D values keyed by the float D again."""
    return {**analysis, "noise": _per_d_from_json(analysis["noise"]),
            "tolerance": _per_d_from_json(analysis["tolerance"])}
