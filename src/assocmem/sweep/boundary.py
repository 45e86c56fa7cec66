"""The boundary exponent b of a scaling sweep (N_b ∝ D^b), by a parametric fit whose interval is checked by
simulation at the sweep's own design before any verdict rests on it.

Model. At training-set size D_j the best reachable validation CE is E_j; a model of N parameters exceeds it by
A (D_j^b / N)^alpha, so the smallest N within a tolerance tau of E_j is N_b(D) = D^b (A / tau)^(1/alpha): b is the
boundary exponent itself (the paper's N = O(D^2) says b = 2; Kaplan et al.'s N^0.74 / D says 1/0.74 = 1.35;
compute-optimal scaling, Hoffmann et al., about 1). Fitted by weighted least squares on the cell means (weight
1/SE^2, the SE of a cell mean being the seed SD at that D over sqrt(seeds)); parameters E_1..E_J, log A, alpha, b,
from several starting points.

Interval for b: profile likelihood. With residuals divided by their SE, S(b) = min over the other parameters of
the sum of squared residuals; the 95% interval is {b : S(b) - S(b_hat) <= 3.84 s}, where s = max(1, S(b_hat) /
dof) widens it when the cells scatter more than their noise says (a misfit the noise does not explain). The Wald
interval (b_hat +- 1.96 SE from the Jacobian) is kept beside it: b = (alpha b) / alpha is a ratio, and where alpha
is poorly determined the Wald interval is symmetric where the truth is not (coverage 86% at alpha = 0.3 in the
simulation that chose the profile). An interval end that reaches ``B_BOUNDS`` is open (infinite).

Power (``design_power``). Before the verdict: simulate grids at the design (the same N and D values, seeds and
per-D noise) with known b in ``POWER_EXPONENTS``, the excess set so the boundary (excess = tolerance) sits in the
middle of the N grid at the middle D, with the fitted alpha; fit each, and measure the coverage of the nominal 95%
interval, the mean estimate, the interval width, and how often the interval excludes each competing law. A design
whose coverage at some b is below ``MIN_COVERAGE``, or that cannot tell 2 from 1 in ``MIN_POWER`` of its grids,
cannot carry a verdict on the paper's b = 2 (``can_detect_paper_b``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import optimize, stats

from assocmem.errors import AssocmemError
from assocmem.sweep.cells import LAST_EVALS

LAWS = {"paper": 2.0, "kaplan": 1 / 0.74, "hoffmann": 1.0}  # the boundary exponent each law predicts
POWER_EXPONENTS = (0.5, 1.0, 2.0)
MIN_COVERAGE = 0.90
MIN_POWER = 0.80
LEVEL = 0.95
B_BOUNDS = (-3.0, 8.0)
ALPHA_BOUNDS = (0.05, 3.0)
_STARTS = [(b, alpha) for b in (0.0, 1.0, 2.0) for alpha in (0.3, 0.8)]
_PROFILE_STEP = 0.25
_MAX_LOG_EXCESS = 50.0  # nats of e^50: far outside any data, keeps trial steps of the optimiser finite


@dataclass(frozen=True)
class BoundaryFit:
    b: float
    b_low: float  # profile-likelihood interval (the one verdicts use)
    b_high: float
    b_se: float  # Wald
    wald_low: float
    wald_high: float
    alpha: float
    log_a: float
    floors: tuple[float, ...]  # E_j per D, in the order of ``sizes``
    sizes: tuple[float, ...]  # the D values
    chi2: float
    dof: int
    scale: float  # max(1, chi2 / dof): the interval is widened by sqrt(scale)
    converged: bool

    def boundary(self, tolerance: float) -> np.ndarray:
        """N_b(D_j) = D_j^b (A / tolerance)^(1/alpha) at every D of the fit."""
        return np.exp(self.b * np.log(self.sizes) + (self.log_a - np.log(tolerance)) / self.alpha)

    def excludes(self, value: float) -> bool:
        return not self.b_low <= value <= self.b_high

    def as_record(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class _Data:
    index: np.ndarray  # D index of each cell mean
    log_n: np.ndarray
    log_d: np.ndarray
    y: np.ndarray  # seed-mean CE
    se: np.ndarray
    sizes: np.ndarray

    def residuals(self, floors: np.ndarray, log_a: float, alpha: float, b: float) -> np.ndarray:
        log_excess = np.minimum(log_a + alpha * (b * self.log_d - self.log_n), _MAX_LOG_EXCESS)
        return (floors[self.index] + np.exp(log_excess) - self.y) / self.se


def _cell_data(cells: pd.DataFrame, noise: dict[float, float], per_cell: bool) -> _Data:
    means = cells.groupby(["n_tokens", "n_params"], as_index=False).agg(
        val_ce=("val_ce", "mean"), seeds=("val_ce", "size"), cell_sd=("val_ce", "std"))
    sizes = np.sort(means["n_tokens"].unique())
    index = np.searchsorted(sizes, means["n_tokens"].to_numpy())
    missing = [d for d in sizes if d not in noise]
    if missing:
        raise AssocmemError(f"boundary fit: no noise given for D = {missing}")
    sd = np.array([noise[d] for d in means["n_tokens"]])
    if per_cell:
        sd = np.fmax(sd, means["cell_sd"].to_numpy(float))
    se = sd / np.sqrt(means["seeds"].to_numpy())
    if np.any(~np.isfinite(se)) or np.any(se <= 0):
        raise AssocmemError("boundary fit: the noise of every D must be a positive number")
    return _Data(index, np.log(means["n_params"].to_numpy(float)), np.log(sizes)[index],
                 means["val_ce"].to_numpy(float), se, sizes)


def _lower_upper(n_sizes: int, free_b: bool) -> tuple[np.ndarray, np.ndarray]:
    low = np.r_[np.full(n_sizes, -np.inf), -np.inf, ALPHA_BOUNDS[0]]
    high = np.r_[np.full(n_sizes, np.inf), np.inf, ALPHA_BOUNDS[1]]
    return (np.r_[low, B_BOUNDS[0]], np.r_[high, B_BOUNDS[1]]) if free_b else (low, high)


def _solve(data: _Data, theta0: np.ndarray, fixed_b: float | None) -> optimize.OptimizeResult:
    """Least squares over (E_1..E_J, log A, alpha[, b]); ``fixed_b`` holds b at a value (the profile)."""
    n_sizes = data.sizes.size

    def residuals(theta: np.ndarray) -> np.ndarray:
        b = theta[-1] if fixed_b is None else fixed_b
        return data.residuals(theta[:n_sizes], theta[n_sizes], theta[n_sizes + 1], b)

    low, high = _lower_upper(n_sizes, fixed_b is None)
    return optimize.least_squares(residuals, np.clip(theta0, low + 1e-9, high - 1e-9), bounds=(low, high),
                                  method="trf")


def _start(data: _Data, b0: float, alpha0: float) -> np.ndarray:
    floors0 = np.array([data.y[data.index == j].min() for j in range(data.sizes.size)]) - 1e-3
    excess = np.maximum(data.y - floors0[data.index], 1e-6)
    log_a0 = float(np.median(np.log(excess) - alpha0 * (b0 * data.log_d - data.log_n)))
    return np.r_[floors0, log_a0, alpha0, b0]


def _profile_gap(data: _Data, theta: np.ndarray, b: float, cost_hat: float) -> tuple[float, np.ndarray]:
    """S(b) - S(b_hat) from a fit with b held, warm-started at ``theta``; and that fit's parameters."""
    result = _solve(data, theta, fixed_b=b)
    return 2 * result.cost - cost_hat, result.x


