"""Last-position activations of pretrained Hugging Face causal LMs (the paper's Fig. 2 protocol).

Fig. 2 of Niu et al. (2024) runs GPT-2 medium on 80K random 256-token chunks of OpenWebText and keeps the
last-layer hidden state at the last position of each chunk. :func:`dump_activations` does exactly that for any
HF causal LM, streaming batch by batch into a ``.npy`` memmap that survives a kill and resumes.

Layer indices follow HF's ``output_hidden_states`` convention (checked for GPT-2 in the tests):

* index 0 is the embedding output (token + position embeddings after dropout, i.e. the input of block 1);
* index ``i`` (1..L) is the output of block ``i`` -- the residual stream, no LayerNorm applied;
* EXCEPT that HF replaces index L (``hidden_states[-1]``) by ``last_hidden_state``, which is AFTER the final
  LayerNorm ``ln_f``. The raw output of the last block is therefore in none of the returned hidden states:
  ``hidden_states[-2]`` is the output of block L-1, i.e. the INPUT of the last block, not its output.

So index L is recorded either with ``final_ln=True`` (what ``hidden_states[-1]`` gives, what the paper
most likely used) or ``final_ln=False`` (the pre-``ln_f`` residual stream of the last block, captured with a
forward pre-hook on the final norm module). ``final_ln`` affects index L only.

Files written next to ``out_path`` (``acts.npy``):

* ``acts.npy`` -- float32, shape (n_layers_recorded, n_chunks, d_model); built in ``acts.npy.partial`` and
  renamed into place only when every chunk is done;
* ``acts.npy.progress.json`` -- chunks done so far, rewritten atomically after each flushed batch, removed on
  completion;
* ``acts.index.parquet`` -- one row per chunk: row, chunk_id, and offset when offsets are given;
* ``acts.meta.json`` -- the dict :func:`dump_activations` returns.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm

from assocmem.errors import AssocmemError
from assocmem.io import atomic_path, read_json, write_json, write_parquet
from assocmem.runtime import resolve_device
from assocmem.tokenstore import TokenStore

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}
# Attribute names of the final norm in HF decoder stacks (GPT-2/GPT-J: ln_f; Llama/Mistral/Qwen: norm;
# GPT-NeoX/OPT decoder: final_layer_norm; Phi: final_layernorm).
_FINAL_NORM_NAMES = ("ln_f", "norm", "final_layer_norm", "final_layernorm")
_FORMAT_VERSION = 1
logger = logging.getLogger(__name__)


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
        "n_positions": _max_positions(model),
        "vocab_size": int(cfg.vocab_size),
        "n_params": int(model.num_parameters()),
        "dtype": _dtype_name(dtype),
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


def _max_positions(model: torch.nn.Module) -> int | None:
    for key in ("max_position_embeddings", "n_positions"):
        value = getattr(model.config, key, None)
        if isinstance(value, int):
            return value
    return None


def _dtype_name(dtype: torch.dtype) -> str:
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


# --------------------------------------------------------------------------------------------- chunks


def _as_chunk_batch(batch: Any, where: str) -> np.ndarray:
    array = batch.cpu().numpy() if isinstance(batch, torch.Tensor) else np.asarray(batch)
    if array.ndim != 2 or not np.issubdtype(array.dtype, np.integer):
        raise AssocmemError(
            f"{where}: expected a 2-D integer array (n, chunk_len), got {array.dtype} {array.shape}"
        )
    return array.astype(np.int64, copy=False)


def _iter_batches(chunks: Any, start: int, batch_size: int) -> Iterator[tuple[int, np.ndarray]]:
    """Yield ``(first_row, batch)`` from row ``start`` on, re-batched to ``batch_size`` rows."""
    if isinstance(chunks, np.ndarray | torch.Tensor):
        array = _as_chunk_batch(chunks, "chunks")
        for first in range(start, len(array), batch_size):
            yield first, array[first : first + batch_size]
        return
    row, pending, pending_rows = 0, [], 0
    first = start
    for i, batch in enumerate(chunks):
        array = _as_chunk_batch(batch, f"chunks batch {i}")
        skip = min(max(start - row, 0), len(array))
        row += len(array)
        if skip < len(array):
            pending.append(array[skip:])
            pending_rows += len(array) - skip
        while pending_rows >= batch_size:
            merged = np.concatenate(pending)
            yield first, merged[:batch_size]
            first += batch_size
            pending, pending_rows = [merged[batch_size:]], len(merged) - batch_size
    if pending_rows:
        yield first, np.concatenate(pending)


def _chunks_fingerprint(chunks: Any) -> str | None:
    """sha256 of the chunk array (None for an iterable, which we cannot read twice)."""
    if not isinstance(chunks, np.ndarray | torch.Tensor):
        return None
    array = np.ascontiguousarray(_as_chunk_batch(chunks, "chunks"))
    return hashlib.sha256(memoryview(array).cast("B")).hexdigest()


def _model_fingerprint(model: torch.nn.Module) -> str:
    """Cheap identity of the weights: shapes plus the first 64 values of every parameter."""
    digest = hashlib.sha256()
    for name, param in model.named_parameters():
        head = param.detach().flatten()[:64].float().cpu().numpy()
        digest.update(f"{name}{tuple(param.shape)}".encode())
        digest.update(head.tobytes())
    return digest.hexdigest()


# --------------------------------------------------------------------------------------------- dumping


def output_paths(out_path: str | os.PathLike[str]) -> dict[str, Path]:
    """The files :func:`dump_activations` writes for ``out_path`` (``acts.npy``)."""
    out = Path(out_path)
    stem = out.name[: -len(".npy")] if out.name.endswith(".npy") else out.name
    return {
        "npy": out,
        "partial": out.with_name(out.name + ".partial"),
        "progress": out.with_name(out.name + ".progress.json"),
        "index": out.with_name(stem + ".index.parquet"),
        "meta": out.with_name(stem + ".meta.json"),
    }


def dump_activations(
    model: torch.nn.Module,
    chunks: np.ndarray | torch.Tensor | Iterable[np.ndarray],
    out_path: str | os.PathLike[str],
    *,
    layers: str | int | Sequence[int] = "last",
    final_ln: bool = True,
    batch_size: int = 32,
    device: str | torch.device | None = None,
    dtype: str | torch.dtype | None = None,
    resume: bool = True,
    n_chunks: int | None = None,
    chunk_ids: Sequence[int] | np.ndarray | None = None,
    offsets: Sequence[int] | np.ndarray | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Record the last-position hidden state of every chunk into ``out_path`` (see module docstring).

    ``chunks`` is an int array (n_chunks, chunk_len) or an iterable of such batches (then ``n_chunks`` is
    required). ``device``/``dtype`` move/cast ``model`` in place (None keeps its current ones). With
    ``resume=True`` a finished output with the same settings is returned as is, and an unfinished one
    continues from its progress file (one left by other settings is discarded); the result is bitwise
    identical to an uninterrupted run when ``batch_size`` and the device are unchanged. Returns the dict also
    saved as the ``.meta.json`` file: paths, shape, layers, chunks_per_s, tokens_per_s, and so on.
    """
    paths = output_paths(out_path)
    total = _count_chunks(chunks, n_chunks)
    if batch_size < 1:
        raise AssocmemError(f"key 'batch_size': must be >= 1, got {batch_size}")
    if device is not None:
        model.to(device=torch_device(device))
    if dtype is not None:
        model.to(dtype=resolve_dtype(dtype))
    model.eval()
    run_device = next(model.parameters()).device
    n_layer = int(model.config.num_hidden_layers)
    recorder = LastPositionRecorder(model, resolve_layers(layers, n_layer), final_ln)
    ids_col = _index_column(chunk_ids, total, "chunk_ids")
    offsets_col = _index_column(offsets, total, "offsets")
    signature = {
        "format_version": _FORMAT_VERSION,
        "model": _model_fingerprint(model),
        "model_name": getattr(model, "name_or_path", "") or f"random-init:{model.config.model_type}",
        "layers": recorder.layers,
        "final_ln": bool(final_ln),
        "dtype": _dtype_name(next(model.parameters()).dtype),
        "n_chunks": total,
        "d_model": int(model.config.hidden_size),
        "chunks_sha256": _chunks_fingerprint(chunks),
        "chunk_ids_sha256": _array_sha(ids_col),
        "offsets_sha256": _array_sha(offsets_col),
    }
    finished = _finished_result(paths, signature) if resume else None
    if finished is not None:
        return finished
    done = _prepare_partial(paths, signature, resume, (len(recorder.layers), total, signature["d_model"]))
    run = _run_batches(model, recorder, chunks, paths, signature, done, batch_size, run_device, progress)
    return _finalise(paths, signature, run, ids_col, offsets_col, batch_size, str(run_device))


