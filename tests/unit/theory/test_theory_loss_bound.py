"""Proposition 4 forms and the exact one-layer cross-entropy that refutes the printed 1/Z_t term."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import erfinv

from assocmem.theory import loss_bound as lb


@settings(max_examples=100, deadline=None)
@given(st.floats(-650.0, 650.0))
def test_log_z_plus_inverse_is_at_least_one(log_z: float) -> None:
    assert lb.log_z_plus_inverse(log_z) >= 1.0 - 1e-12


def test_minimum_at_z_equal_one_and_overflow_handling() -> None:
    assert lb.log_z_plus_inverse(0.0) == 1.0
    assert lb.log_z_plus_inverse(-800.0) == np.inf
    assert lb.log_of_log_z_plus_inverse(-800.0) == pytest.approx(800.0, rel=1e-12)
    assert lb.log_of_log_z_plus_inverse(-5.0) == pytest.approx(np.log(np.exp(5.0) - 5.0))
    assert lb.prop4_printed_upper(0.0, 24) == pytest.approx(1.0 + np.log(24))


def test_paper_scale_numbers() -> None:
    at_r_star = lb.prop4_from_radius(1024, np.sqrt(1024 / (2 * np.pi * np.e)), 80_000, 24)
    assert at_r_star["log_Z_t"] < -50 and at_r_star["inv_Z_t"] > 1e21
    at_10 = lb.prop4_from_radius(1024, 10.0, 80_000, 24)
    assert at_10["log_Z_t"] > 150 and at_10["log_z_plus_inv"] == pytest.approx(at_10["log_Z_t"])


@pytest.mark.parametrize("n_layers", [2, 3, 24])
def test_exact_layered_cross_entropy_refutes_the_inverse_z_term(n_layers: int) -> None:
    """d = 1, n = 1, l identical layers (c = 0, inside [0, log l)), radius with Z_t = 1: exact L = -log p(rho) =
    log Z_theta + E_global(rho) = log l - log l = 0; the paper says 1 + log l and 1 < L."""
    radius = float(erfinv(1.0 / np.sqrt(np.pi)))
    out = lb.toy_cross_entropy_1d(np.array([0.0]), radius, n_layers=n_layers)
    assert out["log_Z"] == pytest.approx(0.0, abs=1e-12)
    assert out["log_Z_theta"] == pytest.approx(np.log(n_layers), abs=1e-12)
    assert out["exact_L"] == pytest.approx(0.0, abs=1e-12)
    assert out["paper_L"] == pytest.approx(1.0 + np.log(n_layers), abs=1e-12) and out["c"] == 0.0
    assert out["corrected_L"] == pytest.approx(out["exact_L"], abs=1e-12)
    with pytest.raises(ValueError, match="empty for l = 1"):
        lb.toy_cross_entropy_1d(np.array([0.0]), radius, n_layers=1)


@pytest.mark.parametrize("n_layers", [2, 3])
def test_layers_that_split_the_patterns_add_log_l_to_the_corrected_loss(n_layers: int) -> None:
    """Redone with the energy, App. C.1 gives L = log Z_t through its substitution (b), log Z_theta ~= log l - c +
    log Z_t, which holds where one layer is nearest everywhere. With the patterns split between the layers (one
    far-apart pattern each, Z_t = 1), c(x) = log l on Omega (excluded by the LaTeX source's [0, log l), included by
    the PDF text's [0, log l]) and the exact L = log Z_theta = log(sum_t Z_t) = log l: log Z_t + log l, not log Z_t,
    and below Prop. 4's floor 1 for l = 2."""
    radius = float(erfinv(1.0 / np.sqrt(np.pi)))
    out = lb.layered_cross_entropy_1d([np.array([10.0 * t]) for t in range(n_layers)], radius)
    assert out["log_Z_t"] == pytest.approx([0.0] * n_layers, abs=1e-12)
    assert out["exact_L"] == pytest.approx(np.log(n_layers), abs=1e-12) == out["log_sum_Z_t"]
    assert out["c_min"] == pytest.approx(np.log(n_layers)) == out["c_max"]
    if n_layers == 2:
        assert out["exact_L"] < 1.0
    # with identical layers the same computation is the one-layer toy's (c = 0, L = log Z_t)
    same = lb.layered_cross_entropy_1d([np.array([0.0, 10.0])] * n_layers, 0.2)
    toy = lb.toy_cross_entropy_1d(np.array([0.0, 10.0]), 0.2, n_layers=n_layers)
    assert same["exact_L"] == pytest.approx(toy["exact_L"], abs=1e-9)
    assert same["log_Z_theta"] == pytest.approx(toy["log_Z_theta"], abs=1e-9)
    assert same["c_min"] == pytest.approx(0.0, abs=1e-12) == same["c_max"]
    with pytest.raises(ValueError, match="overlap"):
        lb.layered_cross_entropy_1d([np.array([0.0]), np.array([1.0])], 0.6)


def test_exact_cross_entropy_can_be_negative() -> None:
    out = lb.toy_cross_entropy_1d(np.array([0.0, 10.0]), 0.2)
    assert out["exact_L"] < 0 < 1 <= out["paper_L"]
    with pytest.raises(ValueError, match="overlap"):
        lb.toy_cross_entropy_1d(np.array([0.0, 1.0]), 0.6)


@settings(max_examples=50, deadline=None)
@given(st.floats(0.0, 5.0), st.integers(2, 48), st.floats(0.0, 1.0))
def test_printed_proof_steps_disagree_by_log_l(inv_z: float, n_layers: int, share: float) -> None:
    """App. C.1 as printed: (a) then the Z_theta substitution gives 1/Z + 2 log l - c; (b) prints 1/Z + log l - c."""
    c = share * np.log(n_layers)
    steps = lb.proof_steps(inv_z, n_layers, c)
    assert steps["printed_a_then_b"] - steps["printed_b"] == pytest.approx(np.log(n_layers))
    assert steps["eq10_with_density_typo"] == pytest.approx(inv_z)  # the remark's log Z_t + 1/Z_t
    assert steps["with_the_energy"] == 0.0  # L = log Z_t exactly
