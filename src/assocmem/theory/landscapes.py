"""Figure 1 energy landscapes (pure arrays) plus small plotting helpers that take matplotlib axes.

Left panels (2-D patterns (-2,-0.5), (0.2,-0.3), (1.5,1.5)):
 (a) -LogSumExp(beta=1, M^T x)   (Demircigil et al. extended to R^n)
 (b) the MCHN regularisation x.x/2 + beta^-1 log d + max||rho||^2/2
 (c) the MCHN energy with beta = 1
 (d) the proposed layer-wise energy (4) with the squared Euclidean distance
Right panel: 1-D patterns {-2, 0, 1}; the proposed energy and the MCHN energy with beta = 1, 2.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from assocmem.theory.energy import distance_energy, mchn_energy

PATTERNS_2D = np.array([[-2.0, -0.5], [0.2, -0.3], [1.5, 1.5]])
PATTERNS_1D = np.array([[-2.0], [0.0], [1.0]])
PANEL_TITLES = {"neg_lse": "(a) -LogSumExp", "regularisation": "(b) Regularizations",
                "mchn": "(c) MCHN energy", "proposed": "(d) Proposed energy"}


def _neg_lse(points: np.ndarray, patterns: np.ndarray, beta: float = 1.0) -> np.ndarray:
    scores = beta * points @ patterns.T
    top = scores.max(axis=1)
    return -(top + np.log(np.exp(scores - top[:, None]).sum(axis=1))) / beta


def _regularisation(points: np.ndarray, patterns: np.ndarray, beta: float = 1.0) -> np.ndarray:
    max_norm_sq = float((patterns * patterns).sum(axis=1).max())
    return 0.5 * (points * points).sum(axis=1) + np.log(len(patterns)) / beta + 0.5 * max_norm_sq


def fig1_panels_2d(num: int = 201, extent: float = 3.0) -> dict[str, Any]:
    """Grid coordinates ``x``, ``y`` (num,) and one (num, num) array per panel, indexed [iy, ix]."""
    axis = np.linspace(-extent, extent, num)
    grid_x, grid_y = np.meshgrid(axis, axis)
    points = np.column_stack([grid_x.ravel(), grid_y.ravel()])
    panels = {
        "neg_lse": _neg_lse(points, PATTERNS_2D),
        "regularisation": _regularisation(points, PATTERNS_2D),
        "mchn": mchn_energy(points, PATTERNS_2D, beta=1.0),
        "proposed": distance_energy(points, PATTERNS_2D),
    }
    return {"x": axis, "y": axis, **{k: v.reshape(num, num) for k, v in panels.items()}}


def fig1_curves_1d(num: int = 1401, low: float = -4.0, high: float = 3.0) -> dict[str, np.ndarray]:
    """1-D curves over [low, high]: proposed energy and MCHN energy with beta = 1 and 2."""
    xs = np.linspace(low, high, num)
    points = xs[:, None]
    return {"x": xs, "proposed": distance_energy(points, PATTERNS_1D),
            "mchn_beta1": mchn_energy(points, PATTERNS_1D, beta=1.0),
            "mchn_beta2": mchn_energy(points, PATTERNS_1D, beta=2.0)}


def grid_local_minima(values: np.ndarray) -> list[tuple[int, ...]]:
    """Indices of interior grid points strictly lower than all their (4- or 2-) neighbours."""
    arr = np.asarray(values, dtype=np.float64)
    inner = tuple(slice(1, -1) for _ in range(arr.ndim))
    centre = arr[inner]
    is_min = np.ones(centre.shape, dtype=bool)
    for axis in range(arr.ndim):
        for step in (-1, 1):
            shifted = tuple(slice(1 + step, arr.shape[a] - 1 + step) if a == axis else slice(1, -1)
                            for a in range(arr.ndim))
            is_min &= centre < arr[shifted]
    return [tuple(int(i) + 1 for i in idx) for idx in zip(*np.nonzero(is_min), strict=True)]


def midpoint_convexity_violation(values: np.ndarray) -> float:
    """Largest f(mid) - (f(a) + f(b))/2 over grid-adjacent triples along each axis (> 0: not convex)."""
    arr = np.asarray(values, dtype=np.float64)
    worst = -np.inf
    for axis in range(arr.ndim):
        left = np.take(arr, range(0, arr.shape[axis] - 2), axis=axis)
        mid = np.take(arr, range(1, arr.shape[axis] - 1), axis=axis)
        right = np.take(arr, range(2, arr.shape[axis]), axis=axis)
        worst = max(worst, float((mid - 0.5 * (left + right)).max()))
    return worst


def fig1_minima() -> dict[str, list[list[float]]]:
    """Coordinates of the grid local minima of every panel and curve."""
    panels = fig1_panels_2d()
    out: dict[str, list[list[float]]] = {}
    for name in PANEL_TITLES:
        out[f"2d_{name}"] = [[float(panels["x"][ix]), float(panels["y"][iy])]
                             for iy, ix in grid_local_minima(panels[name])]
    curves = fig1_curves_1d()
    for name in ("proposed", "mchn_beta1", "mchn_beta2"):
        out[f"1d_{name}"] = [[float(curves["x"][i])] for (i,) in grid_local_minima(curves[name])]
    return out
