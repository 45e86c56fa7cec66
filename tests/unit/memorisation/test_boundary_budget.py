"""The two-budget capacity boundary: the gradient is the likelihood's, the outcomes nest, the fit recovers b whether
the budget already reached capacity (λ = 0) or the next doubling still moves the boundary as much as the last
(λ = 1), its interval holds b at both ends of λ, and the one-budget fit misses the capacity b that this one covers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import special

from assocmem.errors import AssocmemError
from assocmem.memorisation import boundary_budget as bb
from assocmem.memorisation import boundary_overhead as bo
from assocmem.memorisation import power_alternatives as pa

N_GRID = np.geomspace(600, 2e7, 30)  # 1.43× steps: a design that tells b = 1 from 2 at either end of λ
D_GRID = (128.0, 1024.0, 8192.0, 65536.0)


def two_budget_grid(n0: float, c: float, b: float, *, k: float, shift: tuple[float, float], lam: float,
                    seeds: int, seed: int) -> pd.DataFrame:
    """Outcomes from a capacity boundary N0 + c D^b seen at the budget λ Δ(D) above it and at half the budget
    (1 + λ) Δ(D) above it, Δ linear in log D from ``shift[0]`` at the smallest D to ``shift[1]`` at the largest."""
    rng = np.random.default_rng(seed)
    runs = pd.DataFrame([{"n_params": n, "n_facts": d, "seed": s} for n in N_GRID for d in D_GRID
                         for s in range(seeds)])
    log_d = np.log(runs["n_facts"].to_numpy())
    w = (log_d - log_d.min()) / (log_d.max() - log_d.min())
    delta = shift[0] + (shift[1] - shift[0]) * w
    capacity = np.log(n0 + c * runs["n_facts"].to_numpy() ** b)
    x, draw = np.log(runs["n_params"].to_numpy()), rng.random(len(runs))
    return runs.assign(stored=draw < special.expit(k * (x - capacity - lam * delta)),
                       stored_at_half_budget=draw < special.expit(k * (x - capacity - (1 + lam) * delta)))


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), log_k=st.floats(-1.0, 3.0), b=st.floats(0.2, 2.5),
       shifts=st.tuples(st.floats(0.01, 2.0), st.floats(0.01, 2.0)), lam=st.floats(0.0, 1.0))
def test_the_gradient_is_the_likelihoods(seed: int, log_k: float, b: float, shifts: tuple[float, float],
                                         lam: float) -> None:
    rng = np.random.default_rng(seed)
    data = bb.BudgetData(rng.normal(9.0, 1.5, 40), rng.normal(0.0, 1.0, 40), rng.integers(0, 3, 40), 6.0)
    theta = np.array([log_k, rng.normal(7.0, 1.0), rng.normal(8.0, 1.0), b, *shifts, lam])
    _, grad = bb.loglik(theta, data)
    step = 1e-6
    numeric = [(bb.loglik(theta + step * e, data)[0] - bb.loglik(theta - step * e, data)[0]) / (2 * step)
               for e in np.eye(7)]
    assert grad == pytest.approx(numeric, rel=1e-5, abs=1e-5)


def test_the_outcomes_nest_and_a_run_that_lost_its_facts_counts_as_not_stored() -> None:
    runs = pd.DataFrame({"n_params": [1e3, 1e3, 1e4, 1e4, 1e5, 1e5], "n_facts": [128, 512] * 3, "seed": 0,
                         "stored": [False, False, True, True, True, False],
                         "stored_at_half_budget": [False, True, False, True, True, True]})
    assert bb.data_of(runs).outcome.tolist() == [0, 0, 1, 2, 2, 0]
    with pytest.raises(AssocmemError, match="stored_at_half_budget"):
        bb.data_of(runs.drop(columns="stored_at_half_budget"))


def test_the_simulated_half_budget_outcomes_nest_and_sit_above_the_full_budget_boundary() -> None:
    truth = {"k": 5.0, "phi": [np.log(5.0), np.log(2000.0), 8.0, 1.0], "shift": [0.0, 0.0], "half_shift": [0.5, 0.2]}
    design = pd.DataFrame([{"n_params": n, "n_facts": d, "seed": s} for n in N_GRID for d in D_GRID
                           for s in range(5)])
    runs = pa.simulate(design, truth, 6.0, np.random.default_rng(3))
    assert not (runs["stored_at_half_budget"] & ~runs["stored"]).any()
    assert runs["stored"].sum() > runs["stored_at_half_budget"].sum() > 0


@pytest.mark.parametrize("lam", [0.0, 1.0])
def test_the_fit_covers_the_capacity_b_at_either_end_of_lambda(lam: float) -> None:
    """A sharp boundary (k = 200) moved by a shift that grows with D: at λ = 1 the full-budget boundary alone reads
    a b steeper than capacity's and its interval misses 1; the two-budget interval holds 1 and excludes 2."""
    runs = two_budget_grid(2000.0, 4.0, 1.0, k=200.0, shift=(0.1, 1.2), lam=lam, seeds=3, seed=4)
    fit = bb.fit_two_budget(runs)
    low, high = fit.b_interval()
    assert low <= 1.0 <= high and fit.gap_at_b(2.0) > bo.THRESHOLD
    one_budget = bo.fit_overhead(runs)
    if lam == 1.0:
        assert one_budget.gap_at_b(1.0) > bo.THRESHOLD  # blind to the budget: the capacity b excluded
    else:
        assert one_budget.gap_at_b(1.0) < bo.THRESHOLD


