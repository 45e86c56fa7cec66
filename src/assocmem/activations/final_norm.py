"""The final norm's parameters in ``meta.json``, so later stages can apply it without reloading the model.

``meta["final_norm"]`` is ``{"weight": [...], "bias": [...] or null}`` or null. The values are the float32
parameters as Python floats, which JSON round-trips exactly. Only a ``torch.nn.LayerNorm`` is recorded, whose
output is weight * normalised + bias: other final norms (RMSNorm variants; Gemma's scales by 1 + weight) give
their gain in other forms, and a later stage dividing by ``weight`` would be wrong for them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from assocmem.layout import FINAL_NORM_LAYER

__all__ = ["FINAL_NORM_LAYER", "final_norm_affine", "final_norm_record"]


def _as_floats(param: torch.Tensor) -> list[float]:
    return [float(value) for value in param.detach().float().cpu().numpy()]


def final_norm_record(norm: torch.nn.Module | None) -> dict[str, list[float] | None] | None:
    """``{"weight", "bias"}`` of ``norm`` for ``meta.json``; None unless it is a LayerNorm with a weight."""
    weight = getattr(norm, "weight", None)
    if not isinstance(norm, torch.nn.LayerNorm) or weight is None:
        return None
    bias = getattr(norm, "bias", None)
    return {"weight": _as_floats(weight), "bias": None if bias is None else _as_floats(bias)}


def final_norm_affine(meta: dict[str, Any]) -> tuple[np.ndarray, np.ndarray] | None:
    """(gain, bias) float64 from an activation dump's ``meta.json`` (bias zeros when the norm has none);
    None when no final norm was recorded."""
    record = meta.get("final_norm")
    if record is None:
        return None
    gain = np.asarray(record["weight"], dtype=np.float64)
    bias = np.zeros_like(gain) if record["bias"] is None else np.asarray(record["bias"], dtype=np.float64)
    return gain, bias
