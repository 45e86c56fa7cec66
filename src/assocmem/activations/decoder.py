"""Dump the hidden states of the project's own :class:`~assocmem.model.DecoderLM` that predict the next token at
each chunk's last position (pretrained Hugging Face models: :mod:`assocmem.activations.hf`).

What a *chunk* is follows the store's batching:

* ``windows`` (text corpora; the paper's protocol): ``chunk_len`` consecutive tokens at a uniform random
  offset; the state at the last position is recorded.
* ``sequences`` (Question-Formation): the paper's chunks are 256-token windows of web text, but QF sequences are
  15-40 tokens long, so a chunk is a prefix ``s_0 .. s_p`` of one sequence, the sequence drawn uniformly from the
  split (for "train": from the rows the model was trained on) and ``p`` uniformly among positions that have a
  next token. Attention is causal, so the state at ``p`` of the full sequence equals the state of the prefix:
  whole sequences are run and the states gathered at ``p``. Short prefixes such as ``<sos> the`` are shared by
  many sequences, so exact duplicate chunks (and zero nearest-neighbour distances) are part of this data.

Output per split (``train``, ``heldout``): ``{split}.npy`` float32 of shape (n_layers_recorded, n_chunks,
d_model) and ``{split}.index.parquet`` (row, seq_row or offset, position, next_token); ``meta.json`` (written by
:func:`assocmem.activations.splits.dump_splits`) also holds ``final_norm``, the parameters of ``ln_f``. Layers are
named by :func:`assocmem.model.hidden_layer_names`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from assocmem.activations.final_norm import final_norm_record
from assocmem.activations.splits import ChunkSplit, dump_splits, plan_splits
from assocmem.errors import AssocmemError
from assocmem.footprint import check_activations_memory
from assocmem.io import require_finite, write_npy, write_parquet
from assocmem.model import DecoderLM, ModelConfig, hidden_layer_names
from assocmem.progress import bar
from assocmem.tokenstore import TokenStore, read_store_meta

ChunkBatch = tuple[np.ndarray, np.ndarray, np.ndarray]  # chunk rows, tokens (B, T), positions (B,)
SEQUENCE_CHUNKING = "prefix of one LM sequence ending at a uniform random position"


def sample_chunks(store: TokenStore, rows: np.ndarray, n_chunks: int, seed: int) -> pd.DataFrame:
    """Sequence chunks: (sequence row, end position), sequence uniform over ``rows``, position uniform within."""
    if len(rows) == 0:
        raise AssocmemError(f"no sequences to sample activation chunks from in {store.store_dir}")
    rng = np.random.default_rng(seed)
    seq_rows = rows[rng.integers(0, len(rows), size=n_chunks)]
    lengths = store.lengths()[seq_rows]
    positions = (rng.random(n_chunks) * (lengths - 1)).astype(np.int64)
    chunks = pd.DataFrame({"row": np.arange(n_chunks), "seq_row": seq_rows, "position": positions})
    chunks["next_token"] = store.tokens_at(store.offsets[seq_rows] + positions + 1)
    return chunks


def _sequence_batches(store: TokenStore, chunks: pd.DataFrame, batch_size: int) -> Iterator[ChunkBatch]:
    """Batches of chunks with similar end positions, each cut after its last end position: attention is causal, so
    the state at a position does not depend on the tokens after it, and no compute is spent on them."""
    positions = chunks["position"].to_numpy()
    order = np.lexsort((chunks["seq_row"].to_numpy(), positions))
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        tokens = store.padded_batch(chunks["seq_row"].to_numpy()[idx])
        yield idx, tokens[:, :int(positions[idx].max()) + 1], positions[idx]


def _window_batches(tokens: np.ndarray, batch_size: int) -> Iterator[ChunkBatch]:
    for start in range(0, len(tokens), batch_size):
        idx = np.arange(start, min(start + batch_size, len(tokens)))
        yield idx, tokens[idx], np.full(len(idx), tokens.shape[1] - 1)


@torch.no_grad()
def gather_states(model: DecoderLM, batches: Iterator[ChunkBatch], n_chunks: int, layer_ids: list[int],
                  desc: str) -> np.ndarray:
    out = np.empty((len(layer_ids), n_chunks, model.cfg.d_model), dtype=np.float32)
    device = next(model.parameters()).device
    progress = bar(total=n_chunks, desc=desc, unit="chunk")
    for idx, tokens, positions in batches:
        _, hidden = model(torch.from_numpy(tokens).to(device), return_hidden=True)
        arange, pos = torch.arange(len(idx), device=device), torch.from_numpy(positions).to(device)
        for slot, layer in enumerate(layer_ids):
            out[slot, idx] = hidden[layer][arange, pos].float().cpu().numpy()
        progress.update(len(idx))
    progress.close()
    return out


def check_decoder_activations_memory(shape: ModelConfig, acts: dict[str, Any], store_dir: Path, device: str,
                                     job: str) -> None:
    """Refuse the dump before its arrays are allocated when the model, one batch and the output cannot fit
    (:func:`assocmem.footprint.check_activations_memory`; a chunk is a whole sequence, up to ``max_len``, on a store
    of sequences, else ``chunk_len`` tokens)."""
    sequences = read_store_meta(store_dir).get("batching") == "sequences"
    length = shape.max_len if sequences else int(acts["chunk_len"])
    n_dumped = len(layer_selection(shape.n_layer, acts["layers"]))
    check_activations_memory(shape, acts, n_dumped, length, device, job)


def layer_selection(n_layer: int, layers: str) -> list[int]:
    names = hidden_layer_names(n_layer)
    return list(range(len(names))) if layers == "all" else [len(names) - 1]


def chunking_description(store: TokenStore, chunk_len: int) -> str:
    """What a chunk of ``store`` is, for ``meta.json``."""
    if store.batching == "sequences":
        return SEQUENCE_CHUNKING
    return f"random windows of {chunk_len} tokens, state at the last position"


def _chunk_split(model: DecoderLM, store: TokenStore, *, n_chunks: int, chunk_len: int, batch_size: int,
                 seed: int) -> tuple[pd.DataFrame, Iterator[ChunkBatch], dict[str, Any]]:
    if store.batching == "sequences":
        chunks = sample_chunks(store, np.arange(len(store)), n_chunks, seed)
        key = chunks["seq_row"].astype(str) + ":" + chunks["position"].astype(str)
        info = {"n_chunks": n_chunks, "distinct_chunks": int(key.nunique())}
        batches = _sequence_batches(store, chunks, batch_size)
    else:
        if chunk_len > model.cfg.max_len:
            raise AssocmemError(f"activations.chunk_len {chunk_len} exceeds the model's context {model.cfg.max_len}")
        tokens, offsets = store.random_chunks(n_chunks, chunk_len, seed)
        chunks = pd.DataFrame({"row": np.arange(n_chunks), "offset": offsets, "position": chunk_len - 1})
        info = {"n_chunks": n_chunks, "chunk_len": chunk_len, "distinct_chunks": int(len(np.unique(offsets)))}
        batches = _window_batches(tokens, batch_size)
    return chunks, batches, {**info, "chunking": chunking_description(store, chunk_len)}


def check_states(states: np.ndarray, model_name: str, split: str) -> None:
    """Refuse NaN or inf hidden states (a diverged model) instead of writing them, naming the model."""
    require_finite(states, f"the {split} hidden states of model {model_name}",
                   "the model diverged (its weights or activations overflow): retrain it with a lower train.lr or a "
                   "tighter train.grad_clip (the same settings give the same model), then rerun")


def dump_decoder_activations(model: DecoderLM, store_dir: Path, out_dir: Path, *, heldout_split: str | None,
                             n_chunks: int, chunk_len: int, layers: str, batch_size: int, seed: int,
                             label: str = "", radius_chunks: int | None = None,
                             checkpoint: str = "final", model_file: Path | None = None) -> dict[str, Any]:
    """Training chunks from the store's (subset's) train split, held-out chunks from ``heldout_split``
    (default: the store's held-out role), and the radius test's sample of ``radius_chunks`` training chunks (last
    layer; None: the training dump's); writes ``train``/``heldout``/``radius`` arrays, indexes and ``meta.json``,
    which names the ``checkpoint`` the model's weights come from ("best" or "final"). NaN or inf states are
    refused, naming ``model_file`` and ``label`` (:func:`check_states`)."""
    model_name = f"{model_file or '(given in memory)'}" + (f" ({label})" if label else "")
    model.eval()
    plan = plan_splits(store_dir, heldout_split, seed)
    layer_ids = layer_selection(model.cfg.n_layer, layers)
    names = hidden_layer_names(model.cfg.n_layer)
    meta = {"layers": [names[i] for i in layer_ids], "d_model": model.cfg.d_model, "checkpoint": checkpoint,
            "chunking": chunking_description(plan.train.store, chunk_len),
            "final_norm": final_norm_record(model.ln_f)}

    def dump_split(split: ChunkSplit) -> dict[str, Any]:
        chunks, batches, info = _chunk_split(model, split.store, n_chunks=n_chunks, chunk_len=chunk_len,
                                             batch_size=batch_size, seed=split.seed)
        states = gather_states(model, batches, n_chunks, layer_ids, desc=f"activations {label} {split.name}".strip())
        check_states(states, model_name, split.name)
        write_npy(out_dir / f"{split.name}.npy", states)
        write_parquet(out_dir / f"{split.name}.index.parquet", chunks)
        return info

    def dump_radius(split: ChunkSplit) -> dict[str, Any]:
        chunks, batches, info = _chunk_split(model, split.store, n_chunks=radius_chunks, chunk_len=chunk_len,
                                             batch_size=batch_size, seed=split.seed + 2)
        states = gather_states(model, batches, radius_chunks, [len(names) - 1],
                               desc=f"activations {label} radius".strip())
        check_states(states, model_name, "radius")
        write_npy(out_dir / "radius.npy", states)
        write_parquet(out_dir / "radius.index.parquet", chunks)
        return {**info, "layer": names[-1]}

    return dump_splits(plan, out_dir, meta, dump_split, dump_radius if radius_chunks else None)
