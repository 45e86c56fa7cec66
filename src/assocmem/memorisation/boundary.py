"""The storage boundary of a memorisation grid: how the smallest model that stores D random facts, N_b(D), grows
with D (N_b ∝ D^b), by Firth-penalised logistic regression with profile-likelihood intervals, checked by
simulation at the grid's own design before any verdict rests on it.

Laws (``LAWS``). b = 1: a fixed capacity per parameter (Allen-Zhu & Li 2024, about 2 bits per parameter); b = 1/0.74
= 1.35: Kaplan et al. 2020; b = 2: the paper (Niu et al. 2024, N = O(D^2)).

Model. A run of N parameters trained on D facts ends stored (recall >= threshold) with probability
logit P = k (log N - log N_b(D)),  log N_b(D) = c + b (log D - log D_ref),
D_ref the geometric mean of the distinct D of the grid (c = log N_b(D_ref)), k > 0 the sharpness of the transition
in log N. It is a logistic regression on x = log N, z = log D - log D_ref with coefficients (β0, β1, β2) =
(-k c, k, -k b). Memorisation grids are often perfectly separated (every run above the boundary stored, every run
below not), where the maximum-likelihood k is infinite; so the fit maximises Firth's penalised likelihood
l*(β) = l(β) + ½ log det(Xᵀ W X), W = diag(p (1 - p)) (the Jeffreys prior), which stays finite under separation:
Newton steps on Firth's modified score Xᵀ(y - p + h (½ - p)), h the diagonal of the hat matrix, halved until l*
rises. A fit whose k comes out <= 0 (larger models storing less) is not this model and raises ``AssocmemError``;
so does one whose b̂ lies outside ``B_BOUNDS`` (k near 0: storage barely depends on N, and b is not identified).

Interval for b: profile penalised likelihood (Heinze & Schemper 2002). For fixed b the model is
logit p = β0 + β1 (x - b z); l*_prof(b) maximises l* (the full three-parameter penalty, at β = (β0, β1, -b β1)) over
(β0, β1) with β1 > 0; the 95% interval is {b : 2 (l*(β̂) - l*_prof(b)) <= 3.841}, its ends found by root-finding
outward from b̂ inside ``B_BOUNDS``; an end that reaches a bound is open (infinite). Where the best β1 of a profile
is <= 0 the constrained maximum is the limit β1 -> 0 (no dependence on N). The interval for log N_b at any D is the
same profile on c after re-centring D_ref at that D; its search runs over the grid's log N range widened by that
range on each side, and an end beyond is open.

Power at a design, before any verdict: :mod:`assocmem.memorisation.boundary_power`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import pandas as pd
from scipy import optimize, special, stats

from assocmem.errors import AssocmemError

LAWS = {"allen_zhu": 1.0, "kaplan": 1 / 0.74, "paper": 2.0}  # the boundary exponent b each law predicts
LAW_LABELS = {"allen_zhu": "capacity (Allen-Zhu & Li 2024, b = 1)", "kaplan": "Kaplan et al. 2020 (b = 1/0.74)",
              "paper": "the paper (Niu et al. 2024, b = 2)"}
LEVEL = 0.95
B_BOUNDS = (-3.0, 8.0)
REQUIRED = ("n_params", "n_facts", "seed", "stored")
_THRESHOLD = float(stats.chi2.ppf(LEVEL, 1))
_MAX_ITER = 100
_MAX_STEP = 5.0  # the largest Newton step in any coefficient (as logistf's maxstep)
_SCORE_TOL = 1e-8
_STEP_TOL = 1e-9
_GAIN_TOL = 1e-11  # l* rose less than this: at its maximum to far better than a profile gap needs
_FIRST_STEP = 0.1  # the first outward step of a profile-interval search; it doubles until the crossing is bracketed


# --- Firth's penalised likelihood

def _penalised(X: np.ndarray, y: np.ndarray, eta: np.ndarray) -> float:
    """l* at linear predictor ``eta``; -inf where the information is singular (all weights underflowed)."""
    log_p, log_q = -np.logaddexp(0.0, -eta), -np.logaddexp(0.0, eta)
    sign, logdet = np.linalg.slogdet((X.T * np.exp(log_p + log_q)) @ X)
    value = float(y @ log_p + (1 - y) @ log_q + 0.5 * logdet)
    return value if sign > 0 and np.isfinite(value) else -np.inf


@dataclass(frozen=True)
class _Max:
    gamma: np.ndarray
    value: float
    converged: bool


def _maximise(X: np.ndarray, y: np.ndarray, A: np.ndarray, gamma: np.ndarray) -> _Max:
    """l* of logit p = X β maximised over β = A γ from ``gamma`` (A = identity: the fit; fewer columns: a profile,
    whose penalty is still that of the full X)."""
    Z = X @ A
    value = _penalised(X, y, Z @ gamma)
    if A.shape[1] == 0:
        return _Max(gamma, value, True)
    score_norm = np.inf
    with np.errstate(all="ignore"):
        for _ in range(_MAX_ITER):
            p = special.expit(Z @ gamma)
            w = p * (1 - p)
            try:
                h = w * np.einsum("ij,ji->i", X, np.linalg.solve((X.T * w) @ X, X.T))
                score = Z.T @ (y - p + h * (0.5 - p))
                step = np.linalg.solve((Z.T * w) @ Z, score)
            except np.linalg.LinAlgError:
                break
            score_norm = float(np.abs(score).max())
            size = float(np.abs(step).max())
            if score_norm < _SCORE_TOL or size < _STEP_TOL or not np.isfinite(size):
                break
            step *= min(1.0, _MAX_STEP / size)
            for _ in range(30):
                trial = _penalised(X, y, Z @ (gamma + step))
                if trial >= value:
                    break
                step = step / 2
            else:
                break  # no ascent along the Newton direction: numerically at the maximum
            gamma, value, gain = gamma + step, trial, trial - value
            if gain < _GAIN_TOL:
                break
    return _Max(gamma, value, score_norm < 1e-5)


# --- profile intervals

def _crossing(gap, start: float, warm: np.ndarray, bounds: tuple[float, float], direction: int, *,
              growth: float = 2.0, xtol: float = 1e-7, threshold: float = _THRESHOLD) -> float:
    """Where ``gap(t, warm)`` (2 (l*_max - l*_prof(t)), warm-started; returns the gap and the profile's γ) first
    reaches ``threshold`` (default the chi-square one) walking from the estimate ``start`` in ``direction``: steps
    outward (each ``growth`` times the last), each warm-started from the last, until the crossing is bracketed, then
    the root inside the bracket; ±inf if the gap stays below the threshold up to ``bounds``."""
    inner, step = start, _FIRST_STEP
    while True:
        outer = float(np.clip(inner + direction * step, *bounds))
        value, fitted = gap(outer, warm)
        if value >= threshold:
            try:
                return float(optimize.brentq(lambda t, w=warm: gap(t, w)[0] - threshold, *sorted((inner, outer)),
                                             xtol=xtol))
            except ValueError:  # the profile at the inner end already crossed (not monotone): take the inner end
                return inner
        if outer in bounds:
            return direction * float("inf")
        inner, warm, step = outer, fitted, growth * step


def _profile(X: np.ndarray, y: np.ndarray, A: np.ndarray, gamma: np.ndarray, slope: int,
             limit: float) -> tuple[float, np.ndarray]:
    """l*_prof under β = A γ with the slope γ[slope] (k) > 0: where the unconstrained maximum has k <= 0 the
    constrained one is the limit k -> 0, whose l* is ``limit``; and the γ to warm-start the next profile from."""
    m = _maximise(X, y, A, gamma)
    inside = m.gamma[slope] > 0
    return max(m.value if inside else -np.inf, limit), (m.gamma if inside else gamma)


def _b_interval(X: np.ndarray, y: np.ndarray, beta: np.ndarray, value: float) -> tuple[float, float]:
    limit = _maximise(X, y, np.eye(3)[:, :1], beta[:1]).value  # k -> 0: logit p = β0

    def gap(b: float, warm: np.ndarray) -> tuple[float, np.ndarray]:
        prof, fitted = _profile(X, y, np.array([[1.0, 0.0], [0.0, 1.0], [0.0, -b]]), warm, 1, limit)
        return 2 * (value - prof), fitted

    b = -beta[2] / beta[1]
    low, high = (_crossing(gap, b, beta[:2], B_BOUNDS, direction) for direction in (-1, 1))
    return low, high


def _location_interval(X: np.ndarray, y: np.ndarray, beta: np.ndarray, bounds: tuple[float, float]) -> tuple[
        float, float, float]:
    """The estimate and profile interval of the location -β0/β1 (log N_b in the coordinates of X, whose first
    column is the intercept and second log N); any further columns stay free."""
    value = _penalised(X, y, X @ beta)
    n_coef = X.shape[1]
    limit = _maximise(X, y, np.eye(n_coef)[:, 2:], beta[2:]).value  # k -> 0 with β0 = -c k -> 0

    def gap(c: float, warm: np.ndarray) -> tuple[float, np.ndarray]:
        A = np.eye(n_coef)[:, 1:]
        A[0, 0] = -c
        prof, fitted = _profile(X, y, A, warm, 0, limit)
        return 2 * (value - prof), fitted

    est = float(-beta[0] / beta[1])
    start = float(np.clip(est, *bounds))
    low, high = (_crossing(gap, start, beta[1:], bounds, direction) for direction in (-1, 1))
    return est, low, high


# --- the grid

@dataclass(frozen=True)
class _Grid:
    x: np.ndarray  # log N minus ``centre``: keeps Newton well conditioned (the penalised fit is equivariant)
    log_d: np.ndarray
    y: np.ndarray
    centre: float  # the mean log N over the distinct N
    log_d_ref: float  # the mean log D over the distinct D

    def matrix(self, log_d0: float) -> np.ndarray:
        return np.column_stack([np.ones_like(self.x), self.x, self.log_d - log_d0])

    @property
    def location_bounds(self) -> tuple[float, float]:
        span = float(self.x.max() - self.x.min())
        return float(self.x.min()) - span, float(self.x.max()) + span


def _check_columns(table: pd.DataFrame, columns: tuple[str, ...], what: str) -> None:
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise AssocmemError(f"{what}: the table lacks the column(s) {', '.join(missing)} (needs {', '.join(columns)})")
    for name in ("n_params", "n_facts"):
        values = pd.to_numeric(table[name], errors="coerce").to_numpy(float)
        if not (np.all(np.isfinite(values)) and np.all(values > 0)):
            raise AssocmemError(f"{what}: every {name} must be a positive number")
    if "stored" in columns and table["stored"].isna().any():
        raise AssocmemError(f"{what}: stored is missing for {int(table['stored'].isna().sum())} run(s)")


def _make_grid(n_params: np.ndarray, n_facts: np.ndarray, stored: np.ndarray) -> _Grid:
    log_n, log_d = np.log(n_params), np.log(n_facts)
    centre = float(np.mean(np.unique(log_n)))
    return _Grid(log_n - centre, log_d, stored.astype(float), centre, float(np.mean(np.unique(log_d))))


def _runs_grid(runs: pd.DataFrame, what: str) -> _Grid:
    _check_columns(runs, REQUIRED, what)
    grid = _make_grid(runs["n_params"].to_numpy(float), runs["n_facts"].to_numpy(float),
                      runs["stored"].to_numpy(bool))
    for name, values in (("model sizes (n_params)", grid.x), ("fact counts (n_facts)", grid.log_d)):
        if np.unique(values).size < 2:
            raise AssocmemError(f"{what}: needs two or more distinct {name}, got {np.unique(values).size}")
    _check_outcomes(grid)
    return grid


def _check_outcomes(grid: _Grid) -> None:
    if grid.y.min() == grid.y.max():
        where = "below the smallest model" if grid.y[0] else "above the largest model"
        raise AssocmemError(f"storage boundary: {'every' if grid.y[0] else 'no'} run stored its facts, so the "
                            f"boundary lies {where} of the grid at every D and b is not identified")


@dataclass(frozen=True)
class _Core:
    grid: _Grid
    beta: np.ndarray  # at D_ref, on centred log N
    value: float
    converged: bool


def _fit_core(grid: _Grid) -> _Core:
    X = grid.matrix(grid.log_d_ref)
    m = _maximise(X, grid.y, np.eye(3), np.zeros(3))
    if not m.gamma[1] > 0:
        raise AssocmemError(f"storage boundary: the fitted sharpness k = {m.gamma[1]:.3g} is not positive (larger "
                            f"models store less in this grid), so it has no boundary of the form N_b(D) = c D^b")
    b = -m.gamma[2] / m.gamma[1]
    if not B_BOUNDS[0] < b < B_BOUNDS[1]:
        raise AssocmemError(f"storage boundary: the fitted exponent b = {b:.3g} lies outside {B_BOUNDS} (k = "
                            f"{m.gamma[1]:.3g}: storage barely depends on N in this grid), so b is not identified")
    return _Core(grid, m.gamma, m.value, m.converged)


def _b_fit(grid: _Grid) -> tuple[_Core, float, float, float]:
    core = _fit_core(grid)
    low, high = _b_interval(grid.matrix(grid.log_d_ref), grid.y, core.beta, core.value)
    return core, float(-core.beta[2] / core.beta[1]), low, high


def _log_boundary(core: _Core, log_d0: float) -> tuple[float, float, float]:
    """log N_b at D = exp(log_d0) with its profile interval, in log parameters."""
    grid, beta = core.grid, core.beta
    shifted = np.r_[beta[0] + beta[2] * (log_d0 - grid.log_d_ref), beta[1:]]  # D_ref re-centred at log_d0
    est, low, high = _location_interval(grid.matrix(log_d0), grid.y, shifted, grid.location_bounds)
    return est + grid.centre, low + grid.centre, high + grid.centre


# --- the fit

@dataclass(frozen=True)
class StorageFit:
    b: float
    b_low: float  # 95% profile penalised-likelihood interval; ±inf where open
    b_high: float
    c: float  # log N_b(d_ref), natural log of parameters
    k: float  # sharpness of the transition in log N
    d_ref: float
    sizes: tuple[float, ...]  # the distinct D of the grid
    n_b: tuple[float, ...]  # N_b at each D of ``sizes``, and its interval
    n_b_low: tuple[float, ...]
    n_b_high: tuple[float, ...]
    loglik: float  # Firth's penalised log-likelihood at the fit
    converged: bool
    n_runs: int
    core: _Core = field(repr=False, compare=False)

    def boundary_at(self, d: float) -> tuple[float, float, float]:
        """N_b at D = ``d`` and its 95% profile interval (0 / inf where an end is open)."""
        if d in self.sizes:
            j = self.sizes.index(d)
            return self.n_b[j], self.n_b_low[j], self.n_b_high[j]
        if not (np.isfinite(d) and d > 0):
            raise AssocmemError(f"storage boundary: D must be a positive number, got {d}")
        return tuple(float(np.exp(v)) for v in _log_boundary(self.core, float(np.log(d))))

    def excludes(self, value: float) -> bool:
        return not self.b_low <= value <= self.b_high

    def as_record(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "core"}


def fit_storage_boundary(runs: pd.DataFrame) -> StorageFit:
    """The Firth fit of the module docstring; ``runs``: n_params, n_facts, seed, stored (one row per run)."""
    grid = _runs_grid(runs, "storage boundary")
    core, b, low, high = _b_fit(grid)
    sizes = tuple(float(d) for d in np.unique(runs["n_facts"].to_numpy(float)))
    bounds = np.exp([_log_boundary(core, float(np.log(d))) for d in sizes])
    return StorageFit(b=b, b_low=low, b_high=high, c=float(grid.centre - core.beta[0] / core.beta[1]),
                      k=float(core.beta[1]), d_ref=float(np.exp(grid.log_d_ref)), sizes=sizes,
                      n_b=tuple(map(float, bounds[:, 0])), n_b_low=tuple(map(float, bounds[:, 1])),
                      n_b_high=tuple(map(float, bounds[:, 2])), loglik=core.value, converged=core.converged,
                      n_runs=len(runs), core=core)


def boundary_at(runs: pd.DataFrame, d: float) -> tuple[float, float, float]:
    """N_b at D = ``d`` with its 95% profile interval, from the fit of ``runs``."""
    return fit_storage_boundary(runs).boundary_at(d)


def bits_per_parameter(fit: StorageFit, bits_per_fact: float, d: float) -> tuple[float, float, float]:
    """d * bits_per_fact / N_b(d), with its interval: the ends of N_b's interval swap (a larger N_b, fewer bits)."""
    if not (bits_per_fact > 0 and d > 0):
        raise AssocmemError(f"bits per parameter: bits_per_fact and d must be positive, got {bits_per_fact}, {d}")
    n_b, low, high = fit.boundary_at(d)
    bits = d * bits_per_fact
    return bits / n_b, bits / high, (bits / low if low > 0 else float("inf"))  # an open end: 0 or inf bits


def law_verdict(fit: StorageFit) -> dict[str, Any]:
    """Per law, whether the 95% interval for b includes its exponent; the supported (included) and excluded laws."""
    laws = {name: {"label": LAW_LABELS[name], "b": value, "included": not fit.excludes(value)}
            for name, value in LAWS.items()}
    return {"b": fit.b, "interval": (fit.b_low, fit.b_high), "laws": laws,
            "supported": [name for name, law in laws.items() if law["included"]],
            "excluded": [name for name, law in laws.items() if not law["included"]]}


# --- descriptive: one boundary per D

def _censoring(stored: np.ndarray) -> str:
    if stored.all():
        return "below grid"
    return "above grid" if not stored.any() else "inside"


def _one_d(group: pd.DataFrame) -> dict[str, Any]:
    stored = group["stored"].to_numpy(bool)
    n_params = group["n_params"].to_numpy(float)
    limited = group["budget_limited"].to_numpy(bool) & ~stored if "budget_limited" in group else np.zeros(0)
    row = {"n_facts": float(group["n_facts"].iloc[0]), "runs": len(group), "stored": int(stored.sum()),
           "budget_limited": int(limited.sum()), "censoring": _censoring(stored), "n_b": np.nan,
           "n_b_low": np.nan, "n_b_high": np.nan, "bound": np.nan, "converged": True}
    if row["censoring"] == "below grid":
        return row | {"bound": float(n_params.min())}  # upper bound: N_b < N_min
    if row["censoring"] == "above grid":
        return row | {"bound": float(n_params.max())}  # lower bound: N_b > N_max
    grid = _make_grid(n_params, group["n_facts"].to_numpy(float), stored)
    if np.unique(grid.x).size < 2:
        return row | {"converged": False}
    X = grid.matrix(grid.log_d_ref)[:, :2]
    m = _maximise(X, grid.y, np.eye(2), np.zeros(2))
    if not m.gamma[1] > 0:
        return row | {"converged": False}
    est, low, high = np.exp(np.array(_location_interval(X, grid.y, m.gamma, grid.location_bounds)) + grid.centre)
    return row | {"n_b": float(est), "n_b_low": float(low), "n_b_high": float(high), "converged": m.converged}


def per_d_boundaries(runs: pd.DataFrame) -> pd.DataFrame:
    """Per D: a one-D Firth fit of stored ~ log N, N_b = exp(-β0/β1) with its profile interval, and the censoring:
    "below grid" (every run stored, even the smallest: N_b < N_min, given in ``bound``), "above grid" (none stored,
    even the largest: N_b > N_max, in ``bound``) or "inside"; with the counts of runs, stored runs and
    budget-limited runs that did not store. ``converged`` is False where an inside D has no fit: one N only, or a
    fitted k <= 0 (n_b NaN there)."""
    _check_columns(runs, REQUIRED, "per-D boundaries")
    rows = [_one_d(group) for _, group in runs.groupby("n_facts", sort=True)]
    return pd.DataFrame(rows, columns=["n_facts", "runs", "stored", "budget_limited", "censoring", "n_b",
                                       "n_b_low", "n_b_high", "bound", "converged"])
