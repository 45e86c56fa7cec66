"""Layer-wise energies of Niu et al. (2024), Section 4, and checks of Propositions 1-3.

Notation: ``patterns`` is the stored set D = {rho_1..rho_d} as a (d, n) array, ``queries`` a (m, n) array.
``d`` is the number of patterns; the paper's distance d(x, y) is written ``sq_dist`` here to avoid the clash.

* ``g(x) = min_i ||x - rho_i||^2``  (eq. 3 with the squared Euclidean distance the paper fixes in Sec. 4)
* ``E(x) = -log sum_i exp(-beta ||x - rho_i||^2)`` with beta = 1 in the paper (eq. 4)
* ``E_MCHN^beta(x) = -beta^-1 log sum_i exp(beta rho_i.x) + x.x/2 + beta^-1 log d + max_i ||rho_i||^2 / 2``
  (Ramsauer et al. 2020, with their N = number of patterns = our d, and M = max_i ||rho_i||)

Everything is float64 and evaluated in log space; queries are processed in chunks so a (m, d) distance
matrix is never materialised for large inputs.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from assocmem.errors import AssocmemError

CHUNK_ELEMENTS = 4_000_000  # entries of one (chunk, d) block: 32 MB in float64


@dataclass(frozen=True)
class EnergyTerms:
    """Per-query energies sharing one pass over the distance matrix."""

    energy: np.ndarray  # E(x), eq. (4), beta = 1
    nearest_sq_dist: np.ndarray  # g(x), eq. (3)
    mchn_beta2: np.ndarray  # E_MCHN^{beta=2}(x)
    n_patterns: int
    max_norm_sq: float
    min_norm_sq: float

    @property
    def norm_spread(self) -> float:
        """max_i ||rho_i||^2 - min_i ||rho_i||^2, the right-hand side of Proposition 2."""
        return self.max_norm_sq - self.min_norm_sq


def as_patterns(array: np.ndarray, name: str = "patterns") -> np.ndarray:
    """Validate and convert to a finite float64 (rows, n) array."""
    out = np.asarray(array, dtype=np.float64)
    if out.ndim == 1:
        out = out[:, None]
    if out.ndim != 2 or out.shape[0] == 0:
        raise AssocmemError(f"{name}: expected a non-empty 2-D array, got shape {np.shape(array)}")
    if not np.all(np.isfinite(out)):
        raise AssocmemError(f"{name}: contains NaN or infinite values")
    return out


def _check_dims(queries: np.ndarray, patterns: np.ndarray) -> None:
    if queries.shape[1] != patterns.shape[1]:
        raise AssocmemError(
            f"queries have dimension {queries.shape[1]} but patterns have dimension {patterns.shape[1]}"
        )


def _chunks(n_rows: int, n_patterns: int, chunk_elements: int = CHUNK_ELEMENTS) -> Iterator[slice]:
    step = max(1, chunk_elements // max(1, n_patterns))
    for start in range(0, n_rows, step):
        yield slice(start, min(n_rows, start + step))


def _sq_dist_block(queries: np.ndarray, patterns: np.ndarray, pattern_norms: np.ndarray) -> np.ndarray:
    """||x - rho||^2 via the expansion, clamped at 0 (cancellation can make it slightly negative)."""
    block = (queries * queries).sum(axis=1)[:, None] + pattern_norms[None, :] - 2.0 * queries @ patterns.T
    return np.maximum(block, 0.0)


def _exact_sq_dist(queries: np.ndarray, patterns: np.ndarray, idx: np.ndarray) -> np.ndarray:
    diff = queries - patterns[idx]
    return (diff * diff).sum(axis=1)


def _neg_lse_of_distances(block: np.ndarray, nearest: np.ndarray, beta: float) -> np.ndarray:
    """-log sum_i exp(-beta * block_i) computed as beta*g - log sum exp(-beta (block_i - min))."""
    shifted = block - block.min(axis=1, keepdims=True)
    return beta * nearest - np.log(np.exp(-beta * shifted).sum(axis=1))


def _lse_rows(values: np.ndarray) -> np.ndarray:
    top = values.max(axis=1)
    return top + np.log(np.exp(values - top[:, None]).sum(axis=1))


def distance_energy(queries: np.ndarray, patterns: np.ndarray, beta: float = 1.0) -> np.ndarray:
    """E(x) = -log sum_i exp(-beta ||x - rho_i||^2) (eq. 4 with an optional inverse temperature)."""
    queries, patterns = as_patterns(queries, "queries"), as_patterns(patterns)
    _check_dims(queries, patterns)
    norms = (patterns * patterns).sum(axis=1)
    out = np.empty(queries.shape[0])
    for rows in _chunks(queries.shape[0], patterns.shape[0]):
        block = _sq_dist_block(queries[rows], patterns, norms)
        nearest = _exact_sq_dist(queries[rows], patterns, block.argmin(axis=1))
        out[rows] = _neg_lse_of_distances(block, nearest, beta)
    return out


def mchn_energy(queries: np.ndarray, patterns: np.ndarray, beta: float = 1.0) -> np.ndarray:
    """Ramsauer et al.'s modern continuous Hopfield energy, evaluated straight from its definition."""
    queries, patterns = as_patterns(queries, "queries"), as_patterns(patterns)
    _check_dims(queries, patterns)
    if beta <= 0:
        raise AssocmemError(f"beta must be positive, got {beta}")
    max_norm_sq = float((patterns * patterns).sum(axis=1).max())
    constant = np.log(patterns.shape[0]) / beta + 0.5 * max_norm_sq
    out = np.empty(queries.shape[0])
    for rows in _chunks(queries.shape[0], patterns.shape[0]):
        q = queries[rows]
        out[rows] = -_lse_rows(beta * (q @ patterns.T)) / beta + 0.5 * (q * q).sum(axis=1) + constant
    return out


