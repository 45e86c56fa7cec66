"""The "not converged" mark: a run whose validation CE still falls by more than a stated tolerance over the last
20% of its steps. No claim rests on a run so marked (report.checks filters them and lists them).

Rule. Let S be the last logged step and W the evaluations at steps >= (1 - window) S (window = 0.2); when W
holds fewer than two, the last evaluation before the window is added as an anchor. The *drop* is minus the
least-squares slope of val CE on step over W, times window * S: the fall the late trend implies over the last
fifth of training. A run is

* "not converged" iff drop > tolerance,
* "converged" iff drop <= tolerance,
* "undetermined" iff fewer than two evaluations exist or the tolerance is unknown (treated like "not
  converged" by every claim).

Tolerance = the standard error of the final validation CE, estimated on the fixed evaluation batches: with s_i
the summed NLL and n_i the predicted tokens of row i (a sequence, or a window for text corpora), CE =
sum s_i / sum n_i and, treating rows as independent clusters (delta method for a ratio),
SE^2 = m / (m - 1) * sum_i (s_i - CE n_i)^2 / (sum_i n_i)^2.
Why this tolerance: every claim compares the final level with a floor or with 1, and that level is known only to
+- SE. If the fall over the last fifth of training is below the SE, training another fifth would move the level
by less than its own uncertainty; a larger fall means the final value still measures the training budget, not
the plateau. A run that plateaus only because the learning rate decayed to its floor passes this test; that
limit is stated in the report.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from assocmem.errors import AssocmemError

WINDOW = 0.2
CONVERGED, NOT_CONVERGED, UNDETERMINED, PRETRAINED = ("converged", "not converged", "undetermined",
                                                      "pretrained (not trained here)")
USABLE = (CONVERGED, PRETRAINED)


@dataclass(frozen=True)
class Convergence:
    run: str
    status: str
    final_step: float | None = None
    window_start_step: float | None = None
    evaluations_in_window: int = 0
    drop: float | None = None  # fitted fall of val CE over the last `window` of steps (nats/token)
    drop_se: float | None = None  # its standard error from the fit residuals (>= 3 evaluations)
    endpoint_drop: float | None = None  # val CE at the first window evaluation minus the final val CE
    tolerance: float | None = None
    final_val_ce: float | None = None
    eval_rows: int | None = None
    eval_tokens: int | None = None
    recomputed_val_ce: float | None = None  # the final model on the fixed batches (must equal final_val_ce)
    reason: str = ""

    @property
    def usable(self) -> bool:
        return self.status in USABLE

    def as_record(self) -> dict[str, Any]:
        return asdict(self)


def ratio_standard_error(row_nll: np.ndarray, row_tokens: np.ndarray) -> tuple[float, float]:
    """(CE, SE) of the token-averaged CE sum s_i / sum n_i with rows as independent clusters."""
    sums = np.asarray(row_nll, dtype=np.float64)
    counts = np.asarray(row_tokens, dtype=np.float64)
    keep = counts > 0
    sums, counts = sums[keep], counts[keep]
    if sums.size < 2:
        raise AssocmemError(f"need at least 2 evaluation rows with targets to estimate the eval noise, got {sums.size}")
    ce = float(sums.sum() / counts.sum())
    residual = sums - ce * counts
    se = float(np.sqrt(sums.size / (sums.size - 1) * (residual @ residual)) / counts.sum())
    return ce, se


def _window(metrics: pd.DataFrame, column: str, window: float) -> tuple[pd.DataFrame, float, float]:
    """The evaluations of the last ``window`` of steps (plus the one before it when fewer than two fall inside)."""
    curve = metrics[["step", column]].dropna().sort_values("step")
    final_step = float(curve["step"].iloc[-1])
    start = (1.0 - window) * final_step
    inside, before = curve[curve["step"] >= start], curve[curve["step"] < start]
    if len(inside) < 2 and not before.empty:
        inside = pd.concat([before.iloc[[-1]], inside])
    return inside, final_step, start


def assess(run: str, metrics: pd.DataFrame, tolerance: float | None, window: float = WINDOW,
           column: str = "val_ce") -> Convergence:
    """Apply the rule of the module docstring to one run's metrics (columns step and ``column``)."""
    if not 0 < window < 1:
        raise AssocmemError(f"convergence window must be in (0, 1), got {window}")
    if column not in metrics.columns or "step" not in metrics.columns:
        raise AssocmemError(f"metrics of {run}: need columns 'step' and {column!r}, got {list(metrics.columns)}")
    if metrics[column].notna().sum() < 2:
        return Convergence(run, UNDETERMINED, reason="fewer than two evaluations")
    inside, final_step, start = _window(metrics, column, window)
    values = inside[column].to_numpy(dtype=np.float64)
    fit = stats.linregress(inside["step"].to_numpy(dtype=np.float64), values)
    drop = float(-fit.slope * window * final_step)
    drop_se = float(fit.stderr * window * final_step) if len(inside) >= 3 else None
    common = {"final_step": final_step, "window_start_step": start, "evaluations_in_window": len(inside),
              "drop": drop, "drop_se": drop_se, "endpoint_drop": float(values[0] - values[-1]),
              "tolerance": tolerance, "final_val_ce": float(values[-1])}
    if tolerance is None or not np.isfinite(tolerance):
        return Convergence(run, UNDETERMINED, **common, reason="no tolerance: the evaluation noise is unknown")
    status = NOT_CONVERGED if drop > tolerance else CONVERGED
    relation = ">" if drop > tolerance else "<="
    reason = (f"val CE falls {drop:.4f} nats over the last {window:.0%} of steps (steps {start:g}-{final_step:g}, "
              f"{len(inside)} evaluations, least-squares trend) {relation} tolerance {tolerance:.4f} "
              "(1 standard error of the final val CE on the fixed evaluation batches)")
    return Convergence(run, status, **common, reason=reason)


def assess_with_noise(run: str, metrics: pd.DataFrame, row_nll: np.ndarray, row_tokens: np.ndarray,
                      window: float = WINDOW) -> Convergence:
    """:func:`assess` with the tolerance estimated from the final model's per-row losses on the fixed batches."""
    ce, se = ratio_standard_error(row_nll, row_tokens)
    values = assess(run, metrics, se, window).as_record()
    values.update(eval_rows=int((np.asarray(row_tokens) > 0).sum()), eval_tokens=int(np.sum(row_tokens)),
                  recomputed_val_ce=ce)
    return Convergence(**values)


def pretrained(run: str) -> Convergence:
    return Convergence(run, PRETRAINED, reason="pretrained weights: trained elsewhere, assumed saturated as in "
                                               "the paper's Assumption 1")
