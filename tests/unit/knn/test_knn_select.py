"""The k smallest scores of a block through column groups (assocmem.knn.select) against torch.topk."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from assocmem.knn.select import groups_pay, smallest_k


def assert_k_smallest(scores: torch.Tensor, k: int, values: torch.Tensor, columns: torch.Tensor) -> None:
    """values are the row's k smallest (as a multiset), each at its column, the columns distinct."""
    want = torch.topk(scores, k, dim=1, largest=False).values
    assert values.shape == columns.shape == (scores.shape[0], k)
    assert torch.equal(values.sort(dim=1).values, want.sort(dim=1).values)
    assert torch.equal(torch.gather(scores, 1, columns), values)
    assert ((columns >= 0) & (columns < scores.shape[1])).all()
    assert all(len(set(row.tolist())) == k for row in columns)


@st.composite
def blocks(draw, grouped: bool):
    """A block of scores with k and a group: continuous, small integers (ties everywhere) or one value repeated.
    ``grouped``: k and group such that the groups are used."""
    rows = draw(st.integers(1, 5))
    group = draw(st.sampled_from([1, 2, 3, 5, 8, 32]) if grouped else st.sampled_from([0, 1, 2, 3, 5, 8, 32]))
    if grouped:
        k = draw(st.integers(1, 8))
        columns = draw(st.integers(4 * k * group, 4 * k * group + 2 * group))
    else:
        columns = draw(st.integers(1, 300))
        k = draw(st.integers(1, columns))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    kind = draw(st.sampled_from(["normal", "integers", "constant"]))
    if kind == "normal":
        data = rng.standard_normal((rows, columns))
    elif kind == "integers":
        data = rng.integers(-3, 4, size=(rows, columns))
    else:
        data = np.full((rows, columns), 2.5)
    return torch.from_numpy(data.astype(np.float32)), k, group


@settings(max_examples=300, deadline=None)
@given(blocks(grouped=True))
def test_groups_select_the_k_smallest(case) -> None:
    scores, k, group = case
    assert groups_pay(scores.shape[1], k, group)
    assert_k_smallest(scores, k, *smallest_k(scores, k, group))


@settings(max_examples=300, deadline=None)
@given(blocks(grouped=False))
def test_any_block_gives_the_k_smallest(case) -> None:
    scores, k, group = case
    assert_k_smallest(scores, k, *smallest_k(scores, k, group))


def test_the_smallest_hide_in_one_group() -> None:
    """All k smallest in one group: the k - 1 other groups selected hold none of them, and all k come back."""
    scores = torch.arange(4 * 3 * 8 * 4, dtype=torch.float32).reshape(4, -1) + 100
    scores[:, 16:19] = torch.tensor([1.0, 2.0, 3.0])  # group 2 (columns 16-23) holds all three smallest
    values, columns = smallest_k(scores, 3, 8)
    assert torch.equal(columns.sort(dim=1).values, torch.tensor([[16, 17, 18]] * 4))
    assert_k_smallest(scores, 3, values, columns)


def test_columns_left_over_are_candidates() -> None:
    """A block whose width is no multiple of the group: the best scores in the last, partial group are found."""
    scores = torch.full((2, 8 * 4 * 2 + 5), 9.0)
    scores[:, -1] = -1.0
    scores[0, 3] = -2.0
    values, columns = smallest_k(scores, 2, 8)
    assert groups_pay(scores.shape[1], 2, 8)
    assert sorted(columns[0].tolist()) == [3, scores.shape[1] - 1]
    assert_k_smallest(scores, 2, values, columns)


@pytest.mark.parametrize(("columns", "k", "group", "pays"), [
    (8192, 17, 32, True), (8192, 64, 32, True), (8192, 65, 32, False), (100, 3, 0, False), (31, 1, 32, False),
    (130, 1, 32, True),  # 128 columns in groups: 4 x 1 x 32 of them is enough
])
def test_when_groups_pay(columns: int, k: int, group: int, pays: bool) -> None:
    assert groups_pay(columns, k, group) is pays