def _count_chunks(chunks: Any, n_chunks: int | None) -> int:
    if isinstance(chunks, np.ndarray | torch.Tensor):
        count = int(chunks.shape[0])
        if n_chunks is not None and n_chunks != count:
            raise AssocmemError(f"key 'n_chunks': {n_chunks} given but the chunk array has {count} rows")
        return count
    if n_chunks is None and isinstance(chunks, Sequence):
        return sum(len(batch) for batch in chunks)
    if n_chunks is None:
        raise AssocmemError("key 'n_chunks': required when chunks is an iterator of batches")
    return int(n_chunks)


def _index_column(values: Any, total: int, key: str) -> np.ndarray | None:
    if values is None:
        return None
    array = np.asarray(values)
    if array.shape != (total,) or not np.issubdtype(array.dtype, np.integer):
        raise AssocmemError(f"key {key!r}: expected {total} integers, got {array.dtype} {array.shape}")
    return array.astype(np.int64, copy=False)


def _array_sha(array: np.ndarray | None) -> str | None:
    return None if array is None else hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def _finished_result(paths: dict[str, Path], signature: dict[str, Any]) -> dict[str, Any] | None:
    if not (paths["npy"].exists() and paths["meta"].exists() and paths["index"].exists()):
        return None
    meta = read_json(paths["meta"])
    if meta.get("signature") != signature:
        return None
    paths["progress"].unlink(missing_ok=True)
    return {**meta, "skipped": True}


