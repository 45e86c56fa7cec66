"""Pretrained (or random-init) Hugging Face causal LMs: loading, and recording their last-position states.

:mod:`assocmem.activations.hf` dumps what :class:`LastPositionRecorder` records into resumable ``.npy`` files.

Layer indices follow HF's ``output_hidden_states`` convention (checked for GPT-2 in the tests):

* index 0 is the embedding output (token + position embeddings after dropout, i.e. the input of block 1);
* index ``i`` (1..L) is the output of block ``i`` -- the residual stream, no LayerNorm applied;
* EXCEPT that HF replaces index L (``hidden_states[-1]``) by ``last_hidden_state``, which is AFTER the final
  LayerNorm ``ln_f``. The raw output of the last block is therefore in none of the returned hidden states:
  ``hidden_states[-2]`` is the output of block L-1, i.e. the INPUT of the last block, not its output.

So index L is recorded either with ``final_ln=True`` (what ``hidden_states[-1]`` gives, what the paper
most likely used) or ``final_ln=False`` (the pre-``ln_f`` residual stream of the last block, captured with a
forward pre-hook on the final norm module). ``final_ln`` affects index L only.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from assocmem.errors import AssocmemError
from assocmem.layout import FINAL_NORM_LAYER
from assocmem.runtime import resolve_device

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}
# Attribute names of the final norm in HF decoder stacks (GPT-2/GPT-J: ln_f; Llama/Mistral/Qwen: norm;
# GPT-NeoX/OPT decoder: final_layer_norm; Phi: final_layernorm).
_FINAL_NORM_NAMES = ("ln_f", "norm", "final_layer_norm", "final_layernorm")


# --------------------------------------------------------------------------------------------- loading


def torch_device(device: str | torch.device | None = "auto") -> torch.device:
    """The spec's ``device`` via :func:`assocmem.runtime.resolve_device` ("auto"/None: CUDA when available)."""
    return torch.device(resolve_device(None if device is None else str(device), key="model spec key 'device'"))


def resolve_dtype(dtype: str | torch.dtype | None) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        if dtype not in DTYPES.values():
            raise AssocmemError(f"key 'dtype': {dtype} not supported; use one of {sorted(DTYPES)}")
        return dtype
    name = "float32" if dtype is None else str(dtype)
    if name not in DTYPES:
        raise AssocmemError(f"key 'dtype': {name!r} not supported; use one of {sorted(DTYPES)}")
    return DTYPES[name]


def _env_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


def load_causal_lm(spec: dict[str, Any]) -> tuple[torch.nn.Module, dict[str, Any]]:
    """Load a causal LM from ``spec`` and return ``(model, info)``; the model is in eval mode.

    spec keys:
      * ``name``: HF hub id (e.g. ``"gpt2-medium"``) or local directory, loaded with
        ``AutoModelForCausalLM.from_pretrained`` (never ``trust_remote_code``); optional ``revision``,
        ``local_files_only`` (default: true when the env var HF_HUB_OFFLINE is set), ``cache_dir``;
      * OR ``config``: a config dict (``model_type`` defaults to ``"gpt2"``) -> random init with ``seed``
        (default 0), for offline tests;
      * ``dtype``: float32 (default) / float16 / bfloat16; ``device``: "auto" (default), "cpu", "cuda", ...;
      * ``attn_implementation``: optional, e.g. "eager" or "sdpa".

    ``info`` holds source, name, revision, model_type, n_layer, d_model, n_positions, vocab_size, n_params,
    dtype, device, seed.
    """
    has_name, has_config = spec.get("name") is not None, spec.get("config") is not None
    if has_name == has_config:
        raise AssocmemError(
            "model spec: give exactly one of the keys 'name' (pretrained) or 'config' (random init)"
        )
    dtype = resolve_dtype(spec.get("dtype"))
    device = torch_device(spec.get("device", "auto"))
    model = _from_pretrained(spec) if has_name else _from_config(spec)
    model = model.to(device=device, dtype=dtype).eval()
    cfg = model.config
    info = {
        "source": "pretrained" if has_name else "config",
        "name": str(spec["name"]) if has_name else f"random-init:{cfg.model_type}",
        "revision": spec.get("revision"),
        "commit_hash": getattr(cfg, "_commit_hash", None),
        "model_type": cfg.model_type,
        "n_layer": int(cfg.num_hidden_layers),
        "d_model": int(cfg.hidden_size),
        "n_positions": max_positions(model),
        "vocab_size": int(cfg.vocab_size),
        "n_params": int(model.num_parameters()),
        "dtype": dtype_name(dtype),
        "device": str(device),
        "seed": None if has_name else int(spec.get("seed", 0)),
    }
    return model, info


def _from_pretrained(spec: dict[str, Any]) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    name = str(spec["name"])
    revision = spec.get("revision")
    local_only = bool(spec.get("local_files_only", _env_offline()))
    kwargs: dict[str, Any] = {
        "trust_remote_code": False, "local_files_only": local_only, "revision": revision,
    }
    for key in ("cache_dir", "attn_implementation"):
        if spec.get(key) is not None:
            kwargs[key] = spec[key]
    try:
        return AutoModelForCausalLM.from_pretrained(name, **kwargs)
    except (OSError, ValueError) as err:
        hf_home = os.environ.get("HF_HOME", "~/.cache/huggingface")
        raise AssocmemError(
            f"model spec key 'name': could not load causal LM {name!r} (revision={revision!r}, "
            f"local_files_only={local_only}): {err}\n"
            f"To run offline, put the model in the Hugging Face cache first (HF_HOME={hf_home}), e.g. on a "
            f"machine with network access run `hf download {name}` with the same HF_HOME, then set "
            f"HF_HUB_OFFLINE=1; or set 'name' to a local directory holding config.json and the weights "
            f"(model.safetensors). With HF_HUB_OFFLINE=1 or local_files_only=true only the cache is "
            f"consulted."
        ) from err


