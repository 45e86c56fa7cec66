"""The storage boundary with a fixed overhead: N_b(D) = N0 + c D^b (issue 38, item 2), by maximum likelihood on
the runs' stored / not-stored outcomes, with profile-likelihood intervals for b, N0, c and the bits per parameter
at the margin.

Why an overhead. A model of N parameters spends some of them on what every D needs (embeddings of the symbols,
the attention that reads a key): N0. A pure power law N_b ∝ D^b fitted to a grid where N0 is a large share of N_b
bends towards b < 1 whatever the law of the rest (:mod:`assocmem.memorisation.boundary` keeps that fit as a
sensitivity row).

Model. logit P(stored) = k (log N - log N_b(D)), log N_b(D) = logaddexp(log N0, m + b z), z = log D - log D_ref,
m = log c + b log D_ref (so c D^b = exp(m + b z)). Parameters φ = (log k, log N0, m, b). The maximum likelihood k
is infinite on a perfectly separated grid; k is capped at ``K_MAX`` (a transition within 1% of N, beyond any grid
step), where the likelihood is that of the separated limit. log N0 runs down to ``OVERHEAD_FLOOR`` nats below the
smallest N (N0 = 0 for every purpose of the grid), so the pure power law is inside the model.

Intervals. The profile log-likelihood of a quantity fixes it and maximises over the rest (L-BFGS-B from warm and
fresh starts, by TNC); its 95% interval is where 2 (l̂ - l_prof) <= 3.84. Ends are found by walking outward from the
estimate and root-finding in the bracket; an end that reaches the search range is open (for N0: 0 below).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import optimize, special, stats

from assocmem.errors import AssocmemError
from assocmem.memorisation.boundary import REQUIRED, _check_columns, _check_outcomes, _crossing, _make_grid

LEVEL = 0.95
THRESHOLD = float(stats.chi2.ppf(LEVEL, 1))
K_MAX = 100.0
K_MIN = 0.05
B_RANGE = (-1.0, 6.0)  # the search range of b; an interval end reaching it is open
OVERHEAD_FLOOR = 12.0  # log N0 >= log N_min - 12: N0 below 1e-5 of the smallest model is no overhead


@dataclass(frozen=True)
class OverheadData:
    x: np.ndarray  # log N
    z: np.ndarray  # log D - log D_ref
    y: np.ndarray  # stored, 0/1
    log_d_ref: float

    @property
    def bounds(self) -> list[tuple[float, float]]:
        """Bounds of φ = (log k, log N0, m, b)."""
        low, high = float(self.x.min()), float(self.x.max())
        return [(np.log(K_MIN), np.log(K_MAX)), (low - OVERHEAD_FLOOR, high + 3.0), (low - 15.0, high + 15.0),
                B_RANGE]


def data_of(runs: pd.DataFrame, log_d_ref: float | None = None) -> OverheadData:
    _check_columns(runs, REQUIRED, "overhead storage boundary")
    grid = _make_grid(runs["n_params"].to_numpy(float), runs["n_facts"].to_numpy(float),
                      runs["stored"].to_numpy(bool))
    _check_outcomes(grid)
    ref = grid.log_d_ref if log_d_ref is None else log_d_ref
    return OverheadData(grid.x + grid.centre, grid.log_d - ref, grid.y, ref)


def log_boundary(phi: np.ndarray, z: np.ndarray) -> np.ndarray:
    return np.logaddexp(phi[1], phi[2] + phi[3] * z)


def loglik(phi: np.ndarray, data: OverheadData) -> tuple[float, np.ndarray]:
    """The log-likelihood at φ and its gradient in φ."""
    k = np.exp(phi[0])
    variable = phi[2] + phi[3] * data.z
    bound = np.logaddexp(phi[1], variable)
    eta = k * (data.x - bound)
    value = float(data.y @ -np.logaddexp(0.0, -eta) + (1 - data.y) @ -np.logaddexp(0.0, eta))
    resid = data.y - special.expit(eta)
    share_n0 = special.expit(phi[1] - variable)  # d bound / d log N0
    d_bound = -k * resid
    grad = np.array([resid @ eta, d_bound @ share_n0, d_bound @ (1 - share_n0), d_bound @ ((1 - share_n0) * data.z)])
    return value, grad


# A parametrisation: free vector -> (φ, dφ/dfree); a profile fixes one quantity through it.
Mapping = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]


def _solve(data: OverheadData, mapping: Mapping, start: np.ndarray, bounds: list[tuple[float, float]]
           ) -> tuple[float, np.ndarray]:
    def objective(free: np.ndarray) -> tuple[float, np.ndarray]:
        phi, jac = mapping(free)
        value, grad = loglik(phi, data)
        return -value, -(jac.T @ grad)

    start = np.clip(start, [b[0] for b in bounds], [b[1] for b in bounds])
    with np.errstate(all="ignore"):
        # TNC: L-BFGS-B's threaded BLAS calls cost milliseconds per step on a loaded machine
        result = optimize.minimize(objective, start, jac=True, method="TNC", bounds=bounds)
    return -float(result.fun), mapping(result.x)[0]


def _fixed(index: int, value: float) -> Mapping:
    keep = [i for i in range(4) if i != index]
    jac = np.eye(4)[:, keep]

    def mapping(free: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.insert(free, index, value), jac

    return mapping


def _fixed_log_c(log_c: float, log_d_ref: float) -> Mapping:
    """log c fixed: m = log c + b log D_ref; free (log k, log N0, b)."""
    jac = np.array([[1.0, 0, 0], [0, 1.0, 0], [0, 0, log_d_ref], [0, 0, 1.0]])

    def mapping(free: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.array([free[0], free[1], log_c + free[2] * log_d_ref, free[2]]), jac

    return mapping


def _fixed_margin(log_margin: float, z_at: float) -> Mapping:
    """log(dN_b/dD at D) fixed, on the variable part c b D^(b-1): m + b z_at + log b - log D = log_margin, with
    log D = z_at + log D_ref folded into ``log_margin`` by the caller; free (log k, log N0, b > 0)."""
    def mapping(free: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        b = free[2]
        m = log_margin - np.log(b) - b * z_at
        jac = np.array([[1.0, 0, 0], [0, 1.0, 0], [0, 0, -1 / b - z_at], [0, 0, 1.0]])
        return np.array([free[0], free[1], m, b]), jac

    return mapping


def _starts(data: OverheadData) -> list[np.ndarray]:
    low, high = float(data.x.min()), float(data.x.max())
    mid = (low + high) / 2
    return [np.array([np.log(5.0), a, mid, b]) for a in (low - 8.0, low, mid) for b in (0.5, 1.0, 2.0)]


def maximise(data: OverheadData, starts: list[np.ndarray] | None = None) -> tuple[float, np.ndarray]:
    """The maximum-likelihood φ from several starts (the likelihood is not concave in φ)."""
    best = (-np.inf, np.zeros(4))
    for start in [*(starts or []), *_starts(data)]:
        best = max(best, _solve(data, lambda f: (f, np.eye(4)), start, data.bounds), key=lambda r: r[0])
    return best


def _profile(data: OverheadData, mapping: Mapping, starts: list[np.ndarray], bounds: list[tuple[float, float]]
             ) -> tuple[float, np.ndarray]:
    return max((_solve(data, mapping, s, bounds) for s in starts), key=lambda r: r[0])


def _drop(bounds: list[tuple[float, float]], index: int) -> list[tuple[float, float]]:
    return [b for i, b in enumerate(bounds) if i != index]


def profile_b(data: OverheadData, b: float, warm: np.ndarray, thorough: bool = False) -> tuple[float, np.ndarray]:
    """l_prof(b) and its φ, from the warm φ and from no overhead (its boundary at D_ref kept); ``thorough`` adds a
    grid of fresh starts (sharpness × overhead × location), for a gap that would exclude b: a warm start caught in
    a flat ridge (k at its cap) underestimates the profile and would end an interval too early."""
    anchor = float(log_boundary(warm, np.zeros(1))[0])
    low, high = float(data.x.min()), float(data.x.max())
    starts = [np.delete(warm, 3), np.array([warm[0], low - 8.0, anchor])]
    if thorough:
        starts += [np.array([log_k, a, m]) for log_k in (np.log(2.0), np.log(10.0), np.log(K_MAX))
                   for a in (low - 8.0, low, (low + high) / 2) for m in (low, (low + high) / 2, high)]
    return _profile(data, _fixed(3, b), starts, _drop(data.bounds, 3))


def gap_b(data: OverheadData, best: float, b: float, warm: np.ndarray) -> tuple[float, np.ndarray]:
    """2 (l̂ - l_prof(b)), checked with fresh starts wherever it reaches the threshold."""
    value, phi = profile_b(data, b, warm)
    if 2 * (best - value) >= THRESHOLD:
        value, phi = profile_b(data, b, warm, thorough=True)
    return 2 * (best - value), phi


def _walk(gap: Callable[[float, np.ndarray], tuple[float, np.ndarray]], start: float, warm: np.ndarray,
          bounds: tuple[float, float], direction: int) -> float:
    """Where the profile gap first reaches THRESHOLD walking from ``start``; ±inf (an open end) at ``bounds``."""
    return _crossing(gap, start, warm, bounds, direction, growth=1.5, xtol=1e-3)


@dataclass(frozen=True)
class OverheadFit:
    phi: np.ndarray
    loglik: float
    data: OverheadData

    @property
    def b(self) -> float:
        return float(self.phi[3])

    @property
    def k(self) -> float:
        return float(np.exp(self.phi[0]))

    @property
    def n0(self) -> float:
        return float(np.exp(self.phi[1]))

    @property
    def log_c(self) -> float:
        return float(self.phi[2] - self.phi[3] * self.data.log_d_ref)

    def gap_at_b(self, b: float) -> float:
        return gap_b(self.data, self.loglik, b, self.phi)[0]

    def _interval(self, gap: Callable[[float, np.ndarray], tuple[float, np.ndarray]], estimate: float,
                  warm: np.ndarray, bounds: tuple[float, float]) -> tuple[float, float]:
        start = float(np.clip(estimate, *bounds))
        low, high = (_walk(gap, start, warm, bounds, d) for d in (-1, 1))
        return low, high

    def b_interval(self) -> tuple[float, float]:
        def gap(b: float, warm: np.ndarray) -> tuple[float, np.ndarray]:
            return gap_b(self.data, self.loglik, b, _with(warm, 3, b))

        return self._interval(gap, self.b, self.phi, B_RANGE)

    def n0_interval(self) -> tuple[float, float]:
        bounds = self.data.bounds[1]

        def gap(a: float, warm: np.ndarray) -> tuple[float, np.ndarray]:
            value, phi = _profile(self.data, _fixed(1, a), [np.delete(warm, 1), np.delete(self.phi, 1)],
                                  _drop(self.data.bounds, 1))
            return 2 * (self.loglik - value), phi

        low, high = self._interval(gap, self.phi[1], self.phi, bounds)
        return (0.0 if low == -np.inf else float(np.exp(low))), float(np.exp(high))

    def log_c_interval(self) -> tuple[float, float]:
        bounds = (self.log_c - 40.0, self.log_c + 40.0)
        free_bounds = [*self.data.bounds[:2], B_RANGE]

        def gap(log_c: float, warm: np.ndarray) -> tuple[float, np.ndarray]:
            starts = [warm[[0, 1, 3]], self.phi[[0, 1, 3]]]
            value, phi = _profile(self.data, _fixed_log_c(log_c, self.data.log_d_ref), starts, free_bounds)
            return 2 * (self.loglik - value), phi

        return self._interval(gap, self.log_c, self.phi, bounds)

    def log_margin(self, d: float) -> float:
        """log dN_b/dD at D = d: the parameters the next fact costs."""
        return float(self.log_c + np.log(self.b) + (self.b - 1) * np.log(d)) if self.b > 0 else -np.inf

    def margin_interval(self, d: float) -> tuple[float, float]:
        z_at = float(np.log(d) - self.data.log_d_ref)
        free_bounds = [*self.data.bounds[:2], (1e-3, B_RANGE[1])]
        estimate = self.log_margin(d)
        if not np.isfinite(estimate):
            raise AssocmemError(f"overhead storage boundary: b = {self.b:.3g} <= 0 has no cost per fact")

        def gap(value: float, warm: np.ndarray) -> tuple[float, np.ndarray]:
            starts = [warm[[0, 1, 3]], self.phi[[0, 1, 3]]]
            # m + b z_at + log b - log D = log margin, with log D = z_at + log D_ref
            best, phi = _profile(self.data, _fixed_margin(value + z_at + self.data.log_d_ref, z_at), starts,
                                 free_bounds)
            return 2 * (self.loglik - best), phi

        return self._interval(gap, estimate, self.phi, (estimate - 30.0, estimate + 30.0))


def _with(phi: np.ndarray, index: int, value: float) -> np.ndarray:
    out = np.array(phi, dtype=float)
    out[index] = value
    return out


def fit_overhead(runs: pd.DataFrame, starts: list[np.ndarray] | None = None) -> OverheadFit:
    data = data_of(runs)
    value, phi = maximise(data, starts)
    if not np.isfinite(value):
        raise AssocmemError("overhead storage boundary: the likelihood has no finite maximum on this grid")
    return OverheadFit(phi, value, data)


def bits_at_margin(fit: OverheadFit, bits_per_fact: float, d: float) -> tuple[float, float, float]:
    """bits per fact over the parameters the next fact costs (dN_b/dD at D = d), with its profile interval."""
    estimate = fit.log_margin(d)
    low, high = fit.margin_interval(d)
    return (float(bits_per_fact / np.exp(estimate)), float(bits_per_fact / np.exp(high)),
            float(bits_per_fact / np.exp(low)))


def overhead_record(fit: OverheadFit, bits_per_fact: float) -> dict[str, Any]:
    """The fit with every interval, as JSON-ready numbers (open ends as ±inf; N0's lower end 0 where open)."""
    b_low, b_high = fit.b_interval()
    n0_low, n0_high = fit.n0_interval()
    c_low, c_high = fit.log_c_interval()
    sizes = sorted({float(np.exp(z + fit.data.log_d_ref)) for z in fit.data.z})
    margins = []
    for d in sizes:
        try:
            value, low, high = bits_at_margin(fit, bits_per_fact, d)
        except AssocmemError:
            value = low = high = float("nan")
        n_b = float(np.exp(log_boundary(fit.phi, np.array([np.log(d) - fit.data.log_d_ref]))[0]))
        margins.append({"n_facts": d, "n_b": n_b, "bits_per_param_margin": value, "low": low, "high": high})
    return {"model": "N_b = N0 + c D^b", "b": fit.b, "b_low": b_low, "b_high": b_high, "n0": fit.n0,
            "n0_low": n0_low, "n0_high": n0_high, "c": float(np.exp(fit.log_c)), "c_low": float(np.exp(c_low)),
            "c_high": float(np.exp(c_high)), "k": fit.k, "k_at_cap": bool(fit.k >= K_MAX * 0.999),
            "loglik": fit.loglik, "d_ref": float(np.exp(fit.data.log_d_ref)), "n_runs": int(fit.data.y.size),
            "phi": [float(v) for v in fit.phi], "margin": margins,
            "gap_at_law": {f"{b:.4g}": fit.gap_at_b(b) for b in (1.0, 1 / 0.74, 2.0)}}