def _crossing(data: _Data, theta: np.ndarray, bracket: tuple[float, float], cost_hat: float,
              threshold: float) -> float:
    """The b inside ``bracket`` where the profile gap reaches ``threshold``."""
    return float(optimize.brentq(lambda b: _profile_gap(data, theta, b, cost_hat)[0] - threshold, *bracket,
                                 xtol=1e-5))


def _profile_end(data: _Data, best: optimize.OptimizeResult, threshold: float, direction: int) -> float:
    """Where S(b) - S(b_hat) first reaches ``threshold`` walking from b_hat in ``direction`` (inf if never
    inside B_BOUNDS): steps outwards until the crossing is bracketed (each fit warm-started from the last), then
    the root of gap(b) - threshold inside the bracket."""
    cost_hat = 2 * best.cost
    theta, inner = best.x[:-1], float(best.x[-1])
    step = _PROFILE_STEP
    while True:
        outer = float(np.clip(inner + direction * step, *B_BOUNDS))
        gap, fitted = _profile_gap(data, theta, outer, cost_hat)
        if gap >= threshold:
            if _profile_gap(data, theta, inner, cost_hat)[0] >= threshold:  # not monotone: the inner end
                return inner
            return _crossing(data, theta, (inner, outer), cost_hat, threshold)
        if outer in B_BOUNDS:
            return direction * float("inf")
        theta, inner = fitted, outer
        step = min(step * 1.5, 1.0)