def energy_terms(queries: np.ndarray, patterns: np.ndarray, chunk_elements: int = CHUNK_ELEMENTS) -> EnergyTerms:
    """E, g and E_MCHN^{beta=2} for every query in one pass over blocks of about ``chunk_elements`` distances."""
    queries, patterns = as_patterns(queries, "queries"), as_patterns(patterns)
    _check_dims(queries, patterns)
    norms = (patterns * patterns).sum(axis=1)
    n_patterns = patterns.shape[0]
    energy, nearest, mchn = (np.empty(queries.shape[0]) for _ in range(3))
    mchn_constant = 0.5 * np.log(n_patterns) + 0.5 * float(norms.max())
    for rows in _chunks(queries.shape[0], n_patterns, chunk_elements):
        q = queries[rows]
        dots = q @ patterns.T
        q_norms = (q * q).sum(axis=1)
        block = np.maximum(q_norms[:, None] + norms[None, :] - 2.0 * dots, 0.0)
        nearest[rows] = _exact_sq_dist(q, patterns, block.argmin(axis=1))
        energy[rows] = _neg_lse_of_distances(block, nearest[rows], 1.0)
        mchn[rows] = -0.5 * _lse_rows(2.0 * dots) + 0.5 * q_norms + mchn_constant
    return EnergyTerms(energy, nearest, mchn, n_patterns, float(norms.max()), float(norms.min()))


# ---------------------------------------------------------------- Proposition 1

def prop1_slack(terms: EnergyTerms) -> dict[str, np.ndarray]:
    """Slack of both sides of g(x) - log d <= E(x) <= g(x); both arrays are >= 0 when it holds.

    ``gap_fraction`` = (g - E) / log d locates E inside the band (0: at g, 1: at g - log d; NaN when d = 1).
    """
    log_d = np.log(terms.n_patterns)
    gap = terms.nearest_sq_dist - terms.energy
    with np.errstate(invalid="ignore", divide="ignore"):
        fraction = gap / log_d if terms.n_patterns > 1 else np.full_like(gap, np.nan)
    return {"lower": log_d - gap, "upper": gap, "gap_fraction": fraction}


def prop1_unsquared_counterexample() -> dict[str, float]:
    """If g used the plain distance ||x - rho|| the upper bound E <= g would fail: d = 1, x two units away."""
    pattern, query = np.zeros((1, 1)), np.array([[2.0]])
    energy = float(distance_energy(query, pattern)[0])
    return {"distance": 2.0, "energy": energy, "g_unsquared": 2.0, "violation": energy - 2.0}


# ---------------------------------------------------------------- Propositions 2 and 3

def prop2_signed_gap(terms: EnergyTerms) -> np.ndarray:
    """E(x) - (2 E_MCHN^{beta=2}(x) - log d), which always lies in [-spread, 0] (see prop2_sharp_bounds)."""
    return terms.energy - (2.0 * terms.mchn_beta2 - np.log(terms.n_patterns))


def prop2_sharp_bounds(terms: EnergyTerms) -> tuple[float, float]:
    """The one-sided form of Proposition 2: -spread <= E - (2 E_MCHN - log d) <= 0.

    With a_i = ||x - rho_i||^2 and delta_i = max_j ||rho_j||^2 - ||rho_i||^2 in [0, spread],
    2 E_MCHN - log d = -LSE(-a - delta) while E = -LSE(-a); LSE is monotone and shifts by c when every entry
    does, so LSE(-a) - spread <= LSE(-a - delta) <= LSE(-a). Both sides are sharp (prop23_extreme_sets)."""
    return -terms.norm_spread, 0.0


def prop2_tolerance(queries: np.ndarray, terms: EnergyTerms) -> np.ndarray:
    """Float64 rounding allowance: both sides subtract numbers of size ||x||^2 + max||rho||^2."""
    q = as_patterns(queries, "queries")
    scale = (q * q).sum(axis=1) + terms.max_norm_sq + np.abs(terms.energy) + 1.0
    return 64 * np.finfo(np.float64).eps * scale


