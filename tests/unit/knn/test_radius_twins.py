"""benchmarks/radius_twins.py: rows a rounding error apart are found and merged, and nothing else is."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import ROOT


@pytest.fixture
def twins(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import radius_twins

    return radius_twins


def test_twins_are_merged_and_distinct_rows_kept(twins) -> None:
    rng = np.random.default_rng(3)
    rows = torch.from_numpy(rng.normal(size=(50, 8)))
    rounded = rows[:5] + 1e-7 * torch.from_numpy(rng.normal(size=(5, 8)))
    x = torch.cat([rows, rounded])
    distance, index = twins.nearest(x, block=7)
    assert torch.equal(index[50:], torch.arange(5)) and bool((distance[50:] < 1e-5).all())
    merged = twins.merge_twins(x, 1e-4, block=7)
    assert torch.equal(merged, rows)
    brute = torch.cdist(merged, merged).fill_diagonal_(float("inf")).min(1).values
    assert torch.allclose(twins.nearest(merged)[0], brute) and float(brute.min()) > 1e-2
