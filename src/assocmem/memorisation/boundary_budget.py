"""The capacity boundary read from two budgets: an analysis that is not blind to a budget-limited boundary.

Every memorisation run records whether it stored its facts within half its exposure budget and within the whole
(`stored_at_half_budget`, `stored`). Where the boundary still moves with the budget, the boundary a grid sees at
its budget is the capacity boundary moved up by what more training would still store; a fit to the full-budget
outcomes alone then reads the budget's law, not capacity's (:mod:`assocmem.memorisation.power_alternatives`, the
budget-limited truth: coverage 18% at b = 1 in the decisive design).

Model. Three ordered outcomes per run: not stored within the budget (0), stored within it but not within half (1),
stored within half (2); a run that stored within half but lost its facts by the end counts as 0. With
L(D) = log(N0 + c D^b) the capacity boundary and Δ(D) >= 0 the boundary's shift between half and the full budget
(linear in log D between its values at the grid's smallest and largest D):

    log N_full(D) = L(D) + λ Δ(D),    log N_half(D) = L(D) + (1 + λ) Δ(D),
    P(stored within the budget) = σ(k (log N - log N_full)),  P(within half) = σ(k (log N - log N_half)),

one sharpness k for both (a cumulative logit: the outcomes nest). λ is what the next budget doubling would still
move the boundary, in units of the last doubling's move. The data cannot tell λ (it shifts capacity against what
the grid sees), so it is a nuisance held to [0, 1] and profiled: b's interval is the union of the intervals over
λ from 0 (the budget already reached capacity) to 1 (the next doubling moves the boundary as much as the last).
The assumption it rests on, stated: returns per doubling do not grow, and the remaining move is at most one more
doubling's. A boundary that keeps moving by more than that breaks it; the 2× re-run of the record's near cells
(:mod:`assocmem.memorisation.budget_check`) is the measurement that checks it.

Parameters θ = (log k, log N0, m, b, Δ_lo, Δ_hi, λ), m = log c + b log D_ref as in
:mod:`assocmem.memorisation.boundary_overhead`, whose conventions (caps, floors, χ² threshold) this module keeps.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd
from scipy import optimize, special

from assocmem.errors import AssocmemError
from assocmem.memorisation import boundary as mb
from assocmem.memorisation import boundary_overhead as bo
from assocmem.memorisation.boundary import _check_columns, _crossing

REQUIRED = (*mb.REQUIRED, "stored_at_half_budget")
SHIFT_MAX = 5.0  # nats: a boundary 150× higher at half the budget; beyond any grid
SHIFT_MIN = 1e-4  # the "stored within the budget only" outcome needs a shift > 0
B_INDEX = 3


@dataclass(frozen=True)
class BudgetData:
    x: np.ndarray  # log N
    z: np.ndarray  # log D - log D_ref
    outcome: np.ndarray  # 0 not stored, 1 stored within the budget only, 2 stored within half of it
    log_d_ref: float

    @cached_property
    def weight(self) -> np.ndarray:
        """Where each run's D lies between the smallest (0) and the largest (1) D of the grid."""
        span = float(self.z.max() - self.z.min())
        return (self.z - self.z.min()) / span if span > 0 else np.zeros_like(self.z)

    @cached_property
    def bounds(self) -> list[tuple[float, float]]:
        shift = (SHIFT_MIN, SHIFT_MAX)
        return [*_full_outcomes(self).bounds, shift, shift, (0.0, 1.0)]


def check_threshold(threshold: float | None) -> float:
    """A critical value for the profile gap, None for χ²₁'s 95% point: calibration only widens the interval, so
    never below it."""
    if threshold is None:
        return bo.THRESHOLD
    if not np.isfinite(threshold) or threshold < bo.THRESHOLD - 1e-9:
        raise AssocmemError(f"two-budget interval: critical value {threshold} is below chi-square's "
                            f"{bo.THRESHOLD:.4f} (a calibrated interval only widens)")
    return float(threshold)


def _full_outcomes(data: BudgetData) -> bo.OverheadData:
    """The one-budget data: stored within the whole budget or not."""
    return bo.OverheadData(data.x, data.z, (data.outcome > 0).astype(float), data.log_d_ref)


def data_of(runs: pd.DataFrame) -> BudgetData:
    _check_columns(runs, REQUIRED, "two-budget storage boundary")
    full = bo.data_of(runs)  # checks the outcomes vary and sets D_ref as the one-budget fit does
    half = runs["stored_at_half_budget"].to_numpy(bool) & runs["stored"].to_numpy(bool)
    return BudgetData(full.x, full.z, full.y.astype(int) + half.astype(int), full.log_d_ref)


