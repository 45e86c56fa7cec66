"""Dump the last-position activations of Hugging Face causal LMs (the paper's Fig. 2 protocol).

Fig. 2 of Niu et al. (2024) runs GPT-2 medium on 80K random 256-token chunks of OpenWebText and keeps the
last-layer hidden state at the last position of each chunk. :func:`dump_hf_chunk_activations` does exactly that
for any HF causal LM, streaming batch by batch into a ``.npy`` memmap that survives a kill and resumes;
:func:`dump_hf_activations` runs it on the train and held-out splits of a token store. Which states a layer index
means: :mod:`assocmem.activations.hf_models`.

Files :func:`dump_hf_chunk_activations` writes next to ``out_path`` (``acts.npy``):

* ``acts.npy`` -- float32, shape (n_layers_recorded, n_chunks, d_model); built in ``acts.npy.partial`` and
  renamed into place only when every chunk is done;
* ``acts.npy.progress.json`` -- chunks done so far, rewritten atomically after each flushed batch, removed on
  completion;
* ``acts.index.parquet`` -- one row per chunk: row, chunk_id, and offset when offsets are given;
* ``acts.meta.json`` -- the dict :func:`dump_hf_chunk_activations` returns.
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

from assocmem.activations.final_norm import final_norm_record
from assocmem.activations.hf_models import (
    LastPositionRecorder,
    dtype_name,
    final_norm_module,
    hf_layer_names,
    load_causal_lm,
    max_positions,
    resolve_dtype,
    resolve_layers,
    torch_device,
)
from assocmem.activations.splits import ChunkSplit, dump_splits, plan_splits
from assocmem.errors import AssocmemError
from assocmem.io import atomic_path, read_json, require_finite, write_json, write_parquet
from assocmem.progress import bar

_FORMAT_VERSION = 1
logger = logging.getLogger(__name__)


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
    """The files :func:`dump_hf_chunk_activations` writes for ``out_path`` (``acts.npy``)."""
    out = Path(out_path)
    stem = out.name[: -len(".npy")] if out.name.endswith(".npy") else out.name
    return {
        "npy": out,
        "partial": out.with_name(out.name + ".partial"),
        "progress": out.with_name(out.name + ".progress.json"),
        "index": out.with_name(stem + ".index.parquet"),
        "meta": out.with_name(stem + ".meta.json"),
    }


def dump_hf_chunk_activations(
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
        "dtype": dtype_name(next(model.parameters()).dtype),
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
    max_len, vocab = max_positions(model), int(model.config.vocab_size)
    out = np.lib.format.open_memmap(paths["partial"], mode="r+")
    chunk_len = int(chunks.shape[1]) if isinstance(chunks, np.ndarray | torch.Tensor) else None
    started, start_row = time.perf_counter(), done
    progress = bar(total=total, initial=done, unit="chunk", desc=f"activations {paths['npy'].name}",
                   disable=not show_progress)
    try:
        for first, batch in _iter_batches(chunks, done, batch_size):
            chunk_len = _check_batch(batch, first, total, chunk_len, max_len, vocab)
            states = recorder(torch.from_numpy(batch).to(device)).numpy()
            _check_states(states, signature, first)
            out[:, first : first + len(batch)] = states
            out.flush()
            done = first + len(batch)
            write_json(paths["progress"], {"done": done, "signature": signature})
            progress.update(len(batch))
    finally:
        progress.close()
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


def _check_states(states: np.ndarray, signature: dict[str, Any], first: int) -> None:
    """NaN or inf hidden states are refused, not written, naming the model and the chunks."""
    where = f"chunk rows {first}..{first + states.shape[1] - 1}"
    require_finite(states, f"hidden states of model {signature['model_name']} on {where}",
                   f"the model overflows in {signature['dtype']} (float32 avoids that) or its weights are not finite")


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


def dump_hf_activations(spec: dict[str, Any], acts: dict[str, Any], seed: int, store_dir: Path,
                        out_dir: Path) -> dict[str, Any]:
    """The paper's Fig. 2 protocol on a pretrained HF causal LM: last-position states of random chunks of the
    store's training split (``train.npy``), of its held-out split (``heldout.npy``) and the radius test's
    last-layer sample of the training split (``radius.npy``, ``activations.radius_chunks`` chunks)."""
    load_spec = {k: v for k, v in spec.items()
                 if k in ("name", "revision", "config", "local_files_only", "dtype", "device") and v is not None}
    model, info = load_causal_lm({**load_spec, "seed": seed})
    layers = "all" if acts["layers"] == "all" else "last"
    final_ln = spec["final_ln"]
    plan = plan_splits(store_dir, acts.get("heldout_split"), seed)
    meta = {"model": info, "sample_seed": seed, "final_ln": final_ln, "d_model": info["d_model"],
            "layers": hf_layer_names(resolve_layers(layers, info["n_layer"]), info["n_layer"], final_ln),
            "final_norm": final_norm_record(final_norm_module(model))}

    def dump_split(split: ChunkSplit) -> dict[str, Any]:
        chunks, offsets = split.store.random_chunks(acts["n_chunks"], acts["chunk_len"], split.seed)
        result = dump_hf_chunk_activations(model, chunks, out_dir / f"{split.name}.npy", layers=layers,
                                           final_ln=final_ln, batch_size=spec["batch_size"], offsets=offsets)
        return {"n_chunks": acts["n_chunks"], "chunk_len": acts["chunk_len"],
                "distinct_chunks": int(len(np.unique(offsets))), "layers": result["layers"]}

    def dump_radius(split: ChunkSplit) -> dict[str, Any]:
        count = acts["radius_chunks"]
        chunks, offsets = split.store.random_chunks(count, acts["chunk_len"], split.seed + 2)
        dump_hf_chunk_activations(model, chunks, out_dir / "radius.npy", layers="last", final_ln=final_ln,
                                  batch_size=spec["batch_size"], offsets=offsets)
        return {"n_chunks": count, "chunk_len": acts["chunk_len"], "distinct_chunks": int(len(np.unique(offsets))),
                "layer": meta["layers"][-1]}

    return dump_splits(plan, out_dir, meta, dump_split, dump_radius if acts.get("radius_chunks") else None)