def _from_config(spec: dict[str, Any]) -> torch.nn.Module:
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg_dict = dict(spec["config"])
    model_type = cfg_dict.pop("model_type", "gpt2")
    try:
        config = AutoConfig.for_model(model_type, **cfg_dict)
    except (ValueError, TypeError, KeyError) as err:
        raise AssocmemError(f"model spec key 'config': cannot build a {model_type!r} config: {err}") from err
    if spec.get("attn_implementation") is not None:
        config._attn_implementation = spec["attn_implementation"]
    # A forked RNG keeps the global torch RNG untouched while making the init depend on the seed alone.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(spec.get("seed", 0)))
        return AutoModelForCausalLM.from_config(config)


def max_positions(model: torch.nn.Module) -> int | None:
    for key in ("max_position_embeddings", "n_positions"):
        value = getattr(model.config, key, None)
        if isinstance(value, int):
            return value
    return None


def dtype_name(dtype: torch.dtype) -> str:
    return next(name for name, value in DTYPES.items() if value == dtype)


# --------------------------------------------------------------------------------------------- layers


def final_norm_module(model: torch.nn.Module) -> torch.nn.Module | None:
    """The final norm (``ln_f`` for GPT-2) applied after the last block, or None when not found."""
    base = getattr(model, "base_model", model)
    for owner in (base, getattr(base, "decoder", None)):
        for name in _FINAL_NORM_NAMES:
            module = getattr(owner, name, None) if owner is not None else None
            if isinstance(module, torch.nn.Module):
                return module
    return None


def resolve_layers(layers: str | int | Sequence[int], n_layer: int) -> list[int]:
    """``"last"`` -> [L]; ``"all"`` -> [0..L]; ints (negative allowed, -1 == L) -> sorted unique in 0..L."""
    if layers == "last":
        return [n_layer]
    if layers == "all":
        return list(range(n_layer + 1))
    if isinstance(layers, str):
        raise AssocmemError(f"key 'layers': {layers!r} is not 'last', 'all' or a list of ints")
    requested = [layers] if isinstance(layers, int) else list(layers)
    resolved = set()
    for index in requested:
        if not isinstance(index, int | np.integer) or not -(n_layer + 1) <= index <= n_layer:
            raise AssocmemError(f"key 'layers': {index!r} is outside 0..{n_layer} (or -{n_layer + 1}..-1)")
        resolved.add(int(index) % (n_layer + 1))
    if not resolved:
        raise AssocmemError("key 'layers': empty list")
    return sorted(resolved)


def hf_layer_names(indices: list[int], n_layer: int, final_ln: bool) -> list[str]:
    """HF hidden_states index -> our layer names (index n_layer is after ln_f when final_ln)."""
    def name(i: int) -> str:
        if i == 0:
            return "emb"
        if i == n_layer:
            return FINAL_NORM_LAYER if final_ln else f"block{i}"
        return f"block{i}"
    return [name(int(i)) for i in indices]


class LastPositionRecorder:
    """Runs the base model on a batch and returns the last-position state of each requested layer.

    Index L is ``last_hidden_state`` (after the final norm) when ``final_ln`` is true, else the input of the
    final norm (captured with a forward pre-hook); every other index comes from ``hidden_states``.
    """

    def __init__(self, model: torch.nn.Module, layers: list[int], final_ln: bool) -> None:
        self.base = getattr(model, "base_model", model)
        self.n_layer = int(model.config.num_hidden_layers)
        self.layers = layers
        self.final_ln = final_ln
        self.need_hidden = any(index < self.n_layer for index in layers)
        self.need_pre_norm = self.n_layer in layers and not final_ln
        self._norm = final_norm_module(model) if self.need_pre_norm else None
        if self.need_pre_norm and self._norm is None:
            raise AssocmemError(
                f"final_ln=False: no final norm ({', '.join(_FINAL_NORM_NAMES)}) found on "
                f"{type(self.base).__name__}; cannot take the pre-norm last layer"
            )

    @torch.inference_mode()
    def __call__(self, input_ids: torch.Tensor) -> torch.Tensor:
        """(B, T) int64 -> (n_layers_recorded, B, d) float32 on the CPU."""
        captured: list[torch.Tensor] = []
        handle = None
        if self._norm is not None:
            handle = self._norm.register_forward_pre_hook(lambda _m, args: captured.append(args[0][:, -1]))
        try:
            out = self.base(input_ids=input_ids, output_hidden_states=self.need_hidden, use_cache=False)
        finally:
            if handle is not None:
                handle.remove()
        if self.need_pre_norm and len(captured) != 1:
            raise AssocmemError(f"final norm ran {len(captured)} times in one forward pass; expected once")
        rows = [self._layer_state(index, out, captured) for index in self.layers]
        return torch.stack(rows).float().cpu()

    def _layer_state(self, index: int, out: Any, captured: list[torch.Tensor]) -> torch.Tensor:
        if index < self.n_layer:
            return out.hidden_states[index][:, -1]
        return out.last_hidden_state[:, -1] if self.final_ln else captured[0]
