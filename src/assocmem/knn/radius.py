"""The searches the radius test rests on (the report's claim 'radius'), run by the neighbours stage on the last
layer's training activations:

* **distinct prefixes**: identical prefixes give identical activations in a causal model, so the self-search over
  all chunks holds exact zero distances; here every distinct vector is kept once and the rank-1 distance of each is
  measured within nested random subsamples of the distinct vectors: the self-search's fractions of
  m_max = min(``max_size``, number of distinct vectors), so that the paper's m = 80,000 is itself a sample size
  whenever the sample holds that many distinct prefixes (no extrapolation);
* **gain-free**: the same after dividing the final norm's gain out, (x - bias) / gain, whose norm is sqrt(d) for a
  LayerNorm, so distances no longer scale with a learned gain;
* the scale numbers the claim compares 2r* with: the RMS norm of the distinct vectors (and of the gain-free ones)
  and of every layer's training activations.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from assocmem.knn.exact import knn

RADIUS_COLUMNS = ["set", "fraction", "n_patterns", "query", "distance"]
# Neighbours of each row of the largest subsample searched once for all subsamples: a row of a subsample of
# fraction f of it misses the pool with probability about (1 - f)^8 (10% at f = 0.25) and is then searched within
# its subsample (80,000 x 64 on one core: 31 s with 8, 40 s with 16, 55 s for the four subsamples searched apart).
NESTED_POOL = 8


def distinct_rows(vectors: np.ndarray) -> np.ndarray:
    """Row of the first occurrence of every distinct vector, ascending."""
    _, first = np.unique(np.ascontiguousarray(vectors), axis=0, return_index=True)
    return np.sort(first)


def rms_norm(vectors: np.ndarray) -> float:
    """Root mean square of the rows' Euclidean norms (float64)."""
    return float(np.sqrt(np.mean(np.sum(np.asarray(vectors, dtype=np.float64) ** 2, axis=1))))


def subsample_sizes(fractions: Sequence[float], n_rows: int, max_size: int | None) -> list[tuple[float, int]]:
    """(fraction, size) of each nested subsample: the fraction of m_max = min(max_size, n_rows) rows."""
    m_max = n_rows if max_size is None else min(int(max_size), n_rows)
    return [(float(fraction), round(float(fraction) * m_max)) for fraction in sorted(fractions)]


def nested_nn(vectors: np.ndarray, ids: np.ndarray, fractions: Sequence[float], seed: int,
              max_size: int | None = None, pool: int = NESTED_POOL, **knn_options: Any) -> pd.DataFrame:
    """Rank-1 NN distance of every row of each nested subsample of ``ids`` among that subsample (columns fraction,
    n_patterns, query = row of ``vectors``, distance in float64): the first ``size`` ids of one seeded permutation
    (:func:`subsample_sizes`); subsamples of fewer than two rows are skipped.

    One exact search of the largest subsample for each row's ``pool`` nearest serves every subsample: a row's NN
    within a smaller one is the first of its pool that belongs to it (the pool is ordered by exact distance, ties
    by row, as the subsample's own search orders them). Rows whose pool holds no member, about (1 - fraction)^pool
    of them, are searched within their subsample directly. The subsamples' separate searches cost sum(size^2):
    1.9x the largest one's at fractions 0.25-1."""
    permutation = np.random.default_rng(seed).permutation(ids.size)
    sizes = [(fraction, size) for fraction, size in subsample_sizes(fractions, ids.size, max_size) if size >= 2]
    if not sizes:
        return pd.DataFrame(columns=RADIUS_COLUMNS[1:])
    rank = np.empty(ids.size, dtype=np.int64)
    rank[permutation] = np.arange(ids.size)
    largest = np.sort(permutation[:sizes[-1][1]])  # positions in ids, ascending: the largest subsample
    subset = np.ascontiguousarray(vectors[ids[largest]], dtype=np.float32)
    own = np.arange(largest.size)
    distances, neighbours = knn(subset, subset, min(pool, largest.size - 1), exclude_ids=own, **knn_options)
    frames = []
    for fraction, size in sizes:
        member = rank[largest] < size
        nearest = _first_member(distances[member], neighbours[member], member)
        missing = np.flatnonzero(np.isnan(nearest))
        if missing.size:  # no member in the pool: searched within the subsample itself
            within = np.flatnonzero(member)
            nearest[missing] = knn(subset[within], subset[within[missing]], 1, exclude_ids=missing,
                                   **knn_options)[0][:, 0]
        frames.append(pd.DataFrame({"fraction": fraction, "n_patterns": size, "query": ids[largest[member]],
                                    "distance": nearest}))
    return pd.concat(frames, ignore_index=True)


def _first_member(distances: np.ndarray, neighbours: np.ndarray, member: np.ndarray) -> np.ndarray:
    """Per row, the float64 distance of its first neighbour that is a member (NaN where none is)."""
    is_member = member[neighbours]
    first = is_member.argmax(axis=1)
    out = distances[np.arange(len(first)), first].astype(np.float64)
    out[~is_member.any(axis=1)] = np.nan
    return out


def radius_searches(last_layer: np.ndarray, fractions: Sequence[float], seed: int,
                    affine: tuple[np.ndarray, np.ndarray] | None = None, max_size: int | None = None,
                    **knn_options: Any) -> tuple[pd.DataFrame, dict[str, Any]]:
    """(frame with columns RADIUS_COLUMNS, numbers) of one run's last layer (n_chunks, d). ``affine``: the final
    norm's (gain, bias) when the layer is its output; the gain-free set needs every gain nonzero. ``max_size``: the
    largest subsample (None: every distinct vector)."""
    acts = np.asarray(last_layer, dtype=np.float32)
    fractions = sorted(float(f) for f in fractions)
    distinct = distinct_rows(acts)
    sizes = subsample_sizes(fractions, distinct.size, max_size)
    frames = [nested_nn(acts, distinct, fractions, seed, max_size, **knn_options).assign(set="distinct")]
    numbers: dict[str, Any] = {"n_chunks": int(acts.shape[0]), "n_distinct": int(distinct.size),
                               "rms_norm": rms_norm(acts[distinct]), "n_dim": int(acts.shape[1]),
                               "fractions": fractions, "sizes": [size for _, size in sizes],
                               "max_size": max_size, "seed": seed}
    if affine is not None and np.all(np.abs(affine[0]) > 0):
        gain, bias = affine
        normalised = ((acts.astype(np.float64) - bias) / gain).astype(np.float32)
        frames.append(nested_nn(normalised, distinct, fractions, seed, max_size, **knn_options)
                      .assign(set="gain_free"))
        numbers.update(gain_rms=float(np.sqrt(np.mean(gain**2))), gain_free_rms_norm=rms_norm(normalised[distinct]))
    return pd.concat(frames, ignore_index=True)[RADIUS_COLUMNS], numbers
