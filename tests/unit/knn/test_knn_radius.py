"""The radius test's searches (assocmem.knn.radius), written by the neighbours stage for the report: distinct
prefixes, the final LayerNorm's gain divided out, and the scale numbers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from assocmem.knn import knn, nested_subsample_rows, search_radius
from assocmem.knn.radius import RADIUS_COLUMNS, distinct_rows, nested_nn, radius_searches, rms_norm, subsample_sizes


def brute_force_nn(vectors: np.ndarray) -> np.ndarray:
    """Rank-1 distance of every row among the others, float64."""
    diff = vectors[:, None, :].astype(np.float64) - vectors[None, :, :]
    dist = np.sqrt((diff**2).sum(axis=2))
    np.fill_diagonal(dist, np.inf)
    return dist.min(axis=1)


@pytest.fixture
def acts() -> np.ndarray:
    rng = np.random.default_rng(0)
    base = rng.normal(size=(40, 6)).astype(np.float32)
    return np.concatenate([base, base[:10], base[:3]])  # 13 exact duplicates, as shared prefixes give


def test_distinct_rows_keep_the_first_copy_of_every_vector(acts: np.ndarray) -> None:
    rows = distinct_rows(acts)
    assert rows.tolist() == list(range(40))
    assert distinct_rows(acts[::-1]).size == 40


def test_nested_nn_is_the_exact_nearest_neighbour_within_each_subsample(acts: np.ndarray) -> None:
    ids = distinct_rows(acts)
    frame = nested_nn(acts, ids, [0.5, 1.0], seed=3)
    for fraction, group in frame.groupby("fraction"):
        chosen = ids[nested_subsample_rows(ids.size, fraction, 3)]  # the same nested permutation
        assert group["query"].tolist() == chosen.tolist() and (group["n_patterns"] == chosen.size).all()
        np.testing.assert_allclose(group["distance"], brute_force_nn(acts[chosen]), rtol=1e-5)
    assert nested_nn(acts, ids[:3], [0.25], seed=3).empty  # fewer than two rows: nothing to measure


def separate_searches(vectors: np.ndarray, ids: np.ndarray, fractions: list[float], seed: int) -> pd.DataFrame:
    """The subsamples searched one by one (what nested_nn did before it searched the largest once)."""
    permutation = np.random.default_rng(seed).permutation(ids.size)
    frames = []
    for fraction, size in subsample_sizes(fractions, ids.size, None):
        chosen = ids[np.sort(permutation[:size])]
        if chosen.size < 2:
            continue
        subset = np.ascontiguousarray(vectors[chosen])
        distances, _ = knn(subset, subset, 1, exclude_ids=np.arange(chosen.size))
        frames.append(pd.DataFrame({"fraction": fraction, "n_patterns": size, "query": chosen,
                                    "distance": distances[:, 0].astype(np.float64)}))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=RADIUS_COLUMNS[1:])


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(2, 60), seed=st.integers(0, 3), pool=st.integers(1, 5), integer=st.booleans(),
       fractions=st.lists(st.sampled_from([0.1, 0.25, 0.5, 0.75, 1.0]), min_size=1, max_size=4, unique=True))
def test_one_search_of_the_largest_subsample_gives_every_subsamples_nn(rows, seed, pool, integer, fractions) -> None:
    """Small pools send many rows to the direct search; small-integer rows make exact ties and duplicates."""
    rng = np.random.default_rng(seed)
    vectors = (rng.integers(-2, 3, size=(rows, 3)) if integer else rng.normal(size=(rows, 3))).astype(np.float32)
    ids = np.arange(rows)
    got = nested_nn(vectors, ids, fractions, seed, pool=pool)
    want = separate_searches(vectors, ids, fractions, seed)
    if want.empty:
        assert got.empty
        return
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want, check_dtype=False, rtol=1e-6)


def test_gain_free_vectors_divide_the_layernorm_gain_out(acts: np.ndarray) -> None:
    gain, bias = np.linspace(0.5, 2.0, 6), np.linspace(-1, 1, 6)
    frame, numbers = radius_searches(acts, [1.0, 0.5], seed=3, affine=(gain, bias))
    assert list(frame.columns) == RADIUS_COLUMNS and set(frame["set"]) == {"distinct", "gain_free"}
    normalised = ((acts.astype(np.float64) - bias) / gain).astype(np.float32)
    gain_free = frame[(frame["set"] == "gain_free") & (frame["fraction"] == 1.0)]
    np.testing.assert_allclose(gain_free["distance"], brute_force_nn(normalised[:40]), rtol=1e-5)
    assert numbers["n_chunks"] == 53 and numbers["n_distinct"] == 40 and numbers["n_dim"] == 6
    assert numbers["rms_norm"] == pytest.approx(rms_norm(acts[:40]))
    assert numbers["gain_rms"] == pytest.approx(np.sqrt(np.mean(gain**2)))
    assert numbers["gain_free_rms_norm"] == pytest.approx(rms_norm(normalised[:40]))
    assert numbers["fractions"] == [0.5, 1.0]


@pytest.mark.parametrize("affine", [None, (np.array([1.0, 0.0, 1, 1, 1, 1]), np.zeros(6))])
def test_no_gain_free_set_without_a_usable_gain(acts: np.ndarray, affine) -> None:
    frame, numbers = radius_searches(acts, [1.0], seed=0, affine=affine)
    assert set(frame["set"]) == {"distinct"} and "gain_rms" not in numbers


def test_search_radius_uses_its_sample_and_measures_every_layer(acts: np.ndarray) -> None:
    layers = np.stack([acts * 3, acts])  # (n_layers, n_chunks, d) of the main training dump
    cfg = {"fractions": [1.0], "device": "cpu", "cpu_engine": "faiss", "radius_sample_max": None}
    frame, numbers = search_radius(acts * 2, layers, ["emb", "final_ln"], cfg, seed=0, affine=None)
    np.testing.assert_allclose(frame["distance"], brute_force_nn(acts[:40] * 2), rtol=1e-5)
    assert numbers["layer"] == "final_ln" and numbers["sizes"] == [40]
    assert numbers["layer_rms_norm"] == pytest.approx({"emb": 3 * rms_norm(acts), "final_ln": rms_norm(acts)})


def test_the_largest_subsample_is_capped_and_nested(acts: np.ndarray) -> None:
    """With more distinct rows than max_size the largest subsample has exactly max_size rows (the paper's m is a
    sample size, not an extrapolation) and smaller subsamples are nested in it."""
    frame, numbers = radius_searches(acts, [0.5, 1.0], seed=3, max_size=30)
    assert numbers["sizes"] == [15, 30] and numbers["n_distinct"] == 40
    half, full = (set(frame.loc[frame["fraction"] == f, "query"]) for f in (0.5, 1.0))
    assert len(half) == 15 and len(full) == 30 and half < full