def _prepare_partial(
    paths: dict[str, Path], signature: dict[str, Any], resume: bool, shape: tuple[int, int, int]
) -> int:
    """Return the number of chunks already done in a valid ``.partial`` (0 when starting afresh)."""
    if resume and paths["partial"].exists() and paths["progress"].exists():
        state = read_json(paths["progress"])
        if state.get("signature") == signature:
            return int(state["done"])
        logger.warning("%s: unfinished run with other settings (model, chunks, layers, final_ln or dtype); "
                       "starting over", paths["progress"])
    paths["progress"].unlink(missing_ok=True)
    # The partial file is itself created atomically, so it always has a valid .npy header.
    with atomic_path(paths["partial"], suffix=".npy") as tmp:
        np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=shape).flush()
    write_json(paths["progress"], {"done": 0, "signature": signature})
    return 0


def _run_batches(
    model: torch.nn.Module,
    recorder: LastPositionRecorder,
    chunks: Any,
    paths: dict[str, Path],
    signature: dict[str, Any],
    done: int,
    batch_size: int,
    device: torch.device,
    show_progress: bool,
) -> dict[str, Any]:
    total = signature["n_chunks"]
    max_len, vocab = _max_positions(model), int(model.config.vocab_size)
    out = np.lib.format.open_memmap(paths["partial"], mode="r+")
    chunk_len = int(chunks.shape[1]) if isinstance(chunks, np.ndarray | torch.Tensor) else None
    started, start_row = time.perf_counter(), done
    bar = tqdm(total=total, initial=done, unit="chunk", desc=f"activations {paths['npy'].name}",
               disable=not show_progress)
    try:
        for first, batch in _iter_batches(chunks, done, batch_size):
            chunk_len = _check_batch(batch, first, total, chunk_len, max_len, vocab)
            states = recorder(torch.from_numpy(batch).to(device))
            out[:, first : first + len(batch)] = states.numpy()
            out.flush()
            done = first + len(batch)
            write_json(paths["progress"], {"done": done, "signature": signature})
            bar.update(len(batch))
    finally:
        bar.close()
        del out
    if done != total:
        raise AssocmemError(f"chunks: got {done} chunks but n_chunks={total}")
    seconds = time.perf_counter() - started
    n_run = done - start_row
    return {
        "resumed_from": start_row,
        "chunks_this_run": n_run,
        "chunk_len": chunk_len,
        "seconds": seconds,
        "chunks_per_s": n_run / seconds if seconds > 0 else float("nan"),
        "tokens_per_s": n_run * (chunk_len or 0) / seconds if seconds > 0 else float("nan"),
    }


