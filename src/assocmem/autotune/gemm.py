"""``train.gemm: auto``: the library of the fp32 CPU Linear products, F.linear (MKL) or oneDNN
(:func:`assocmem.gemm.onednn_linear`), chosen by timing both on the job's own Linear products, forward and both
backward products, on this host (:func:`assocmem.autotune.measure.choose`)."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from assocmem.autotune.measure import Choice, Clock, choose, host_key
from assocmem.gemm import GEMM_CHOICES, ONEDNN_MIN_MACS, cpu_has_bf16, onednn_linear, resolve_gemm

Layer = tuple[int, int, bool, int]  # in_features, out_features, has bias, how many of the model's Linears
log = logging.getLogger(__name__)


def warn_if_bf16_emulated() -> None:
    """bf16 on a CPU without bf16 instructions runs, but through oneDNN's emulation: far slower than fp32."""
    if not cpu_has_bf16():
        log.warning("train.precision: bf16 on a CPU without bf16 instructions (avx512_bf16/AMX): the products are "
                    "emulated and slower than fp32; use fp32 on this host")


def linear_layers(model: nn.Module) -> list[Layer]:
    """The model's Linear shapes, each with the number of layers that have it (a tied unembedding included)."""
    counts = Counter((m.in_features, m.out_features, m.bias is not None) for m in model.modules()
                     if isinstance(m, nn.Linear))
    return [(k, n, bias, count) for (k, n, bias), count in sorted(counts.items())]


def choose_gemm(choice: str, device: torch.device, model: nn.Module, rows: int, *, resumed: str | None = None,
                cache_file: Path | None = None, clock: Clock = time.perf_counter, budget_s: float = 1.0,
                precision: str = "fp32", compiled: bool = False) -> Choice:
    """The backend of a training run. ``rows``: the rows of one micro-batch's Linear products (sequences x
    length); ``resumed``: the backend a resumed checkpoint was trained with, which the run keeps. An explicit
    ``native``/``onednn`` is validated by :func:`assocmem.gemm.resolve_gemm` and used; ``auto`` is native off the
    CPU and where torch lacks oneDNN, and native, untimed, when no product reaches ``ONEDNN_MIN_MACS`` (below it
    onednn_linear runs F.linear itself). Under ``precision: bf16`` on a CPU every product is autocast's bf16
    F.linear (onednn_linear hands it over), so ``auto`` is native, untimed (``autocast``). A ``compiled`` model's
    products are Inductor's (it lowers F.linear itself and cannot lower the oneDNN op): ``auto`` is native,
    untimed (``compile``). Under either, an explicit ``onednn`` would not run, so it is refused."""
    backend = resolve_gemm(choice, device)
    if choice == "onednn" and (compiled or precision == "bf16"):
        other = "train.compile (Inductor cannot lower the oneDNN op)" if compiled else "train.precision: bf16"
        raise ValueError(f"train.gemm: onednn runs eager fp32 products only, not under {other}; use gemm: auto or "
                         "native")
    if precision == "bf16" and device.type == "cpu":
        warn_if_bf16_emulated()
    if choice != "auto":
        return Choice(backend, "explicit")
    if device.type != "cpu":
        return Choice("native", "device")
    if precision == "bf16":
        return Choice("native", "autocast")
    if compiled:
        return Choice("native", "compile")
    if backend == "native":
        return Choice("native", "unavailable")
    if resumed in GEMM_CHOICES[1:]:
        return Choice(str(resumed), "checkpoint")
    layers = linear_layers(model)
    shape = {"rows": rows, "layers": layers, "onednn_min_macs": ONEDNN_MIN_MACS}
    if all(rows * k * n < ONEDNN_MIN_MACS for k, n, _, _ in layers):
        return Choice("native", "identical", shape={**shape, "layers": [list(layer) for layer in layers]})
    return choose("train.gemm", shape, linear_passes(rows, layers), host=host_key(), cache_file=cache_file,
                  clock=clock, budget_s=budget_s)


def linear_passes(rows: int, layers: list[Layer]) -> dict[str, Callable[[], None]]:
    """One call per backend: every Linear of the model once on ``rows`` rows, forward and backward (input, weight
    and bias gradients), on fixed random tensors drawn from a private generator (the run's RNG is untouched)."""
    generator = torch.Generator().manual_seed(0)
    tensors = []
    for k, n, bias, count in layers:
        x = torch.randn(rows, k, generator=generator).requires_grad_()
        w = torch.randn(n, k, generator=generator).requires_grad_()
        b = torch.randn(n, generator=generator).requires_grad_() if bias else None
        tensors.append((x, w, b, torch.randn(rows, n, generator=generator), count))
    return {"native": partial(_forward_backward, F.linear, tensors),
            "onednn": partial(_forward_backward, onednn_linear, tensors)}


def _forward_backward(linear: Callable[..., torch.Tensor], tensors: list[tuple]) -> None:
    for x, w, b, grad_out, count in tensors:
        inputs = (x, w) if b is None else (x, w, b)
        for _ in range(count):
            torch.autograd.grad(linear(x, w, b), inputs, grad_out)
