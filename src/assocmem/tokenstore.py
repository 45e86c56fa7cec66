"""The one on-disk token format every dataset is normalised into, and random access to it.

A store directory holds

* ``meta.json`` -- the one meta file readers use: token ``dtype`` (see :func:`token_dtype`), ``vocab_size``,
  special ids (``eot_id``, ``pad_id``), the tokenizer, ``batching`` (``sequences``: every document is one
  training example, padded; ``windows``: nanoGPT-style random windows over the token stream), ``roles``
  (which split validates training, which one gives held-out activations), and per split its shards,
  ``n_tokens``, ``n_docs`` and length statistics; optionally ``loss_from`` (``sequences`` stores: the tokens of a
  document before this position are context, never scored as targets; absent: 0, every token after the first);
* ``{split}_{i:05d}.bin`` -- flat little-endian token ids, one end-of-text id after every document (for
  Question-Formation the end-of-text id is ``<eos>``, so a document is exactly one LM sequence);
* ``{split}_{i:05d}.json`` and ``{split}_meta.json`` -- the streaming writer's per-shard and per-split
  records (:mod:`assocmem.tokenwriter`), which let an interrupted tokenization resume;
* ``{split}.offsets.npy`` -- int64 document boundaries (``sequences`` stores only): document i is
  ``tokens[offsets[i]:offsets[i + 1]]``.

A *view* (a training subset, :mod:`assocmem.subsets`) is a directory whose ``meta.json`` has a ``view``
entry: its listed splits are token prefixes of the parent's, every other split is the parent's own.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from assocmem.errors import AssocmemError
from assocmem.io import read_json, sha256_file

FORMAT = "assocmem-tokens"
FORMAT_VERSION = 2
META_NAME = "meta.json"
BATCHING = ("sequences", "windows")
VERIFY_BELOW_BYTES = 64 << 20  # shards of a split smaller than this in total are sha256-checked on open
FLAT_BATCH_TOKENS = 1 << 23  # a sequences split up to this size (64 MiB as int64) is gathered from memory


def token_dtype(vocab_size: int) -> np.dtype:
    """The one dtype rule: little-endian uint16 while every id fits (ids 0..65535), else uint32."""
    if vocab_size < 1:
        raise AssocmemError(f"vocab_size must be positive, got {vocab_size}")
    return np.dtype("<u2") if vocab_size <= 65536 else np.dtype("<u4")


def shard_stem(split: str, index: int) -> str:
    return f"{split}_{index:05d}"


def shard_bin_path(store_dir: str | os.PathLike[str], split: str, index: int) -> Path:
    return Path(store_dir) / f"{shard_stem(split, index)}.bin"


def shard_json_path(store_dir: str | os.PathLike[str], split: str, index: int) -> Path:
    return Path(store_dir) / f"{shard_stem(split, index)}.json"


def split_record_path(store_dir: str | os.PathLike[str], split: str) -> Path:
    """The streaming writer's record of a finished split (shards, counts); folded into meta.json."""
    return Path(store_dir) / f"{split}_meta.json"


def offsets_path(store_dir: str | os.PathLike[str], split: str) -> Path:
    return Path(store_dir) / f"{split}.offsets.npy"


def meta_path(store_dir: str | os.PathLike[str]) -> Path:
    return Path(store_dir) / META_NAME


def rebuild_hint(path: Path) -> str:
    from assocmem.rerun import forcerun_command, rerun_command

    return (f"rebuild it: delete {path.parent} and rerun `{rerun_command()}` (or `{forcerun_command('tokenize')}` / "
            "`--forcerun subsets`)")


def read_store_meta(store_dir: str | os.PathLike[str]) -> dict[str, Any]:
    path = meta_path(store_dir)
    if not path.exists():
        raise AssocmemError(f"no token store at {store_dir}: {path.name} is missing; {rebuild_hint(path)}")
    meta = read_json(path)
    if meta.get("format") != FORMAT or meta.get("format_version") != FORMAT_VERSION:
        raise AssocmemError(f"{path}: format {meta.get('format')!r} version {meta.get('format_version')!r}, "
                            f"expected {FORMAT!r} version {FORMAT_VERSION}; {rebuild_hint(path)}")
    return meta


