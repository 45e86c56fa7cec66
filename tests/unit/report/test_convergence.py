"""A run's status: the evaluation noise, the trend's remaining fall against the claim's margin, over-fitting."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from assocmem.errors import AssocmemError
from assocmem.report import convergence as cv
from assocmem.stats import clustered_ce


def curve(steps: np.ndarray, values: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame({"step": steps, "val_ce": values, "train_eval_ce": values})


def test_still_falling_run_is_not_converged() -> None:
    steps = np.arange(100, 1001, 100)
    result = cv.assess("a", curve(steps, 3.0 - 0.1 * np.log2(steps)), tolerance=0.01, margin=0.05)
    # last half: steps 500..1000, a fall of exactly 0.1 per doubling, no scatter
    assert result.status == cv.NOT_CONVERGED and not result.usable and not result.usable_at_best
    assert result.fall_per_doubling == pytest.approx(0.1) and result.evaluations_in_window == 6
    assert result.remaining_fall == pytest.approx(0.1) and result.fall_se == pytest.approx(0.0, abs=1e-12)


def test_a_flat_end_is_converged_and_a_rise_beyond_the_noise_is_over_fitted() -> None:
    steps = np.arange(100, 1001, 100)
    flat = np.r_[np.linspace(3.0, 1.0, 4), np.full(6, 1.0)]
    assert cv.assess("a", curve(steps, flat), tolerance=0.01, margin=0.005).status == cv.CONVERGED
    rising = np.r_[np.linspace(3.0, 1.0, 7), [1.1, 1.2, 1.3]]
    over = cv.assess("b", curve(steps, rising), tolerance=0.01, margin=0.005)
    assert over.status == cv.OVER_FITTED and not over.usable and over.usable_at_best
    assert over.rise == pytest.approx(0.3) and over.best_step == 700
    within_noise = np.r_[np.linspace(3.0, 1.0, 4), np.full(5, 1.0), [1.01]]  # 1 SE above its best, not 1.96
    assert cv.assess("c", curve(steps, within_noise), tolerance=0.01, margin=0.05).status == cv.CONVERGED


def test_a_short_plateau_inside_the_window_does_not_pass() -> None:
    """Cut at step 5,500 on its way down: the last 500 steps are flat, the last half is not."""
    steps = np.arange(250, 5501, 250)
    values = np.where(steps < 5000, 1.5 - 0.1 * np.log2(steps / 250), 1.5 - 0.1 * np.log2(5000 / 250))
    result = cv.assess("plateau", curve(steps, values), tolerance=0.002, margin=0.004)
    assert result.status == cv.NOT_CONVERGED and result.fall_per_doubling > 0.05


def test_the_trend_needs_three_evaluations_and_borrows_earlier_ones() -> None:
    result = cv.assess("a", curve(np.array([20, 40, 60]), np.array([3.0, 2.0, 1.5])), tolerance=0.1)
    assert result.evaluations_in_window == 3 and result.window_start_step == pytest.approx(30)
    assert result.status == cv.NOT_CONVERGED


def test_undetermined_without_noise_or_history() -> None:
    two = cv.assess("a", curve(np.array([10, 20]), np.array([2.0, 1.9])), tolerance=0.1)
    assert two.status == cv.UNDETERMINED and not two.usable
    unknown = cv.assess("b", curve(np.arange(1, 6), np.ones(5)), tolerance=None)
    assert unknown.status == cv.UNDETERMINED and "noise" in unknown.reason
    assert cv.pretrained("gpt2").usable and cv.pretrained("gpt2").usable_at_best
    with pytest.raises(AssocmemError, match="window"):
        cv.assess("c", curve(np.arange(1, 6), np.ones(5)), tolerance=0.1, window=1.5)
    with pytest.raises(AssocmemError, match="val_ce"):
        cv.assess("c", pd.DataFrame({"step": [1, 2]}), tolerance=0.1)


@settings(max_examples=50, deadline=None)
@given(st.floats(-0.05, 0.05), st.floats(0.001, 0.1), st.integers(6, 40))
def test_rule_is_the_fall_per_doubling_against_the_margin(fall: float, margin: float, n_evals: int) -> None:
    """A noiseless power law in the steps: the fitted fall per doubling is exact and decides alone."""
    steps = np.linspace(10, 1000, n_evals)
    result = cv.assess("r", curve(steps, 2.0 - fall * np.log2(steps)), tolerance=1.0, margin=margin)
    assert result.fall_per_doubling == pytest.approx(fall, abs=1e-9)
    assert result.remaining_fall == pytest.approx(fall, abs=1e-9)  # no scatter: the bound is the fall itself
    assert (result.status == cv.NOT_CONVERGED) == (result.remaining_fall > margin)


def test_the_upper_bound_uses_the_trends_own_standard_error() -> None:
    """Scatter widens the bound: the remaining fall is the fitted fall plus t(0.95, df) standard errors, and the
    status flips exactly there."""
    rng = np.random.default_rng(0)
    steps = np.arange(100, 2001, 100)
    noisy = curve(steps, 1.0 - 0.01 * np.log2(steps) + 0.02 * rng.standard_normal(steps.size))
    result = cv.assess("n", noisy, tolerance=1.0, margin=0.01)
    df = result.evaluations_in_window - 2
    assert result.fall_se > 0 and result.remaining_fall == pytest.approx(
        result.fall_per_doubling + stats.t.ppf(0.95, df) * result.fall_se)
    above, below = result.remaining_fall + 1e-9, result.remaining_fall - 1e-9
    assert cv.assess("n", noisy, tolerance=1.0, margin=above).status == cv.CONVERGED
    assert cv.assess("n", noisy, tolerance=1.0, margin=below).status == cv.NOT_CONVERGED


def test_the_margin_is_half_the_gap_between_floor_and_one() -> None:
    assert cv.claim_margin(0.9917) == pytest.approx(0.00415)
    assert cv.claim_margin(None) == cv.claim_margin(1.2) == cv.DEFAULT_MARGIN


def test_assess_with_noise_uses_the_rows_standard_error() -> None:
    sums, counts = np.array([2.5, 3.1, 0.4]), np.array([3, 4, 1])
    metrics = curve(np.array([10, 20, 30, 40, 50]), np.full(5, sums.sum() / counts.sum()))
    result = cv.assess_with_noise("m", metrics, sums, counts)
    ce, se = clustered_ce(sums, counts)
    assert result.tolerance == pytest.approx(se) and result.recomputed_val_ce == pytest.approx(ce)
    assert result.eval_rows == 3 and result.eval_tokens == 8 and result.status == cv.CONVERGED


