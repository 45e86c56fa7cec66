"""The "not converged" mark: the evaluation-noise tolerance and the last-20%-of-steps rule."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from assocmem.errors import AssocmemError
from assocmem.report import convergence as cv


def curve(steps: np.ndarray, values: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame({"step": steps, "val_ce": values, "train_eval_ce": values})


def test_ratio_standard_error_matches_the_delta_method_by_simulation() -> None:
    """SE of sum(s)/sum(n) over m rows: compare with the spread of the estimate over repeated draws."""
    rng = np.random.default_rng(0)

    def draw(m: int) -> tuple[np.ndarray, np.ndarray]:
        tokens = rng.integers(5, 30, size=m)
        return rng.gamma(2.0, 0.5, size=m) * tokens, tokens

    estimates = []
    for _ in range(3000):
        nll, tokens = draw(200)
        estimates.append(nll.sum() / tokens.sum())
    nll, tokens = draw(200)
    ce, se = cv.ratio_standard_error(nll, tokens)
    assert ce == pytest.approx(nll.sum() / tokens.sum())
    assert se == pytest.approx(np.std(estimates), rel=0.15)


def test_ratio_standard_error_needs_two_rows() -> None:
    with pytest.raises(AssocmemError, match="at least 2"):
        cv.ratio_standard_error(np.array([1.0, 2.0]), np.array([3, 0]))


def test_still_falling_run_is_not_converged() -> None:
    steps = np.arange(100, 1001, 100)
    result = cv.assess("a", curve(steps, 3.0 - 0.001 * steps), tolerance=0.05)
    # last 20% = steps 800..1000: slope -0.001/step over 200 steps -> drop 0.2 > 0.05
    assert result.status == cv.NOT_CONVERGED and not result.usable
    assert result.drop == pytest.approx(0.2) and result.evaluations_in_window == 3
    assert result.endpoint_drop == pytest.approx(0.2) and result.drop_se == pytest.approx(0.0, abs=1e-12)


def test_plateau_is_converged_and_a_rise_counts_as_converged() -> None:
    steps = np.arange(100, 1001, 100)
    flat = np.r_[np.linspace(3.0, 1.0, 7), [1.0, 1.0, 1.0]]
    assert cv.assess("a", curve(steps, flat), tolerance=0.01).status == cv.CONVERGED
    rising = np.r_[np.linspace(3.0, 1.0, 7), [1.1, 1.2, 1.3]]  # over-fitting: not still falling
    result = cv.assess("b", curve(steps, rising), tolerance=0.01)
    assert result.status == cv.CONVERGED and result.drop < 0


def test_window_borrows_the_previous_evaluation_when_it_holds_one() -> None:
    # evaluations at 20, 40, 60: the last 20% (>= 48) holds only 60, so 40 is the anchor
    result = cv.assess("a", curve(np.array([20, 40, 60]), np.array([3.0, 2.0, 1.5])), tolerance=0.1)
    assert result.evaluations_in_window == 2
    assert result.drop == pytest.approx(0.5 / 20 * 12)  # slope -0.025/step over 0.2 * 60 steps
    assert result.status == cv.NOT_CONVERGED


def test_undetermined_without_noise_or_history() -> None:
    one = cv.assess("a", curve(np.array([10]), np.array([2.0])), tolerance=0.1)
    assert one.status == cv.UNDETERMINED and not one.usable
    unknown = cv.assess("b", curve(np.arange(1, 6), np.ones(5)), tolerance=None)
    assert unknown.status == cv.UNDETERMINED and "noise" in unknown.reason
    assert cv.pretrained("gpt2").usable
    with pytest.raises(AssocmemError, match="window"):
        cv.assess("c", curve(np.arange(1, 6), np.ones(5)), tolerance=0.1, window=1.5)
    with pytest.raises(AssocmemError, match="val_ce"):
        cv.assess("c", pd.DataFrame({"step": [1, 2]}), tolerance=0.1)


@settings(max_examples=50, deadline=None)
@given(st.floats(-0.01, 0.01), st.floats(0.001, 0.1), st.integers(5, 40))
def test_rule_is_the_fitted_drop_against_the_tolerance(slope: float, tolerance: float, n_evals: int) -> None:
    steps = np.linspace(10, 1000, n_evals)
    result = cv.assess("r", curve(steps, 2.0 + slope * steps), tolerance=tolerance)
    expected_drop = -slope * 0.2 * 1000
    assert result.drop == pytest.approx(expected_drop, abs=1e-9)
    assert (result.status == cv.NOT_CONVERGED) == (expected_drop > tolerance)


def test_assess_with_noise_uses_the_rows_standard_error() -> None:
    sums, counts = np.array([2.5, 3.1, 0.4]), np.array([3, 4, 1])
    metrics = curve(np.array([10, 20, 30, 40, 50]), np.full(5, sums.sum() / counts.sum()))
    result = cv.assess_with_noise("m", metrics, sums, counts)
    ce, se = cv.ratio_standard_error(sums, counts)
    assert result.tolerance == pytest.approx(se) and result.recomputed_val_ce == pytest.approx(ce)
    assert result.eval_rows == 3 and result.eval_tokens == 8 and result.status == cv.CONVERGED