def verify_shard(store_dir: str | os.PathLike[str], record: dict[str, Any], *, check_sha256: bool) -> bool:
    """True when the shard file named by ``record`` exists with the recorded size (and hash)."""
    path = Path(store_dir) / record["file"]
    if not path.exists():
        return False
    if path.stat().st_size != record["tokens"] * np.dtype(record["dtype"]).itemsize:
        return False
    return not check_sha256 or sha256_file(path) == record["sha256"]


class TokenStore:
    """Memory-mapped, read-only access to one split of a token store (or of a view of one)."""

    def __init__(self, store_dir: str | os.PathLike[str], split: str = "train",
                 meta: dict[str, Any] | None = None) -> None:
        """``meta`` lets the writer read a store before its meta.json is written."""
        self.store_dir = Path(store_dir)
        self.split = split
        self.meta = read_store_meta(self.store_dir) if meta is None else meta
        self.dtype = np.dtype(self.meta["dtype"])
        self.vocab_size = int(self.meta["vocab_size"])
        self.eot_id = int(self.meta["eot_id"])
        self.pad_id = self.meta.get("pad_id")
        view = self.meta.get("view")
        self._parent: TokenStore | None = None
        self._offsets: np.ndarray | None = None
        self._flat: np.ndarray | None = None  # the split's tokens in memory, for batches of small stores
        if view is not None and split not in view["splits"]:  # a split the view leaves untouched
            self._init_parent(view, split, None)
            self.info = self._parent.info
        elif view is not None:
            self.info = view["splits"][split]
            self._init_parent(view, split, int(self.info["n_tokens"]))
        else:
            if split not in self.meta["splits"]:
                raise AssocmemError(f"split {split!r} not found in {meta_path(self.store_dir)} "
                                    f"(it has {sorted(self.meta['splits'])})")
            self.info = self.meta["splits"][split]
            self._init_shards()
        self.n_tokens = int(self.info["n_tokens"])
        self.n_docs = int(self.info["n_docs"])

    def _init_parent(self, view: dict[str, Any], split: str, n_tokens: int | None) -> None:
        self._parent = TokenStore((self.store_dir / view["parent"]).resolve(), split)
        if n_tokens is not None and n_tokens > self._parent.n_tokens:
            path = meta_path(self.store_dir)
            raise AssocmemError(f"{path}: view of {split!r} ends at token {n_tokens} but the parent has only "
                                f"{self._parent.n_tokens}; {rebuild_hint(path)}")

    def _init_shards(self) -> None:
        self._shards = [self._open_shard(record) for record in self.info["shards"]]
        if sum(record["tokens"] for record in self.info["shards"]) * self.dtype.itemsize < VERIFY_BELOW_BYTES:
            self.verify()  # cheap here, and catches a shard whose bytes changed but not its size
        sizes = [len(shard) for shard in self._shards]
        self._starts = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(np.int64)
        if int(self._starts[-1]) != int(self.info["n_tokens"]):
            raise AssocmemError(f"{meta_path(self.store_dir)}: split {self.split!r} says {self.info['n_tokens']} "
                                f"tokens but its shards hold {int(self._starts[-1])}; "
                                f"{rebuild_hint(meta_path(self.store_dir))}")

    def _open_shard(self, record: dict[str, Any]) -> np.ndarray:
        path = self.store_dir / record["file"]
        if not verify_shard(self.store_dir, record, check_sha256=False):
            raise AssocmemError(f"corrupt token store: shard {path} is missing or has the wrong size (expected "
                                f"{record['tokens']} tokens of {record['dtype']}); {rebuild_hint(path)}")
        return np.memmap(path, dtype=self.dtype, mode="r") if record["tokens"] else np.zeros(0, self.dtype)

    # ------------------------------------------------------------------ whole-store properties

    @property
    def batching(self) -> str:
        return self.meta["batching"]

    @property
    def roles(self) -> dict[str, str]:
        return self.meta["roles"]

    @property
    def loss_tokens(self) -> str:
        return self.meta["loss_tokens"]

    @property
    def loss_from(self) -> int:
        """The first position of a document whose token is a scored target (0: every token after the first)."""
        return int(self.meta.get("loss_from", 0))

    def __len__(self) -> int:
        """Number of documents (sequences)."""
        return self.n_docs

    def verify(self) -> None:
        """Recompute every shard's sha256 and compare it with its record (raises AssocmemError)."""
        if self._parent is not None:
            self._parent.verify()
            return
        for record in self.info["shards"]:
            if not verify_shard(self.store_dir, record, check_sha256=True):
                raise AssocmemError(f"corrupt token store: shard {self.store_dir / record['file']} fails its sha256 "
                                    f"check; {rebuild_hint(self.store_dir / record['file'])}")

    # ------------------------------------------------------------------ token windows (the stream view)

    def window(self, global_offset: int, length: int) -> np.ndarray:
        """Tokens ``[global_offset, global_offset + length)`` as a fresh int64 array (may span shards)."""
        global_offset, length = int(global_offset), int(length)
        if global_offset < 0 or length < 0 or global_offset + length > self.n_tokens:
            raise IndexError(f"window [{global_offset}, {global_offset + length}) outside [0, {self.n_tokens})")
        if self._parent is not None:
            return self._parent.window(global_offset, length)
        out = np.empty(length, dtype=np.int64)
        shard = int(np.searchsorted(self._starts, global_offset, side="right")) - 1
        filled = 0
        while filled < length:
            local = global_offset + filled - int(self._starts[shard])
            take = min(length - filled, len(self._shards[shard]) - local)
            out[filled:filled + take] = self._shards[shard][local:local + take]
            filled += take
            shard += 1
        return out

    def tokens_at(self, positions: np.ndarray) -> np.ndarray:
        """The tokens at global ``positions`` (any shape) as a fresh int64 array of that shape, one gather per shard:
        for scattered single tokens (an activation dump's next tokens), where a :meth:`sequence` read per token is a
        Python call each. Whole windows copy faster as slices (:meth:`window`)."""
        positions = np.asarray(positions, dtype=np.int64)
        if positions.size and (positions.min() < 0 or positions.max() >= self.n_tokens):
            raise IndexError(f"token position outside [0, {self.n_tokens}) in {self.store_dir} ({self.split})")
        if self._parent is not None:
            return self._parent.tokens_at(positions)
        flat = positions.reshape(-1)
        out = np.empty(flat.shape, dtype=np.int64)
        shard_of = np.searchsorted(self._starts, flat, side="right") - 1
        for shard in np.unique(shard_of):
            at = shard_of == shard
            out[at] = self._shards[shard][flat[at] - self._starts[shard]]
        return out.reshape(positions.shape)

    def sample_windows(self, rng: np.random.Generator, batch_size: int,
                       block_size: int) -> tuple[np.ndarray, np.ndarray]:
        """nanoGPT ``get_batch``: uniform offsets i; x = tok[i:i+T], y = tok[i+1:i+1+T]; int64 (B, T)."""
        if self.n_tokens <= block_size:
            raise AssocmemError(f"split {self.split!r} in {self.store_dir} has {self.n_tokens} tokens, "
                                f"too few for block_size {block_size}")
        offsets = rng.integers(0, self.n_tokens - block_size, size=batch_size)
        rows = np.stack([self.window(offset, block_size + 1) for offset in offsets])
        return rows[:, :-1].copy(), rows[:, 1:].copy()

    def random_chunks(self, n_chunks: int, chunk_len: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """``n_chunks`` windows of ``chunk_len`` tokens at independent uniform offsets (with replacement).

        Returns (chunks int64 (n_chunks, chunk_len), offsets int64 (n_chunks,)), reproducible from ``seed``.
        """
        if self.n_tokens < chunk_len:
            raise AssocmemError(f"split {self.split!r} in {self.store_dir} has {self.n_tokens} tokens, "
                                f"too few for chunk_len {chunk_len}")
        rng = np.random.default_rng(seed)
        offsets = rng.integers(0, self.n_tokens - chunk_len + 1, size=n_chunks).astype(np.int64)
        chunks = np.empty((n_chunks, chunk_len), dtype=np.int64)
        for row, offset in enumerate(offsets):
            chunks[row] = self.window(offset, chunk_len)
        return chunks, offsets

    # ------------------------------------------------------------------ documents (the sequence view)

    @property
    def offsets(self) -> np.ndarray:
        """int64 (n_docs + 1,) document boundaries; only ``sequences`` stores record them."""
        if self._offsets is None:
            self._offsets = self._load_offsets()
        return self._offsets

    def _load_offsets(self) -> np.ndarray:
        if self._parent is not None:
            return self._parent.offsets[: self.n_docs + 1]
        path = offsets_path(self.store_dir, self.split)
        if not path.exists():
            raise AssocmemError(f"{path} is missing: document offsets exist only in 'sequences' stores "
                                f"(this one batches {self.batching!r}); {rebuild_hint(path)}")
        offsets = np.load(path)
        if offsets.shape != (self.n_docs + 1,) or int(offsets[-1]) != self.n_tokens:
            raise AssocmemError(f"corrupt token store: {path} has shape {offsets.shape} ending at "
                                f"{int(offsets[-1]) if len(offsets) else None}, but the split has {self.n_docs} "
                                f"documents and {self.n_tokens} tokens; {rebuild_hint(path)}")
        return offsets

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def sequence(self, i: int) -> np.ndarray:
        start, stop = self.offsets[i], self.offsets[i + 1]
        return self.window(int(start), int(stop - start))

    def padded_batch(self, indices: Sequence[int]) -> np.ndarray:
        """The sequences ``indices`` as rows of an int64 array, right-padded with the pad id to the longest."""
        if self.pad_id is None:
            raise AssocmemError(f"{meta_path(self.store_dir)} has no pad id: padded batches need a sequences store")
        if self.n_tokens <= FLAT_BATCH_TOKENS and len(indices):
            return self._gathered_batch(np.asarray(indices, dtype=np.int64))
        seqs = [self.sequence(int(i)) for i in indices]
        width = max(len(s) for s in seqs)
        batch = np.full((len(seqs), width), int(self.pad_id), dtype=np.int64)
        for row, seq in enumerate(seqs):
            batch[row, :len(seq)] = seq
        return batch

    def _gathered_batch(self, indices: np.ndarray) -> np.ndarray:
        """padded_batch in one gather from the split held in memory: a Python loop over the rows cost ~10% of a
        tiny model's training step."""
        if self._flat is None:
            self._flat = self.window(0, self.n_tokens)
        if indices.min() < 0 or indices.max() >= self.n_docs:
            raise IndexError(f"sequence index outside [0, {self.n_docs}) in {self.store_dir} ({self.split})")
        starts = self.offsets[indices]
        lengths = self.offsets[indices + 1] - starts
        columns = np.arange(int(lengths.max()))
        inside = columns < lengths[:, None]
        batch = np.full(inside.shape, int(self.pad_id), dtype=np.int64)
        batch[inside] = self._flat[(starts[:, None] + columns)[inside]]
        return batch


def document_offsets(store: TokenStore) -> np.ndarray:
    """Document boundaries found by scanning for end-of-text ids (each document ends with exactly one)."""
    ends = []
    position = 0
    chunk = 1 << 22
    while position < store.n_tokens:
        length = min(chunk, store.n_tokens - position)
        ends.append(position + 1 + np.flatnonzero(store.window(position, length) == store.eot_id))
        position += length
    found = np.concatenate([[0], *ends]).astype(np.int64)
    if len(found) != store.n_docs + 1 or (store.n_tokens and found[-1] != store.n_tokens):
        raise AssocmemError(f"{store.store_dir}: split {store.split!r} has {len(found) - 1} end-of-text ids for "
                            f"{store.n_docs} documents; a document may contain the end-of-text id")
    return found


def split_statistics(store: TokenStore) -> dict[str, Any]:
    """Length statistics of a sequences split (max and mean document length in tokens)."""
    lengths = store.lengths()
    return {"max_len": int(lengths.max()) if len(lengths) else 0,
            "mean_len": float(lengths.mean()) if len(lengths) else 0.0}


def data_fingerprint(store: TokenStore) -> str:
    """sha256 naming the exact tokens a store (or view) serves: every split's shard hashes, and the view's cut."""
    meta = store._parent.meta if store._parent is not None else store.meta
    shards = {split: [record["sha256"] for record in info.get("shards", [])]
              for split, info in meta.get("splits", {}).items()}
    view = store.meta.get("view", {}).get("splits")
    return hashlib.sha256(json.dumps({"shards": shards, "view": view}, sort_keys=True).encode()).hexdigest()