def fit_boundary_exponent(cells: pd.DataFrame, noise: dict[float, float], *, per_cell: bool = False) -> BoundaryFit:
    """The weighted least-squares fit of the module docstring; ``cells``: n_tokens, n_params, val_ce (one row per
    seed); ``noise``: the seed SD of a run's CE at each D. ``per_cell``: a cell's noise is the larger of its D's and
    its own seed SD (near a learning transition some seeds learn and others do not, and one noise per D
    understates the scatter of those cells)."""
    data = _cell_data(cells, noise, per_cell)
    n_params = data.sizes.size + 3
    if data.sizes.size < 2 or len(data.y) <= n_params:
        raise AssocmemError(f"boundary fit: needs two or more D values and more cell means than parameters "
                            f"({n_params}), got {data.sizes.size} D values and {len(data.y)} cells")
    best = min((_solve(data, _start(data, b0, alpha0), None) for b0, alpha0 in _STARTS), key=lambda r: r.cost)
    dof = len(data.y) - n_params
    chi2 = float(2 * best.cost)
    scale = max(1.0, chi2 / dof)
    threshold = stats.chi2.ppf(LEVEL, 1) * scale
    low, high = (_profile_end(data, best, threshold, direction) for direction in (-1, 1))
    se = _wald_se(best.jac) * np.sqrt(scale)
    z = stats.norm.ppf(0.5 + LEVEL / 2)
    b = float(best.x[-1])
    return BoundaryFit(b=b, b_low=low, b_high=high, b_se=se, wald_low=b - z * se, wald_high=b + z * se,
                       alpha=float(best.x[-2]), log_a=float(best.x[-3]),
                       floors=tuple(float(v) for v in best.x[:data.sizes.size]),
                       sizes=tuple(float(d) for d in data.sizes), chi2=chi2, dof=dof, scale=scale,
                       converged=bool(best.success))


def _wald_se(jac: np.ndarray) -> float:
    """SE of b: the residuals are already divided by their known SE, so cov = (J^T J)^-1."""
    cov = np.linalg.pinv(jac.T @ jac)
    return float(np.sqrt(max(cov[-1, -1], 0.0)))


def boundary_in_grid(fit: BoundaryFit, tolerance: float, n_range: tuple[float, float]) -> np.ndarray:
    """Per D of the fit: whether N_b(D) lies inside the grid's N range (outside, the boundary is extrapolated)."""
    boundary = fit.boundary(tolerance)
    return (boundary >= n_range[0]) & (boundary <= n_range[1])


def fit_misfit(fit: BoundaryFit, cells: pd.DataFrame) -> dict[tuple[float, float], float]:
    """Per (D, N) cell: its mean CE minus the fit's (the structure the model does not explain; issue 38)."""
    means = cells.groupby(["n_tokens", "n_params"])["val_ce"].mean()
    floors = dict(zip(fit.sizes, fit.floors, strict=True))
    return {(float(d), float(n)): float(ce - floors[float(d)] - np.exp(
        min(fit.log_a + fit.alpha * (fit.b * np.log(d) - np.log(n)), _MAX_LOG_EXCESS)))
        for (d, n), ce in means.items()}


