"""A trained run's status: converged, not converged or over-fitted. The rule is fixed in advance:

1. **Over-fitted** iff the final validation CE exceeds the run's best by more than ``z`` = 1.96 standard errors of
   the final value (its evaluation noise): the run is past its best. Later stages use its best checkpoint
   (``best.pt``); no claim about a loss floor rests on it.
2. **Trend.** Least squares of validation CE on log2(step) over the evaluations in the last ``window`` (default
   half) of the steps, at least three (earlier evaluations are added when fewer fall inside). The slope is the
   change per doubling of training; ``-slope + t(0.95, df) * se(slope)`` is a one-sided 95% upper bound on how much
   one more doubling would still lower the CE if the trend held: the *remaining fall*.
3. **Converged** iff the remaining fall is at most ``margin``, the resolution the claims need; **not converged**
   otherwise; **undetermined** with fewer than three evaluations or no evaluation noise.
4. **Floor cap** (claims on data with an exact entropy floor H, :func:`floor_cap`): no model's expected CE on fresh
   samples lies below H, so the most a run can still fall is its CE's upper confidence bound minus H, however
   steep its trend. A run whose capped remaining fall is at most ``margin`` has reached its level within the
   claim's resolution (the loss-floor claim counts it; the statuses above do not change).

Why this rule. A claim compares a run's level with a floor or with 1, so a run counts when training longer could not
move it by as much as the claim must resolve; the margin is that resolution (for data whose exact entropy floor lies
below 1: half the distance from the floor to 1, the gap the loss-floor claim has to tell apart). The trend's own
standard error enters, so a noisy flat curve is not "converged" by chance. Steps enter as log2(step) over half the
run, so a plateau shorter than the window (a run cut off at 5,500 steps on its way down) still shows its fall.
Limits: a trend is not a forecast. A run whose learning rate decays to its floor flattens because the optimiser
stops, not because the model has nothing left to learn; the report states this, and its sensitivity table shows
the statuses under other windows and margins.

The evaluation noise: with s_i the summed NLL and n_i the predicted tokens of row i of the fixed evaluation batches,
CE = sum s_i / sum n_i and, treating rows as independent clusters (delta method for a ratio),
SE^2 = m / (m - 1) * sum_i (s_i - CE n_i)^2 / (sum_i n_i)^2.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from assocmem.errors import AssocmemError
from assocmem.stats import clustered_ce

WINDOW = 0.5
Z_RISE = 1.96
ONE_SIDED = 0.95
DEFAULT_MARGIN = 0.01  # nats: the resolution asked of runs on data without an exact floor below 1
SENSITIVITY_WINDOWS = (0.3, 0.5, 0.7)
SENSITIVITY_MARGIN_FACTORS = (0.5, 1.0, 2.0)
CONVERGED, NOT_CONVERGED, OVER_FITTED, UNDETERMINED, PRETRAINED = (
    "converged", "not converged", "over-fitted", "undetermined", "pretrained (not trained here)")
USABLE = (CONVERGED, PRETRAINED)  # a level (a loss floor) may rest on these
USABLE_AT_BEST = (CONVERGED, OVER_FITTED, PRETRAINED)  # a model at its best checkpoint (activations) may


@dataclass(frozen=True)
class Convergence:
    run: str
    status: str
    final_step: float | None = None
    window_start_step: float | None = None
    evaluations_in_window: int = 0
    fall_per_doubling: float | None = None  # minus the slope of val CE on log2(step) in the window (nats)
    fall_se: float | None = None  # its standard error from the fit residuals
    remaining_fall: float | None = None  # one-sided 95% upper bound of the fall per doubling
    margin: float | None = None
    final_val_ce: float | None = None
    best_val_ce: float | None = None
    best_step: float | None = None
    rise: float | None = None  # final minus best val CE
    tolerance: float | None = None  # SE of the final val CE on the fixed evaluation batches
    eval_rows: int | None = None
    eval_tokens: int | None = None
    recomputed_val_ce: float | None = None  # the final model on the fixed batches (must equal final_val_ce)
    reason: str = ""

    @property
    def usable(self) -> bool:
        """May a claim about the run's level (a loss floor) rest on it?"""
        return self.status in USABLE

    @property
    def usable_at_best(self) -> bool:
        """May a claim about the model at its best checkpoint rest on it?"""
        return self.status in USABLE_AT_BEST

    def as_record(self) -> dict[str, Any]:
        return asdict(self)


def _window(curve: pd.DataFrame, window: float) -> tuple[pd.DataFrame, float]:
    """The evaluations of the last ``window`` of steps, with earlier ones added until there are three."""
    final_step = float(curve["step"].iloc[-1])
    start = (1.0 - window) * final_step
    inside = curve[curve["step"] >= start]
    if len(inside) < 3:
        inside = curve.iloc[-3:]
    return inside, start