def test_the_interval_is_the_union_over_lambda() -> None:
    """λ is not identified: b at each end of λ (its own maximum) lies inside the interval, and the shift the fit
    recovers is the simulated one's order."""
    runs = two_budget_grid(2000.0, 4.0, 1.0, k=8.0, shift=(0.1, 1.2), lam=0.5, seeds=3, seed=5)
    fit = bb.fit_two_budget(runs)
    at_zero, at_one = bb.b_range_over_lambda(fit)
    low, high = fit.b_interval()
    assert low <= min(at_zero, at_one) and max(at_zero, at_one) <= high
    assert at_zero > at_one  # the full-budget boundary read as capacity: steeper
    assert fit.theta[5] > fit.theta[4]  # the shift grows with D, as simulated


def test_a_grid_without_both_outcomes_has_no_fit() -> None:
    runs = two_budget_grid(2000.0, 4.0, 1.0, k=8.0, shift=(0.1, 0.1), lam=0.0, seeds=1, seed=6)
    with pytest.raises(AssocmemError, match="every run stored"):
        bb.fit_two_budget(runs.assign(stored=True, stored_at_half_budget=True))


def test_the_power_simulation_reads_the_two_budget_fit_beside_the_others() -> None:
    """A budget-limited truth (λ = 1) at a small design: the two-budget row is reported with the overhead and pure
    rows; the overhead fit reads the budget's steeper law and never covers the capacity b, the two-budget fit's b̂
    lies nearer it; can_decide reads the model it is asked for. (Its coverage is the power record's to measure, at
    50 grids a truth: 4 grids here tell nothing about it.)"""
    ref = float(np.mean(np.log(D_GRID)))
    truth_set = {"log_d_ref": ref, "budget_shift": [0.4, 0.2],
                 "rows": [{"family": "budget", "law": "allen_zhu", "b": 1.0, "n0": 2000.0, "c": 4.0, "k": 20.0,
                           "phi": [np.log(20.0), np.log(2000.0), np.log(4.0) + ref, 1.0],
                           "shift": [0.4, 0.2], "half_shift": [0.4, 0.2]}]}
    design = pd.DataFrame([{"n_params": n, "n_facts": d, "seed": s} for n in N_GRID for d in D_GRID
                           for s in range(2)])
    power = pa.design_power(design, truth_set, n_sim=4, seed=1, two_budget=True)
    (row,) = power["rows"]
    overhead, budget = row["overhead"], row["two_budget"]
    assert budget["failed"] == 0.0 and overhead["coverage"] == 0.0 and overhead["median_b"] > 1.1
    assert abs(budget["median_b"] - 1.0) < abs(overhead["median_b"] - 1.0)
    for model in ("overhead", "two_budget"):
        decide, reason = pa.can_decide(power, model=model)
        assert not decide and f"coverage {row[model]['coverage']:.0%}" in reason


def test_the_grids_read_again_at_chi_square_give_the_simulations_own_summary() -> None:
    """The kept gaps are the simulation's: read at χ²'s value they give its two-budget row to the digit; at a larger
    value coverage can only rise and exclusions only fall."""
    ref = float(np.mean(np.log(D_GRID)))
    truth_set = {"log_d_ref": ref, "budget_shift": [0.4, 0.2],
                 "rows": [{"family": "budget", "law": "allen_zhu", "b": 1.0, "n0": 2000.0, "c": 4.0, "k": 20.0,
                           "phi": [np.log(20.0), np.log(2000.0), np.log(4.0) + ref, 1.0],
                           "shift": [0.4, 0.2], "half_shift": [0.4, 0.2]}]}
    design = pd.DataFrame([{"n_params": n, "n_facts": d, "seed": s} for n in N_GRID[::2] for d in D_GRID
                           for s in range(2)])
    power = pa.design_power(design, truth_set, n_sim=4, seed=2, two_budget=True, keep_gaps=True)
    (row,) = pa.at_threshold(power, bo.THRESHOLD)["rows"]
    assert row["two_budget_calibrated"] == row["two_budget"] and len(row["two_budget_gaps"]) == 4
    (wide,) = pa.at_threshold(power, 20.0)["rows"]
    assert wide["two_budget_calibrated"]["coverage"] >= row["two_budget"]["coverage"]
    assert all(wide["two_budget_calibrated"]["excludes"][law] <= share
               for law, share in row["two_budget"]["excludes"].items())
    assert power["two_budget_threshold"] == bo.THRESHOLD
    assert "two_budget_gaps" not in pa.design_power(design, truth_set, n_sim=1, seed=2, two_budget=True)["rows"][0]


def test_a_larger_critical_value_widens_the_interval_and_is_recorded() -> None:
    runs = two_budget_grid(2000.0, 4.0, 1.0, k=8.0, shift=(0.1, 1.2), lam=0.5, seeds=3, seed=5)
    fit = bb.fit_two_budget(runs)
    chi2, wide = bb.two_budget_record(fit), bb.two_budget_record(fit, 6.0)
    assert wide["b_low"] < chi2["b_low"] < chi2["b_high"] < wide["b_high"]
    assert (chi2["threshold"], chi2["calibrated"]) == (bo.THRESHOLD, False)
    assert (wide["threshold"], wide["calibrated"]) == (6.0, True)
    assert fit.gap_at_b(wide["b_low"]) == pytest.approx(6.0, abs=0.05)