def loglik(theta: np.ndarray, data: BudgetData) -> tuple[float, np.ndarray]:
    """The log-likelihood at θ and its gradient in θ."""
    k, lam, w = np.exp(theta[0]), theta[6], data.weight
    variable = theta[2] + theta[3] * data.z
    capacity = np.logaddexp(theta[1], variable)
    shift = theta[4] + (theta[5] - theta[4]) * w
    eta_full = k * (data.x - capacity - lam * shift)
    eta_half = eta_full - k * shift
    gap = k * shift
    o0, o1, o2 = (data.outcome == i for i in range(3))
    value = float(-np.logaddexp(0.0, eta_full[o0]).sum() - np.logaddexp(0.0, -eta_half[o2]).sum()
                  + (-np.logaddexp(0.0, -eta_full[o1]) - np.logaddexp(0.0, eta_half[o1])
                     + np.log(-np.expm1(-gap[o1]))).sum())
    g_full = np.where(o0, -special.expit(eta_full), 0.0) + np.where(o1, special.expit(-eta_full), 0.0)
    g_half = np.where(o2, special.expit(-eta_half), 0.0) - np.where(o1, special.expit(eta_half), 0.0)
    g_gap = np.where(o1, 1.0 / np.expm1(np.where(o1, gap, 1.0)), 0.0)
    d_capacity = -k * (g_full + g_half)
    d_shift = -k * lam * g_full - k * (1 + lam) * g_half + k * g_gap
    share_n0 = special.expit(theta[1] - variable)
    grad = np.array([g_full @ eta_full + g_half @ eta_half + g_gap @ gap, d_capacity @ share_n0,
                     d_capacity @ (1 - share_n0), d_capacity @ ((1 - share_n0) * data.z), d_shift @ (1 - w),
                     d_shift @ w, -k * (shift @ (g_full + g_half))])
    return value, grad


def _solve(data: BudgetData, free: list[int], fixed: dict[int, float], start: np.ndarray) -> tuple[float, np.ndarray]:
    bounds = [data.bounds[i] for i in free]
    theta = np.zeros(7)
    for index, value in fixed.items():
        theta[index] = value

    def objective(values: np.ndarray) -> tuple[float, np.ndarray]:
        theta[free] = values
        value, grad = loglik(theta, data)
        return -value, -grad[free]

    begin = np.clip(start[free], [b[0] for b in bounds], [b[1] for b in bounds])
    with np.errstate(all="ignore"):
        result = optimize.minimize(objective, begin, jac=True, method="TNC", bounds=bounds)
    theta[free] = result.x
    return -float(result.fun), theta.copy()


def _best(data: BudgetData, starts: list[np.ndarray], fixed: dict[int, float] | None = None
          ) -> tuple[float, np.ndarray]:
    fixed = fixed or {}
    free = [i for i in range(7) if i not in fixed]
    return max((_solve(data, free, fixed, s) for s in starts), key=lambda r: r[0])


def _shift_start(phi: np.ndarray, data: BudgetData) -> np.ndarray:
    """Δ at the smallest and largest D from a one-budget fit to the within-half outcomes against the full fit."""
    half = bo.OverheadData(data.x, data.z, (data.outcome == 2).astype(float), data.log_d_ref)
    if half.y.min() == half.y.max():
        return np.array([0.3, 0.3])
    _, half_phi = bo.maximise(half, [phi])
    ends = np.array([data.z.min(), data.z.max()])
    moved = bo.log_boundary(half_phi, ends) - bo.log_boundary(phi, ends)
    return np.clip(moved, SHIFT_MIN, SHIFT_MAX)


def starts_of(data: BudgetData, phi: np.ndarray | None = None) -> list[np.ndarray]:
    """Starts at both ends of λ from the one-budget fit φ (fitted here when not given)."""
    phi = bo.maximise(_full_outcomes(data))[1] if phi is None else np.asarray(phi, dtype=float)
    shift = _shift_start(phi, data)
    out = []
    for lam in (0.0, 1.0):
        capacity_phi = phi.copy()
        capacity_phi[2] -= lam * float(shift.mean())  # the seen boundary kept where the one-budget fit put it
        out.append(np.concatenate([capacity_phi, shift, [lam]]))
    return out