def _trend(inside: pd.DataFrame, column: str) -> tuple[float, float, float]:
    """(fall per doubling, its SE, its one-sided upper bound) from the least-squares line of val CE on log2(step)."""
    x = np.log2(inside["step"].to_numpy(dtype=np.float64))
    y = inside[column].to_numpy(dtype=np.float64)
    centred = x - x.mean()
    slope = float(centred @ (y - y.mean()) / (centred @ centred))
    residual = y - y.mean() - slope * centred
    df = len(x) - 2
    se = float(np.sqrt(residual @ residual / df / (centred @ centred)))
    return -slope, se, -slope + float(stats.t.ppf(ONE_SIDED, df)) * se


def assess(run: str, metrics: pd.DataFrame, tolerance: float | None, margin: float = DEFAULT_MARGIN,
           window: float = WINDOW, column: str = "val_ce") -> Convergence:
    """Apply the rule of the module docstring to one run's metrics (columns step and ``column``)."""
    if not 0 < window <= 1:
        raise AssocmemError(f"convergence window must be in (0, 1], got {window}")
    if column not in metrics.columns or "step" not in metrics.columns:
        raise AssocmemError(f"metrics of {run}: need columns 'step' and {column!r}, got {list(metrics.columns)}")
    curve = metrics[["step", column]].dropna().sort_values("step")
    if len(curve) < 3:
        return Convergence(run, UNDETERMINED, margin=margin, reason="fewer than three evaluations")
    best = int(curve[column].to_numpy().argmin())
    inside, start = _window(curve, window)
    fall, fall_se, upper = _trend(inside, column)
    common = {"final_step": float(curve["step"].iloc[-1]), "window_start_step": start,
              "evaluations_in_window": len(inside), "fall_per_doubling": fall, "fall_se": fall_se,
              "remaining_fall": upper, "margin": margin, "final_val_ce": float(curve[column].iloc[-1]),
              "best_val_ce": float(curve[column].iloc[best]), "best_step": float(curve["step"].iloc[best]),
              "rise": float(curve[column].iloc[-1] - curve[column].iloc[best]), "tolerance": tolerance}
    if tolerance is None or not np.isfinite(tolerance):
        return Convergence(run, UNDETERMINED, **common, reason="no evaluation noise: the per-row losses are missing")
    if common["rise"] > Z_RISE * tolerance:
        return Convergence(run, OVER_FITTED, **common, reason=(
            f"val CE ends {common['rise']:.4f} nats above its best (step {common['best_step']:g}), more than "
            f"{Z_RISE} x its standard error {tolerance:.4f}: past its best"))
    status = CONVERGED if upper <= margin else NOT_CONVERGED
    relation = "<=" if status == CONVERGED else ">"
    return Convergence(run, status, **common, reason=(
        f"val CE falls {fall:.4f} +- {fall_se:.4f} nats per doubling of steps (least squares on log2 step over "
        f"steps {inside['step'].iloc[0]:g}-{common['final_step']:g}, {len(inside)} evaluations); the 95% upper "
        f"bound {upper:.4f} {relation} margin {margin:.4f}"))


def assess_with_noise(run: str, metrics: pd.DataFrame, row_nll: np.ndarray, row_tokens: np.ndarray,
                      margin: float = DEFAULT_MARGIN, window: float = WINDOW) -> Convergence:
    """:func:`assess` with the evaluation noise estimated from the final model's per-row losses."""
    ce, se = clustered_ce(row_nll, row_tokens)
    values = assess(run, metrics, se, margin, window).as_record()
    values.update(eval_rows=int((np.asarray(row_tokens) > 0).sum()), eval_tokens=int(np.sum(row_tokens)),
                  recomputed_val_ce=ce)
    return Convergence(**values)


def pretrained(run: str) -> Convergence:
    return Convergence(run, PRETRAINED, reason="pretrained weights: trained elsewhere, assumed saturated as in "
                                               "the paper's Assumption 1")


def floor_cap(level: float, level_se: float, floor: float, z: float = Z_RISE) -> float:
    """Rule 4: the most a run's expected held-out CE (``level`` +- ``z`` * ``level_se``) can still fall above an
    exact entropy floor: its upper confidence bound minus the floor, never negative."""
    return max(level + z * level_se - floor, 0.0)


def capped_fall(remaining_fall: float | None, cap: float) -> float:
    """The remaining fall of rule 2 capped by rule 4 (the cap alone when the trend is unknown)."""
    return cap if remaining_fall is None or not np.isfinite(remaining_fall) else min(remaining_fall, cap)


def reaches_the_floor(usable: bool, status: str, remaining_fall: float | None, margin: float | None,
                      cap: float) -> bool:
    """Rule 4 counts the run: its trend did not (``usable`` false), it is not over-fitted, and the floor caps its
    remaining fall (``cap``, :func:`floor_cap`) within the margin."""
    return (not usable and status != OVER_FITTED and margin is not None and np.isfinite(cap)
            and capped_fall(remaining_fall, cap) <= margin)


def at_the_floor_status(cap: float) -> str:
    return f"at the floor: can fall at most {cap:.4f} nats, within the margin"


def claim_margin(floor: float | None) -> float:
    """The resolution asked of a run: half the distance from an exact floor below 1 to 1, else DEFAULT_MARGIN."""
    return (1.0 - floor) / 2 if floor is not None and floor < 1 else DEFAULT_MARGIN
