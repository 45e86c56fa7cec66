"""Figure 1 landscapes: shapes and the properties the paper attributes to each panel."""

from __future__ import annotations

import numpy as np

from assocmem.theory import landscapes as la


def test_panel_shapes_and_finiteness() -> None:
    panels = la.fig1_panels_2d(num=41)
    for name in la.PANEL_TITLES:
        assert panels[name].shape == (41, 41) and np.all(np.isfinite(panels[name]))
    curves = la.fig1_curves_1d(num=101)
    assert all(curves[k].shape == (101,) for k in ("x", "proposed", "mchn_beta1", "mchn_beta2"))


def test_proposed_energy_has_a_minimum_next_to_each_2d_pattern() -> None:
    minima = np.array(la.fig1_minima()["2d_proposed"])
    assert len(minima) == 3
    for pattern in la.PATTERNS_2D:
        assert np.min(np.linalg.norm(minima - pattern, axis=1)) < 0.05


def test_neg_lse_is_concave_and_mchn_is_not_convex() -> None:
    panels = la.fig1_panels_2d(num=121)
    assert la.midpoint_convexity_violation(-panels["neg_lse"]) <= 1e-12  # -LSE is concave
    assert la.midpoint_convexity_violation(panels["regularisation"]) <= 1e-12  # quadratic is convex
    assert la.midpoint_convexity_violation(panels["mchn"]) > 1e-3  # two minima => not convex
    assert len(la.fig1_minima()["2d_mchn"]) == 2


def test_1d_patterns_zero_and_one_merge_in_the_proposed_energy() -> None:
    minima = la.fig1_minima()
    assert [round(m[0], 1) for m in minima["1d_proposed"]] == [-2.0, 0.5]
    assert len(minima["1d_mchn_beta1"]) == 1 and len(minima["1d_mchn_beta2"]) == 2


def test_grid_local_minima_on_a_toy_array() -> None:
    assert la.grid_local_minima(np.array([3.0, 1.0, 2.0, 0.5, 4.0])) == [(1,), (3,)]