@dataclass(frozen=True)
class BudgetFit:
    theta: np.ndarray
    loglik: float
    data: BudgetData

    def gap_at_b(self, b: float) -> float:
        return gap_b(self.data, self.loglik, b, self.theta)[0]

    def b_interval(self, threshold: float | None = None) -> tuple[float, float]:
        """The b where the profile gap reaches ``threshold``: χ²₁'s 95% point (None), or a critical value
        calibrated at the design (:func:`assocmem.memorisation.power_alternatives.calibrated_threshold`), never
        below it."""
        threshold = check_threshold(threshold)
        def gap(b: float, warm: np.ndarray) -> tuple[float, np.ndarray]:
            return gap_b(self.data, self.loglik, b, warm)

        start = float(self.theta[B_INDEX])
        return tuple(_crossing(gap, start, self.theta, bo.B_RANGE, d, growth=1.5, xtol=1e-3, threshold=threshold)
                     for d in (-1, 1))


def _lambda_ends(theta: np.ndarray) -> list[np.ndarray]:
    """θ and θ moved to both ends of λ with the full-budget boundary kept (m takes the move at the mean shift)."""
    out = [np.asarray(theta, dtype=float)]
    mean_shift = (theta[4] + theta[5]) / 2
    for lam in (0.0, 1.0):
        moved = np.array(theta, dtype=float)
        moved[2] += (theta[6] - lam) * mean_shift
        moved[6] = lam
        out.append(moved)
    return out


def gap_b(data: BudgetData, best: float, b: float, warm: np.ndarray) -> tuple[float, np.ndarray]:
    """2 (l̂ - l_prof(b)), λ profiled from both of its ends as well as from the warm θ; a gap that would exclude b
    is checked from the one-budget profile's fresh starts at b (a warm start caught in a ridge would end an
    interval too early)."""
    starts = [np.where(np.arange(7) == B_INDEX, b, s) for s in _lambda_ends(warm)]
    value, theta = _best(data, starts, {B_INDEX: b})
    if 2 * (best - value) >= bo.THRESHOLD:
        full = _full_outcomes(data)
        _, phi = bo.profile_b(full, b, warm[:4], thorough=True)
        fresh = [np.where(np.arange(7) == B_INDEX, b, s) for s in starts_of(data, phi)]
        value, theta = max((value, theta), _best(data, fresh, {B_INDEX: b}), key=lambda r: r[0])
    return 2 * max(best - value, 0.0), theta


def fit_two_budget(runs: pd.DataFrame, phi: np.ndarray | None = None) -> BudgetFit:
    """The maximum-likelihood θ; ``phi`` (the one-budget fit's, if known) saves its refit."""
    data = data_of(runs)
    value, theta = _best(data, starts_of(data, phi))
    if not np.isfinite(value):
        raise AssocmemError("two-budget storage boundary: the likelihood has no finite maximum on this grid")
    return BudgetFit(theta, value, data)


def b_range_over_lambda(fit: BudgetFit) -> tuple[float, float]:
    """b at λ = 0 and at λ = 1, each at its own maximum: how far the unknown remaining move can take b."""
    ends: list[float] = []
    for lam in (0.0, 1.0):
        _, theta = _best(fit.data, _lambda_ends(fit.theta)[1:], {6: lam})
        ends.append(float(theta[B_INDEX]))
    return ends[0], ends[1]


def two_budget_record(fit: BudgetFit, threshold: float | None = None) -> dict[str, Any]:
    """The fit as JSON-ready numbers: b with its interval over λ in [0, 1] (the profile gap below ``threshold``,
    default χ²₁'s 95% point), b at each end of λ, the half-to-full budget shift at the grid's smallest and largest
    D, the gap at each law's b and the interval rule per law."""
    threshold = check_threshold(threshold)
    low, high = fit.b_interval(threshold)
    at_zero, at_one = b_range_over_lambda(fit)
    d_ends = np.exp(np.array([fit.data.z.min(), fit.data.z.max()]) + fit.data.log_d_ref)
    return {"model": "capacity N0 + c D^b, seen at the budget λ Δ(D) above it, at half the budget (1 + λ) Δ(D)",
            "b": float(fit.theta[B_INDEX]), "b_low": low, "b_high": high, "b_at_lambda_0": at_zero,
            "b_at_lambda_1": at_one, "lambda": float(fit.theta[6]), "k": float(np.exp(fit.theta[0])),
            "shift": [{"n_facts": float(d), "nats": float(v)} for d, v in zip(d_ends, fit.theta[4:6], strict=True)],
            "loglik": fit.loglik, "threshold": threshold, "calibrated": threshold != bo.THRESHOLD,
            "n_runs": int(fit.data.x.size),
            "runs_stored_within_half": int((fit.data.outcome == 2).sum()),
            "runs_stored_within_the_budget_only": int((fit.data.outcome == 1).sum()),
            "gap_at_law": {law: fit.gap_at_b(b) for law, b in mb.LAWS.items()},
            "law_verdict": {law: not low <= b <= high for law, b in mb.LAWS.items()}}
