"""Eq. (7)-(8): the global energy over layers, and its reduction to the union energy for partitions."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import logsumexp

from assocmem.errors import AssocmemError
from assocmem.theory import global_energy as ge
from assocmem.theory.energy import distance_energy


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 6), st.integers(1, 8), st.integers(0, 2**32 - 1),
       st.sampled_from([1e-6, 1.0, 1e3, 1e6]))
def test_eq8_bounds_hold_for_arbitrary_layer_energies(n_layers: int, m: int, seed: int, scale: float) -> None:
    energies = np.random.default_rng(seed).normal(size=(n_layers, m)) * scale
    glob = ge.global_energy(energies)
    np.testing.assert_allclose(glob, -logsumexp(-energies, axis=0), rtol=1e-13, atol=1e-9)
    slack = ge.eq8_slack(energies)
    tol = 1e-12 * (1 + np.abs(energies).max())
    assert np.all(slack["lower"] >= -tol) and np.all(slack["upper"] >= -tol)
    assert np.all(slack["offset"] >= -tol) and np.all(slack["offset"] <= np.log(n_layers) + tol)


def test_eq8_strict_upper_bound_is_an_equality_for_one_layer() -> None:
    energies = np.array([[0.3, -2.0, 7.0]])
    np.testing.assert_array_equal(ge.global_energy(energies), energies[0])
    assert np.all(ge.eq8_slack(energies)["upper"] == 0.0)


def test_eq8_lower_bound_attained_when_layers_agree() -> None:
    energies = np.full((4, 2), 1.5)
    np.testing.assert_allclose(ge.eq8_slack(energies)["lower"], 0.0, atol=1e-15)


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 5), st.integers(0, 2**32 - 1), st.sampled_from([0.5, 3.0, 100.0]))
def test_partitioned_layers_reduce_to_the_union_energy(n_layers: int, seed: int, scale: float) -> None:
    rng = np.random.default_rng(seed)
    patterns = rng.normal(size=(4 * n_layers, 3)) * scale
    labels = np.concatenate([np.arange(n_layers), rng.integers(0, n_layers, size=3 * n_layers)])
    sets = [patterns[labels == t] for t in range(n_layers)]
    queries = np.concatenate([patterns[:3], rng.normal(size=(4, 3)) * scale])
    gap = ge.union_energy_gap(sets, queries)
    union = distance_energy(queries, patterns)
    np.testing.assert_allclose(gap, 0.0, atol=1e-11 * (1 + np.abs(union).max()))


def test_layer_energies_accept_a_mapping_and_keep_layer_order() -> None:
    sets = {"layer_0": np.array([[0.0]]), "layer_1": np.array([[3.0]])}
    values = ge.layer_energies(sets, np.array([[0.0]]))
    np.testing.assert_allclose(values[:, 0], [0.0, 9.0])


def test_offset_c_is_not_constant() -> None:
    example = ge.offset_range_example()
    assert example["offset_equal_layers"] == pytest.approx(0.0, abs=1e-15)
    assert example["offset_separated_layers"] == pytest.approx(example["log_l"], rel=1e-12)


def test_bad_shapes_raise() -> None:
    with pytest.raises(AssocmemError, match="layer_energies"):
        ge.global_energy(np.zeros(3))
    with pytest.raises(AssocmemError, match="at least one layer"):
        ge.layer_energies([], np.zeros((1, 1)))
