"""The power of a memorisation grid's design to tell the storage-boundary laws apart, read by the Firth fit of
:mod:`assocmem.memorisation.boundary`.

Power (``design_power``). Before any verdict: simulate grids at the design (the same N, D and seeds) with known b,
the boundary at D_ref placed at the geometric middle of the N grid, with a given k; fit each and measure the
coverage of the nominal 95% interval for b, the estimate, the interval width, the share of failed fits, and how
often the interval excludes each other law. ``can_decide``: a design carries a verdict only if the coverage is at
least MIN_COVERAGE = 0.90 at every law's b, and for every pair of laws the interval excludes the other in at least
MIN_POWER = 0.80 of the grids simulated under either.
"""

from __future__ import annotations

from itertools import permutations
from typing import Any

import numpy as np
import pandas as pd
from scipy import special

from assocmem.errors import AssocmemError
from assocmem.memorisation.boundary import LAWS, LEVEL, _b_fit, _check_columns, _check_outcomes, _Grid, _make_grid

MIN_COVERAGE = 0.90
MIN_POWER = 0.80


def simulate_runs(design: pd.DataFrame, b: float, k: float, rng: np.random.Generator) -> pd.DataFrame:
    """``design`` (n_params, n_facts, seed rows) with a ``stored`` outcome drawn from the model with exponent b and
    sharpness k, the boundary at D_ref at the geometric middle of the distinct N."""
    _check_columns(design, ("n_params", "n_facts", "seed"), "simulate runs")
    grid = _make_grid(design["n_params"].to_numpy(float), design["n_facts"].to_numpy(float), np.zeros(len(design)))
    return design.assign(stored=_draw(grid, b, k, rng).astype(bool))


def _draw(grid: _Grid, b: float, k: float, rng: np.random.Generator, offset: float = 0.0) -> np.ndarray:
    """Outcomes with log N_b(D_ref) at the centre of log N (x = 0 there) plus ``offset``."""
    p = special.expit(k * (grid.x - offset - b * (grid.log_d - grid.log_d_ref)))
    return (rng.random(grid.x.size) < p).astype(float)


def design_power(design: pd.DataFrame, *, k: float, n_sim: int, seed: int,
                 exponents: tuple[float, ...] = tuple(LAWS.values()), jitter: bool = False) -> dict[str, Any]:
    """Per true b: coverage of the 95% interval, mean and median b̂, median interval width, share of failed fits,
    and the share of intervals that exclude each other law, over ``n_sim`` grids simulated at ``design``. A failed
    fit (a grid where every run stored, none did, k came out <= 0 or b̂ outside B_BOUNDS) counts as neither
    covering nor excluding.
    ``jitter``: each grid's boundary at D_ref is moved uniformly within half a mean N-grid step of the middle; where
    k is large against the grid step the outcomes are nearly deterministic and the coverage depends on where the
    boundary falls between grid points, which one fixed placement does not sample."""
    _check_columns(design, ("n_params", "n_facts", "seed"), "design power")
    if not (k > 0 and n_sim >= 1):
        raise AssocmemError(f"design power: needs k > 0 and n_sim >= 1, got k = {k}, n_sim = {n_sim}")
    shape = _make_grid(design["n_params"].to_numpy(float), design["n_facts"].to_numpy(float), np.zeros(len(design)))
    half_step = float(np.ptp(shape.x)) / max(np.unique(shape.x).size - 1, 1) / 2 if jitter else 0.0
    rng = np.random.default_rng(seed)
    by_b = []
    for b in exponents:
        estimates = np.full((n_sim, 3), np.nan)
        for i in range(n_sim):
            offset = rng.uniform(-half_step, half_step) if jitter else 0.0
            grid = _Grid(shape.x, shape.log_d, _draw(shape, b, k, rng, offset), shape.centre, shape.log_d_ref)
            try:
                _check_outcomes(grid)
                estimates[i] = _b_fit(grid)[1:]
            except AssocmemError:
                continue
        by_b.append(_power_row(b, estimates))
    return {"n_sim": n_sim, "k": k, "seed": seed, "jitter": jitter, "level": LEVEL, "by_b": by_b}


def _power_row(b: float, estimates: np.ndarray) -> dict[str, Any]:
    ok = ~np.isnan(estimates[:, 0])
    b_hat, low, high = estimates[ok].T
    n_sim = len(estimates)
    law = next((name for name, value in LAWS.items() if np.isclose(value, b)), None)
    return {"b": b, "law": law, "coverage": float(np.sum((low <= b) & (b <= high)) / n_sim),
            "mean_b": float(np.mean(b_hat)) if ok.any() else np.nan,
            "median_b": float(np.median(b_hat)) if ok.any() else np.nan,
            "median_width": float(np.median(high - low)) if ok.any() else np.nan,
            "failed": float(1 - ok.mean()),
            "excludes": {name: float(np.sum((high < value) | (low > value)) / n_sim)
                         for name, value in LAWS.items() if name != law}}


PAPER_PAIRS = tuple(pair for pair in permutations(LAWS, 2) if "paper" in pair)  # the paper's b against each other


def weakest_separation(power: dict[str, Any], pairs: tuple[tuple[str, str], ...] | None = None
                       ) -> tuple[str, str, float]:
    """(true law, other law, share): among ``pairs`` (default all ordered pairs of laws), the pair whose other law
    the interval excludes least often in the grids simulated under the true one."""
    rows = {row["law"]: row for row in power["by_b"] if row.get("law")}
    true, other = min(pairs or permutations(LAWS, 2), key=lambda pair: rows[pair[0]]["excludes"][pair[1]])
    return true, other, rows[true]["excludes"][other]


def can_decide(power: dict[str, Any], pairs: tuple[tuple[str, str], ...] | None = None) -> tuple[bool, str]:
    """Whether the design can carry a verdict among the laws: coverage >= MIN_COVERAGE at every simulated b, each
    law simulated, and for every ordered pair of laws (``pairs``; default all, ``PAPER_PAIRS``: the paper's against
    each other law) the interval excludes the other in >= MIN_POWER of the grids simulated under the one; the reason
    names the weakest number."""
    rows = {row["law"]: row for row in power["by_b"] if row.get("law")}
    missing = [name for name in LAWS if name not in rows]
    if missing:
        return False, f"the power simulation lacks the law(s) {', '.join(missing)}"
    worst = min(power["by_b"], key=lambda row: row["coverage"])
    if worst["coverage"] < MIN_COVERAGE:
        return False, (f"its interval is not calibrated: coverage {worst['coverage']:.0%} at b = {worst['b']:.3g} "
                       f"(needed {MIN_COVERAGE:.0%}) in {power['n_sim']} simulated grids")
    true, other, weakest = weakest_separation(power, pairs)
    if weakest < MIN_POWER:
        return False, (f"it cannot tell b = {LAWS[true]:.3g} ({true}) from b = {LAWS[other]:.3g} ({other}): "
                       f"simulated at {LAWS[true]:.3g}, its interval excludes {LAWS[other]:.3g} in {weakest:.0%} of "
                       f"grids (needed {MIN_POWER:.0%})")
    return True, (f"calibrated (coverage >= {worst['coverage']:.0%} at every b) and able to tell the laws apart: "
                  f"the weakest, {true} against {other}, excluded in {weakest:.0%} of simulated grids")
