"""The global energy of Sec. 4.1: E_global(x) = -LogSumExp(-E_1(x), ..., -E_l(x)) (eq. 7) and eq. (8)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from assocmem.errors import AssocmemError
from assocmem.theory.energy import as_patterns, distance_energy


def global_energy(layer_energies: np.ndarray) -> np.ndarray:
    """E_global for an (l, m) array of per-layer energies: one value per query column."""
    energies = np.asarray(layer_energies, dtype=np.float64)
    if energies.ndim != 2 or energies.shape[0] == 0:
        raise AssocmemError(f"layer_energies: expected shape (l, m) with l >= 1, got {energies.shape}")
    low = energies.min(axis=0)
    return low - np.log(np.exp(-(energies - low)).sum(axis=0))


def layer_energies(pattern_sets: Sequence[np.ndarray] | Mapping[str, np.ndarray],
                   queries: np.ndarray) -> np.ndarray:
    """(l, m) array of E_t(x) = -log sum_{rho in D_t} exp(-||x - rho||^2), one row per layer's pattern set."""
    sets = list(pattern_sets.values()) if isinstance(pattern_sets, Mapping) else list(pattern_sets)
    if not sets:
        raise AssocmemError("pattern_sets: need at least one layer")
    return np.stack([distance_energy(queries, as_patterns(s, f"pattern set {i}"))
                     for i, s in enumerate(sets)])


def eq8_slack(layer_energy_values: np.ndarray) -> dict[str, np.ndarray]:
    """Slacks of min_t E_t - log l <= E_global < min_t E_t (both >= 0 when it holds).

    ``offset`` is c(x) = E_global - min_t E_t + log l of eq. (10); the paper assumes it is a constant
    c in [0, log l), but it moves over that whole interval as x moves (see ``offset_range_example``).
    """
    energies = np.asarray(layer_energy_values, dtype=np.float64)
    glob = global_energy(energies)
    low = energies.min(axis=0)
    log_l = np.log(energies.shape[0])
    return {"lower": glob - (low - log_l), "upper": low - glob, "offset": glob - low + log_l}


def offset_range_example() -> dict[str, float]:
    """c(x) of eq. (10) is not constant: with l = 2 it is 0 where E_1 = E_2 and -> log 2 where E_2 >> E_1."""
    equal = eq8_slack(np.array([[1.0], [1.0]]))["offset"][0]
    apart = eq8_slack(np.array([[1.0], [40.0]]))["offset"][0]
    return {"offset_equal_layers": float(equal), "offset_separated_layers": float(apart),
            "log_l": float(np.log(2.0))}


def union_energy_gap(pattern_sets: Sequence[np.ndarray] | Mapping[str, np.ndarray],
                     queries: np.ndarray) -> np.ndarray:
    """E_global(x) - E_union(x): zero (up to rounding) when the D_t partition D, since
    exp(-E_global) = sum_t exp(-E_t) = sum_t sum_{rho in D_t} exp(-||x - rho||^2) = exp(-E_union)."""
    sets = list(pattern_sets.values()) if isinstance(pattern_sets, Mapping) else list(pattern_sets)
    union = np.concatenate([as_patterns(s) for s in sets], axis=0)
    return global_energy(layer_energies(sets, queries)) - distance_energy(queries, union)
