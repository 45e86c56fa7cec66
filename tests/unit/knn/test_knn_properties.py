"""Property tests of assocmem.knn on every CPU engine (hypothesis): self searches equal the float64 reference,
duplicate groups give the exact tie order, nested subsamples stay nested; and the duplicate groups themselves."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_knn_exact import (  # noqa: F401 - single_thread: the fixture is autouse here too
    CPU,
    assert_valid_knn,
    reference_distances,
    reference_knn,
    single_thread,
)

from assocmem.errors import AssocmemError
from assocmem.knn import (
    Engine,
    duplicate_groups,
    knn,
    self_search,
)

# --------------------------------------------------------------------------- property tests


@st.composite
def point_sets_with_duplicates(draw):
    rows = draw(st.integers(2, 30))
    dim = draw(st.integers(1, 6))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    if draw(st.booleans()):  # coarse integer grid: many exact ties
        x = rng.integers(-2, 3, size=(rows, dim)).astype(np.float32)
    else:
        x = rng.standard_normal((rows, dim)).astype(np.float32)
    n_dups = draw(st.integers(0, rows // 2))
    x[rng.integers(0, rows, n_dups)] = x[rng.integers(0, rows, n_dups)]
    k = draw(st.integers(1, rows - 1))
    db_batch = draw(st.one_of(st.none(), st.integers(1, rows)))
    return x, k, db_batch



FIXTURE_OK = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture]


@settings(max_examples=150, deadline=None, suppress_health_check=FIXTURE_OK)
@given(point_sets_with_duplicates())
def test_property_self_knn_matches_reference(engine: str, case) -> None:
    x, k, db_batch = case
    rows = np.arange(len(x))
    dist, ids = knn(x, x, k, engine=Engine(engine), exclude_ids=rows, db_batch=db_batch, query_batch=7)
    assert_valid_knn(dist, ids, x, x, k, exclude=rows)
    assert np.all(np.diff(dist, axis=1) >= 0)
    unsharded = knn(x, x, k, engine=Engine(engine), exclude_ids=rows)
    np.testing.assert_array_equal(dist, unsharded[0])
    np.testing.assert_array_equal(ids, unsharded[1])
    # Every exact duplicate of a row must appear (at 0) before any positive distance.
    dup_counts = (reference_distances(x, x, rows) == 0).sum(axis=1)
    for row in range(len(x)):
        expected_zeros = min(dup_counts[row], k)
        assert (dist[row] == 0).sum() == expected_zeros


@st.composite
def grid_points_with_heldout(draw):
    """Small-integer rows: squared distances are exact in float64, so the tie order by id is fully determined."""
    rows = draw(st.integers(2, 40))
    dim = draw(st.integers(1, 4))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = rng.integers(-1, 2, size=(rows, dim)).astype(np.float32)
    queries = rng.integers(-1, 2, size=(draw(st.integers(1, 15)), dim)).astype(np.float32)
    return x, queries, draw(st.integers(1, rows - 1)), draw(st.one_of(st.none(), st.integers(1, rows)))


@settings(max_examples=150, deadline=None, suppress_health_check=FIXTURE_OK)
@given(grid_points_with_heldout())
def test_property_duplicate_groups_give_the_exact_tie_order(engine: str, case) -> None:
    x, queries, k, db_batch = case
    rows = np.arange(len(x))
    dist, ids = knn(x, x, k, engine=Engine(engine), exclude_ids=rows, db_batch=db_batch, query_batch=5)
    ref_dist, ref_ids = reference_knn(reference_distances(x, x, rows), k)
    np.testing.assert_array_equal(ids, ref_ids)
    np.testing.assert_allclose(dist, ref_dist, rtol=1e-6)
    dist, ids = knn(x, queries, k, engine=Engine(engine), db_batch=db_batch)
    ref_dist, ref_ids = reference_knn(reference_distances(x, queries), k)
    np.testing.assert_array_equal(ids, ref_ids)
    np.testing.assert_allclose(dist, ref_dist, rtol=1e-6)


def test_duplicate_groups_survive_a_hash_collision() -> None:
    x = np.random.default_rng(33).integers(0, 3, size=(60, 2)).astype(np.float32)
    groups = duplicate_groups(x, 4, row_hash=lambda rows: np.zeros(rows.shape[0], dtype=np.uint64))
    assert groups is not None
    np.testing.assert_array_equal(x[groups.first_row[groups.of_row]], x)  # each row's group holds its value
    assert len(np.unique(x, axis=0)) == len(groups.first_row)
    # the same groups as without the collision, so knn (which searches by the groups) gives the same answer
    expected = duplicate_groups(x, 4)
    assert expected is not None
    for collided, plain in zip(groups, expected, strict=True):
        np.testing.assert_array_equal(collided, plain)
    _, ref_ids = reference_knn(reference_distances(x, x, np.arange(60)), 4)
    np.testing.assert_array_equal(knn(x, x, 4, engine=CPU, exclude_ids=np.arange(60))[1], ref_ids)


def test_duplicate_groups_keep_the_smallest_rows() -> None:
    x = np.array([[1], [0], [1], [1], [2], [0]], dtype=np.float32)
    groups = duplicate_groups(x, 2)
    assert groups is not None
    np.testing.assert_array_equal(groups.first_row, [0, 1, 4])
    np.testing.assert_array_equal(groups.of_row, [0, 1, 0, 0, 2, 1])
    np.testing.assert_array_equal(groups.members, [[0, 2], [1, 5], [4, -1]])
    assert duplicate_groups(np.eye(3, dtype=np.float32), 2) is None


@settings(max_examples=60, deadline=None)
@given(
    st.integers(3, 40),
    st.integers(1, 5),
    st.integers(0, 2**32 - 1),
    st.sampled_from([(0.5, 1.0), (0.25, 0.75), (1.0,)]),
)
def test_property_self_search_nested(rows: int, dim: int, seed: int, fractions) -> None:
    x = np.random.default_rng(seed).standard_normal((rows, dim)).astype(np.float32)
    smallest = round(min(fractions) * rows)
    if smallest < 2:
        with pytest.raises(AssocmemError):
            self_search(x, 1, fractions=fractions, seed=seed, engine=CPU)
        return
    frame = self_search(x, 1, fractions=fractions, seed=seed, engine=CPU)
    sets = [set(frame.loc[frame["fraction"] == f, "query_row"]) for f in fractions]
    assert all(a <= b for a, b in zip(sets, sets[1:], strict=False))
    assert [len(s) for s in sets] == [round(f * rows) for f in fractions]