def _check_batch(
    batch: np.ndarray, first: int, total: int, chunk_len: int | None, max_len: int | None, vocab: int
) -> int:
    where = f"chunks rows {first}..{first + len(batch) - 1}"
    if first + len(batch) > total:
        raise AssocmemError(f"{where}: more chunks than n_chunks={total}")
    length = batch.shape[1]
    if chunk_len is not None and length != chunk_len:
        raise AssocmemError(f"{where}: chunk length {length} differs from earlier batches ({chunk_len})")
    if length < 1 or (max_len is not None and length > max_len):
        raise AssocmemError(f"{where}: chunk length {length} outside 1..{max_len} (the model's context)")
    low, high = int(batch.min()), int(batch.max())
    if low < 0 or high >= vocab:
        raise AssocmemError(f"{where}: token ids span {low}..{high}, outside the vocabulary 0..{vocab - 1}")
    return length


def _finalise(
    paths: dict[str, Path],
    signature: dict[str, Any],
    run: dict[str, Any],
    ids_col: np.ndarray | None,
    offsets_col: np.ndarray | None,
    batch_size: int,
    device: str,
) -> dict[str, Any]:
    total = signature["n_chunks"]
    index = pd.DataFrame({"row": np.arange(total, dtype=np.int64),
                          "chunk_id": ids_col if ids_col is not None else np.arange(total, dtype=np.int64)})
    if offsets_col is not None:
        index["offset"] = offsets_col
    write_parquet(paths["index"], index)
    result = {
        "out_path": str(paths["npy"]),
        "index_path": str(paths["index"]),
        "meta_path": str(paths["meta"]),
        "shape": [len(signature["layers"]), total, signature["d_model"]],
        "layers": signature["layers"],
        "final_ln": signature["final_ln"],
        "n_chunks": total,
        "d_model": signature["d_model"],
        "model_name": signature["model_name"],
        "dtype": signature["dtype"],
        "device": device,
        "batch_size": batch_size,
        **run,
        "skipped": False,
        "signature": signature,
    }
    write_json(paths["meta"], result)
    # The .npy is the completion marker, so it moves into place last.
    os.replace(paths["partial"], paths["npy"])
    paths["progress"].unlink(missing_ok=True)
    return result


# --------------------------------------------------------------------------------------------- the stage


def hf_layer_names(indices: list[int], n_layer: int, final_ln: bool) -> list[str]:
    """HF hidden_states index -> our layer names (index n_layer is after ln_f when final_ln)."""
    def name(i: int) -> str:
        if i == 0:
            return "emb"
        if i == n_layer:
            return "final_ln" if final_ln else f"block{i}"
        return f"block{i}"
    return [name(int(i)) for i in indices]


def dump_pretrained(spec: dict[str, Any], acts: dict[str, Any], seed: int, store_dir: Path,
                    out_dir: Path) -> dict[str, Any]:
    """The paper's Fig. 2 protocol on a pretrained HF causal LM: last-position states of random chunks of the
    store's training split (``train.npy``) and of its held-out split (``heldout.npy``)."""
    load_spec = {k: v for k, v in spec.items()
                 if k in ("name", "revision", "config", "local_files_only", "dtype", "device") and v is not None}
    model, info = load_causal_lm({**load_spec, "seed": seed})
    meta: dict[str, Any] = {"model": info, "final_ln": spec["final_ln"], "splits": {}}
    layers = "all" if acts["layers"] == "all" else "last"
    train = TokenStore(store_dir, "train")
    heldout_name = acts.get("heldout_split") or train.roles["heldout"]
    heldout = TokenStore(store_dir, heldout_name)
    for split, store, split_seed in (("train", train, seed), ("heldout", heldout, seed + 1)):
        chunks, offsets = store.random_chunks(acts["n_chunks"], acts["chunk_len"], split_seed)
        result = dump_activations(model, chunks, out_dir / f"{split}.npy", layers=layers, final_ln=spec["final_ln"],
                                  batch_size=spec["batch_size"], offsets=offsets)
        meta["splits"][split] = {"n_chunks": acts["n_chunks"], "chunk_len": acts["chunk_len"],
                                 "distinct_chunks": int(len(np.unique(offsets))), "layers": result["layers"]}
    meta["layers"] = hf_layer_names(meta["splits"]["train"]["layers"], info["n_layer"], spec["final_ln"])
    meta["d_model"] = info["d_model"]
    meta["heldout_split"] = heldout_name
    write_json(out_dir / "meta.json", meta)
    return meta