def prop3_printed_bounds(terms: EnergyTerms) -> tuple[float, float]:
    """Proposition 3 as printed: min||rho||^2 - max||rho||^2 <= g - 2E_MCHN <= spread + log d."""
    return -terms.norm_spread, terms.norm_spread + float(np.log(terms.n_patterns))


def prop3_sharp_bounds(terms: EnergyTerms) -> tuple[float, float]:
    """What holds: -(spread + log d) <= g(x) - 2E_MCHN(x) <= 0.

    g - 2E_MCHN = (g - E) + (E - 2E_MCHN + log d) - log d with g - E in [0, log d] (Prop. 1) and the middle
    term in [-spread, 0] (prop2_sharp_bounds). The upper side is attained (equal norms and a query equidistant
    from every pattern, e.g. the centre of a sphere of patterns); the lower side is approached by a query far
    beyond the smallest-norm pattern (prop23_extreme_sets)."""
    return -(terms.norm_spread + float(np.log(terms.n_patterns))), 0.0


def prop3_quantity(terms: EnergyTerms) -> np.ndarray:
    """g(x) - 2 E_MCHN^{beta=2}(x)."""
    return terms.nearest_sq_dist - 2.0 * terms.mchn_beta2


def prop3_counterexample() -> dict[str, float]:
    """Minimal counterexample to the printed lower bound: two patterns of equal norm, query on one of them.

    Equal norms make the spread 0, so the printed statement demands g - 2E_MCHN >= 0, but at x = rho_1,
    g = 0 and 2E_MCHN = E + log 2 with E = -log(1 + e^{-4}), so g - 2E_MCHN = log(1 + e^{-4}) - log 2 < 0.
    """
    patterns = np.array([[1.0, 0.0], [-1.0, 0.0]])
    terms = energy_terms(patterns[:1], patterns)
    value = float(prop3_quantity(terms)[0])
    printed_low, _ = prop3_printed_bounds(terms)
    return {"g_minus_2mchn": value, "printed_lower": float(printed_low),
            "closed_form": float(np.log1p(np.exp(-4.0)) - np.log(2.0)),
            "violation": float(printed_low - value)}


def prop23_extreme_sets(spread_root: float = 2.0, distance: float = 30.0) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(patterns, queries) at which the sharp bounds of Props. 2 and 3 are attained or approached.

    * ``equal_norms``: four patterns on a circle of radius ``spread_root``; spread 0, so E - (2E_MCHN - log d)
      is exactly 0 for every query (both bounds of Prop. 2 attained).
    * ``sphere_centre``: the same patterns, query at the centre: every pattern is equidistant, so g - E = log d
      and g - 2E_MCHN = 0, the upper bound of Prop. 3, exactly.
    * ``beyond_min_norm``: rho_1 = 0, rho_2 = (L, 0) (spread L^2), query (-t, 0): E - (2E_MCHN - log d) =
      -L^2 + log(1 + e^{-2Lt}) - log(1 + e^{-2Lt - L^2}) -> -spread and g - 2E_MCHN -> -spread - log 2.
    * ``beyond_max_norm``: the same patterns, query (L + t, 0): E - (2E_MCHN - log d) =
      log(1 + e^{-2Lt - 2L^2}) - log(1 + e^{-2Lt - L^2}) -> 0 although the spread is L^2 > 0.
    The limits are reached within e^{-2Lt} (e^{-120} by default), i.e. exactly in float64.
    """
    radius, far = float(spread_root), float(distance)
    circle = radius * np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0]])
    pair = np.array([[0.0, 0.0], [radius, 0.0]])
    fixed_queries = np.array([[0.3, -0.2], [2.5, 1.0], [-7.0, 4.0]])
    return {
        "equal_norms": (circle, fixed_queries),
        "sphere_centre": (circle, np.zeros((1, 2))),
        "beyond_min_norm": (pair, np.array([[-far, 0.0]])),
        "beyond_max_norm": (pair, np.array([[radius + far, 0.0]])),
    }


def prop23_extreme_values(spread_root: float = 2.0, distance: float = 30.0) -> dict[str, float]:
    """Closed forms of the two-pattern cases of :func:`prop23_extreme_sets` (see its docstring)."""
    length, far = float(spread_root), float(distance)
    beyond_min = -length**2 + np.log1p(np.exp(-2 * length * far)) - np.log1p(np.exp(-2 * length * far - length**2))
    beyond_max = np.log1p(np.exp(-2 * length * far - 2 * length**2)) - np.log1p(np.exp(-2 * length * far - length**2))
    g_minus_e = np.log1p(np.exp(-2 * length * far - length**2))  # nearest pattern rho_1 at distance^2 t^2
    return {"beyond_min_norm.prop2_gap": float(beyond_min), "beyond_max_norm.prop2_gap": float(beyond_max),
            "beyond_min_norm.prop3_value": float(g_minus_e + beyond_min - np.log(2.0)), "spread": length**2}
