"""The clustered standard error of a token-averaged cross-entropy."""

from __future__ import annotations

import numpy as np
import pytest

from assocmem.errors import AssocmemError
from assocmem.stats import clustered_ce


def test_clustered_ce_matches_the_delta_method_by_simulation() -> None:
    """SE of sum(s)/sum(n) over m rows: compare with the spread of the estimate over repeated draws."""
    rng = np.random.default_rng(0)

    def draw(m: int) -> tuple[np.ndarray, np.ndarray]:
        tokens = rng.integers(5, 30, size=m)
        return rng.gamma(2.0, 0.5, size=m) * tokens, tokens

    estimates = []
    for _ in range(3000):
        nll, tokens = draw(200)
        estimates.append(nll.sum() / tokens.sum())
    nll, tokens = draw(200)
    ce, se = clustered_ce(nll, tokens)
    assert ce == pytest.approx(nll.sum() / tokens.sum())
    assert se == pytest.approx(np.std(estimates), rel=0.15)


def test_clustered_ce_needs_two_rows() -> None:
    with pytest.raises(AssocmemError, match="at least 2"):
        clustered_ce(np.array([1.0, 2.0]), np.array([3, 0]))