# range / standard deviation (ddof 1) of LAST_EVALS evenly spaced values: what a steady descent over a run's last
# evaluations fell, read from their spread (late_spread)
DESCENT_RANGE = (LAST_EVALS - 1) / float(np.sqrt(LAST_EVALS * (LAST_EVALS + 1) / 12))
BUDGET_TRUTH = "fitted model plus the shortfall of the budget-limited runs"


def budget_shortfall(cells: pd.DataFrame) -> dict[tuple[float, float], float]:
    """Per (D, N) cell: how far its step budget left its CE above where its runs were heading (issue 38): the mean
    over its runs of DESCENT_RANGE x late_spread for a run that hit its budget still improving, 0 for one that met
    its early-stopping rule. A run still falling steadily over its last LAST_EVALS evaluations fell about that much
    in that window, so one more such window of steps would take about as much off its CE: the budget truth puts
    each cell that much above the model, so its boundary moves with the budget (0 everywhere: no budget binds)."""
    limited = (cells["budget_limited"].astype(bool).to_numpy() if "budget_limited" in cells.columns
               else np.zeros(len(cells), bool))
    spread = cells["late_spread"].fillna(0.0).to_numpy(float) if "late_spread" in cells.columns else 0.0
    fall = cells.assign(fall=np.where(limited, DESCENT_RANGE * spread, 0.0))
    return {(float(d), float(n)): float(value)
            for (d, n), value in fall.groupby(["n_tokens", "n_params"])["fall"].mean().items()}


def simulate_cells(design: pd.DataFrame, noise: dict[float, float], b: float, alpha: float, tolerance: float,
                   rng: np.random.Generator, misfit: dict[tuple[float, float], float] | None = None) -> pd.DataFrame:
    """A grid at ``design`` (n_tokens, n_params, seed rows) with known b: the boundary at the middle D lies at the
    geometric middle of the N grid, floors 1 at every D, and each run's CE gets the D's seed noise; ``misfit``
    (:func:`fit_misfit`) adds each cell's departure from the fitted model of the real grid, so the truth is not the
    model the fit assumes."""
    log_n = np.log(design["n_params"].to_numpy(float))
    log_d = np.log(design["n_tokens"].to_numpy(float))
    middle_n, middle_d = (np.log(design[c]).agg(["min", "max"]).mean() for c in ("n_params", "n_tokens"))
    log_a = np.log(tolerance) + alpha * (middle_n - b * middle_d)  # N_b(D_mid) = N_mid
    excess = np.exp(log_a + alpha * (b * log_d - log_n))
    sd = np.array([noise[d] for d in design["n_tokens"]])
    structure = (np.zeros(len(design)) if misfit is None else
                 np.array([misfit[(float(d), float(n))] for d, n in zip(design["n_tokens"], design["n_params"],
                                                                         strict=True)]))
    return design.assign(val_ce=1.0 + excess + structure + sd * rng.standard_normal(len(design)))


def _law_exclusions(low: np.ndarray, high: np.ndarray, truth: float) -> dict[str, float]:
    """Share of intervals that exclude each law other than the truth."""
    return {name: float(np.mean((high < value) | (low > value))) for name, value in LAWS.items()
            if abs(value - truth) > 1e-9}


