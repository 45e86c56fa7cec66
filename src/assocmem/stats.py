"""Sampling statistics shared by the stages and the report."""

from __future__ import annotations

import numpy as np

from assocmem.errors import AssocmemError


def clustered_ce(row_nll: np.ndarray, row_tokens: np.ndarray) -> tuple[float, float]:
    """(CE, standard error) of the token-averaged CE sum s_i / sum n_i with rows (sequences) as independent
    clusters (delta method); rows without targets are left out."""
    sums = np.asarray(row_nll, dtype=np.float64)
    counts = np.asarray(row_tokens, dtype=np.float64)
    keep = counts > 0
    sums, counts = sums[keep], counts[keep]
    if sums.size < 2:
        raise AssocmemError(f"need at least 2 evaluation rows with targets to estimate the eval noise, got {sums.size}")
    ce = float(sums.sum() / counts.sum())
    residual = sums - ce * counts
    se = float(np.sqrt(sums.size / (sums.size - 1) * (residual @ residual)) / counts.sum())
    return ce, se
