"""assocmem.gemm's measured matrix-product rate: the dtype it times, and fp32 timed without TF32 unless asked."""

from __future__ import annotations

import pytest
import torch

from assocmem import gemm


def test_tf32_is_off_inside_and_restored_after() -> None:
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        with gemm.exact_fp32():
            assert not torch.backends.cuda.matmul.allow_tf32
        assert torch.backends.cuda.matmul.allow_tf32
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


@pytest.mark.parametrize("caller_tf32", [False, True])
@pytest.mark.parametrize(("dtype", "tf32", "seen"), [(None, False, (torch.float32, False)),
                                                     (torch.bfloat16, False, (torch.bfloat16, False)),
                                                     (torch.float32, True, (torch.float32, True))])
def test_the_rate_is_timed_at_the_dtype_and_tf32_asked(monkeypatch, dtype, tf32, seen, caller_tf32) -> None:
    """TF32 as asked whatever the caller had set (a TF32 rate once timed fp32 under torch's default, TF32 off)."""
    timed = []

    def burst(product, device, flops, seconds):
        timed.append((product().dtype, torch.backends.cuda.matmul.allow_tf32))
        return 1.0

    monkeypatch.setattr(gemm, "_best_burst", burst)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", caller_tf32)
    assert gemm.measure_peak_flops(torch.device("cpu"), dtype=dtype, tf32=tf32) == 1.0
    assert timed and set(timed) == {seen}
    assert torch.backends.cuda.matmul.allow_tf32 == caller_tf32  # restored


def test_the_cpu_rate_is_measured() -> None:
    assert gemm.measure_peak_flops(torch.device("cpu"), seconds=0.02) > 1e8