def design_power(design: pd.DataFrame, noise: dict[float, float], tolerance: float, *, alpha: float,
                 exponents: tuple[float, ...] = POWER_EXPONENTS, n_sim: int = 200, seed: int = 0,
                 progress: Callable[[str], None] | None = None,
                 misfit: dict[tuple[float, float], float] | None = None, truth: str | None = None) -> dict[str, Any]:
    """Per true b: coverage of the nominal 95% interval, mean estimate, median width, and the share of grids whose
    interval excludes each other law (power), over ``n_sim`` simulated grids at ``design`` (with ``misfit``: a
    per-cell structure added to every simulated cell, the real grid's departure from its fit by default, or the
    :func:`budget_shortfall` under ``truth`` = BUDGET_TRUTH)."""
    rng = np.random.default_rng(seed)
    by_b = []
    for b in exponents:
        fits = [fit_boundary_exponent(simulate_cells(design, noise, b, alpha, tolerance, rng, misfit), noise)
                for _ in range(n_sim)]
        low, high = np.array([fit.b_low for fit in fits]), np.array([fit.b_high for fit in fits])
        by_b.append({"b": b, "coverage": float(np.mean((low <= b) & (b <= high))),
                     "mean_estimate": float(np.mean([fit.b for fit in fits])),
                     "median_width": float(np.median(high - low)),
                     "excludes": _law_exclusions(low, high, b)})
        if progress:
            progress(f"power at b = {b:g}: coverage {by_b[-1]['coverage']:.2f} over {n_sim} simulated grids")
    return {"n_sim": n_sim, "alpha": alpha, "tolerance": tolerance, "level": LEVEL, "by_b": by_b,
            "truth": truth or ("fitted model" if misfit is None else "fitted model plus the grid's misfit")}


def can_detect_paper_b(power: dict[str, Any]) -> tuple[bool, str]:
    """Whether the design can carry a verdict on b = 2: calibrated at every simulated b, and its interval excludes
    b = 1 in at least MIN_POWER of the grids simulated at b = 2 (and excludes 2 as often at b = 1)."""
    rows = {row["b"]: row for row in power["by_b"]}
    low_coverage = [f"b = {b:g} ({row['coverage']:.0%})" for b, row in rows.items() if row["coverage"] < MIN_COVERAGE]
    if low_coverage:
        return False, (f"its interval is not calibrated at {', '.join(low_coverage)}: coverage below "
                       f"{MIN_COVERAGE:.0%} in {power['n_sim']} simulated grids")
    power_2 = rows.get(LAWS["paper"], {}).get("excludes", {}).get("hoffmann", 0.0)
    power_1 = rows.get(LAWS["hoffmann"], {}).get("excludes", {}).get("paper", 0.0)
    if min(power_2, power_1) < MIN_POWER:
        return False, (f"it cannot tell b = 2 from b = 1: simulated at b = 2 its interval excludes 1 in "
                       f"{power_2:.0%} of grids, at b = 1 it excludes 2 in {power_1:.0%} (needed: {MIN_POWER:.0%})")
    listed = ", ".join(f"{row['coverage']:.0%} at b = {b:g}" for b, row in rows.items())
    return True, (f"calibrated (coverage {listed}) and able to tell b = 2 from b = 1 (in {power_2:.0%} / "
                  f"{power_1:.0%} of simulated grids)")


def can_detect_under_every_truth(*powers: dict[str, Any]) -> tuple[bool, str]:
    """:func:`can_detect_paper_b` under every truth simulated (the fitted model first; issue 38: a design decides
    only if it is calibrated and tells 2 from 1 under each); the reason names the first truth under which not."""
    for index, power in enumerate(powers):
        detect, reason = can_detect_paper_b(power)
        if not detect:
            return False, reason if index == 0 else f"under the truth '{power['truth']}', {reason}"
    return True, can_detect_paper_b(powers[0])[1]


def detectable_range(power: dict[str, Any]) -> tuple[float, float] | None:
    """[smallest, largest] simulated exponent at which the interval is calibrated (coverage >= MIN_COVERAGE);
    None if it is calibrated at none."""
    calibrated = [row["b"] for row in power["by_b"] if row["coverage"] >= MIN_COVERAGE]
    return (min(calibrated), max(calibrated)) if calibrated else None


def grid_reach(n_range: tuple[float, float], d_range: tuple[float, float]) -> float:
    """The largest b whose boundary, centred on the grid, stays inside the N range across the D range:
    log(N span) / log(D span)."""
    return float(np.log(n_range[1] / n_range[0]) / np.log(d_range[1] / d_range[0]))
