"""Which library runs the fp32 matrix products of a Linear layer on the CPU.

PyTorch's CPU wheels send fp32 ``F.linear`` to MKL's sgemm. On AMD processors MKL takes its generic AVX2 path
(MKL_VERBOSE prints "Intel(R) Architecture processors"), while oneDNN, which ships in the same wheel, runs its
AVX-512 kernels. On the 2-core AMD EPYC (Zen 5) of this project's machines, a 768x512 @ 512x2048 product ran at
about 230 GFLOP/s through MKL and 530 GFLOP/s through oneDNN, with the same fp32 inputs, outputs and
accumulation (benchmarks/README.md, "The GEMM library"). Only the summation order differs, so results agree
with MKL's to fp32 rounding.

``onednn_linear`` is ``F.linear`` with its forward product and both backward products (input and weight
gradients) computed by oneDNN through ``torch.ops.mkldnn._linear_pointwise``, the op that TorchInductor uses
for CPU linears. It takes ordinary dense tensors and accepts transposed (strided) operands, so the backward
pass needs no copies. Which library a run uses is measured on its host at its shapes (``train.gemm: auto``:
:mod:`assocmem.autotune.gemm`); on another host oneDNN's fp32 GEMM was only 1.15-1.22x MKL's and ``native`` the
faster at the default config's shapes. ``measure_peak_flops`` times the faster of the two libraries, the
denominator of the trainer's MFU.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Literal

import torch
from torch.nn import functional as F

log = logging.getLogger(__name__)

GemmBackend = Literal["native", "onednn"]
GEMM_CHOICES = ("auto", "native", "onednn")
# oneDNN's op costs ~15 us a call more than MKL's: below ~2M multiply-adds MKL wins (measured on the project's
# 2-core machine: 128x64x64 0.5-0.7x, 512x64x64 0.9x on 2 threads and 1.2x on 1, 256x64x256 1.2-1.5x, 768x128x512
# 1.9-2.2x), so smaller products stay on F.linear. Every product of a layer (forward and both backward ones)
# has the same count, so one layer call takes one path.
ONEDNN_MIN_MACS = 1 << 21


def onednn_available() -> bool:
    """True when this torch build carries oneDNN and its dense linear op."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        torch.ops.mkldnn._linear_pointwise  # noqa: B018 - the lookup raises when the op is not built in
    except (AttributeError, RuntimeError):
        return False
    return True


def cpu_has_bf16() -> bool:
    """True when oneDNN runs bf16 products natively on this CPU (avx512_bf16 or AMX), not by emulation."""
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")  # private: absent from some torch builds
    return any(getattr(torch.cpu, probe, lambda: False)() for probe in probes)


def resolve_gemm(choice: str, device: torch.device, *, key: str = "train.gemm") -> GemmBackend:
    """An explicit backend, checked: ``onednn`` fails clearly where it cannot run. For ``auto``: ``onednn`` where
    it can run (a CPU run, a torch with oneDNN), else ``native``; :func:`assocmem.autotune.gemm.choose_gemm` then
    times the two where both can run."""
    if choice not in GEMM_CHOICES:
        raise ValueError(f"{key}: {choice!r} is not one of {', '.join(GEMM_CHOICES)}")
    if choice == "native":
        return "native"
    usable = device.type == "cpu" and onednn_available()
    if choice == "onednn" and not usable:
        raise ValueError(f"{key}: onednn needs a CPU run with a torch build that has oneDNN "
                         f"(device {device}, oneDNN available: {onednn_available()}); use auto or native")
    return "onednn" if usable else "native"


def onednn_product(inputs: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """inputs (M, K) @ weight (N, K)^T + bias through oneDNN, whatever the size; either operand may be a
    transposed view."""
    return torch.ops.mkldnn._linear_pointwise(inputs, weight, bias, "none", [], "")


class _OneDnnLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, inputs: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(inputs, weight)
        ctx.has_bias = bias is not None
        flat = inputs.reshape(-1, inputs.shape[-1])
        return onednn_product(flat, weight, bias).view(*inputs.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        inputs, weight = ctx.saved_tensors
        grad_flat = grad_out.reshape(-1, grad_out.shape[-1])
        grad_inputs = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:  # dL/dx = dL/dy @ W, i.e. a linear with weight W^T
            grad_inputs = onednn_product(grad_flat, weight.t(), None).view(inputs.shape)
        if ctx.needs_input_grad[1]:  # dL/dW = (dL/dy)^T @ x, i.e. a linear of (dL/dy)^T with weight x^T
            grad_weight = onednn_product(grad_flat.t(), inputs.reshape(-1, inputs.shape[-1]).t(), None)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_bias = grad_flat.sum(0)
        return grad_inputs, grad_weight, grad_bias


def onednn_linear(inputs: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear`` computed by oneDNN (CPU, fp32, at least ``ONEDNN_MIN_MACS`` multiply-adds); other devices,
    dtypes, smaller products and CPU autocast (which casts F.linear's operands; this op would stay fp32) fall
    through to ``F.linear``."""
    if (inputs.device.type != "cpu" or inputs.dtype != torch.float32 or weight.dtype != torch.float32
            or inputs.numel() * weight.shape[0] < ONEDNN_MIN_MACS or torch.is_autocast_enabled("cpu")):
        return F.linear(inputs, weight, bias)
    return _OneDnnLinear.apply(inputs, weight, bias)


@contextmanager
def fp32_products(tf32: bool) -> Iterator[None]:
    """CUDA fp32 matmuls with TF32 (10-bit mantissa) on or off as asked, whatever the caller had set; restored
    afterwards."""
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def exact_fp32() -> AbstractContextManager[None]:
    """fp32 products in full precision: TF32 off for CUDA matmuls, restored afterwards."""
    return fp32_products(False)


def measure_peak_flops(device: torch.device, seconds: float = 0.3, dtype: torch.dtype | None = None,
                       tf32: bool = False) -> float:
    """Achievable dense-matmul FLOP/s on this device (the MFU denominator), measured, not assumed: the best
    of short bursts, so a burst slowed by another process on a shared machine does not count. On CPU the
    faster of the two fp32 GEMM libraries in the wheel counts (MKL through ``@``, oneDNN; see assocmem.gemm).
    ``dtype``: bf16 on CUDA and fp32 on the CPU unless given; fp32 on CUDA is timed with TF32 on if ``tf32`` and off
    if not, whatever the caller had set."""
    size = 4096 if device.type == "cuda" else 1024  # 512^3 reached ~70% of the 1024^3 rate on CPU
    dtype = dtype or (torch.bfloat16 if device.type == "cuda" else torch.float32)
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    products = [lambda: a @ b]
    if device.type == "cpu" and onednn_available():
        products.append(lambda: onednn_linear(a, b))
    with fp32_products(tf32):
        return max(_best_burst(product, device, 2.0 * size**3, seconds / len(products)) for product in products)


def _best_burst(product: Callable[[], Any], device: torch.device, flops: float, seconds: float) -> float:
    product()  # warm-up
    best, start = 0.0, time.perf_counter()
    while time.perf_counter() - start < seconds or best == 0.0:
        burst = time.perf_counter()
        for _ in range(4):
            product()
        if device.type == "cuda":
            torch.cuda.synchronize()
        best = max(best, 4 * flops / (time.perf_counter() - burst))
    return best
