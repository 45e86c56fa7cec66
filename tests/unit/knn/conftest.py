"""The fixture of the k-NN tests that run on every CPU engine."""

from __future__ import annotations

import pytest

from assocmem.gemm import onednn_available


@pytest.fixture(params=["faiss", "onednn", "torch"])
def engine(request: pytest.FixtureRequest) -> str:
    """The engine on the CPU (the onednn engine runs every distance product through oneDNN, whatever its size; the
    torch engine is the one CUDA runs)."""
    if request.param == "onednn" and not onednn_available():
        pytest.skip("this torch build has no oneDNN")
    return request.param
