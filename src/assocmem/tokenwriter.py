"""Streaming, multiprocess, resumable tokenization of a document stream into a token store
(:mod:`assocmem.tokenstore`); every dataset, Question-Formation and text corpora alike, is written through here.

Memory stays bounded whatever the corpus size: documents are read lazily in batches of ``batch_docs``, at
most ``max_in_flight`` batches are being encoded at any time, and token ids go straight from the worker's
result into the open shard file. Shards are closed at document boundaries once they hold at least
``shard_tokens`` tokens, so shard ``i`` covers whole documents ``[doc_start, doc_end)`` and a rerun can skip
finished shards and restart the first unfinished one from its first document. The output is byte-identical
whatever ``num_proc`` and ``batch_docs`` are.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import logging
import multiprocessing
import os
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from assocmem.errors import AssocmemError
from assocmem.io import atomic_path, read_json, write_json, write_npy
from assocmem.progress import bar
from assocmem.tokenstore import (
    BATCHING,
    FORMAT,
    FORMAT_VERSION,
    TokenStore,
    document_offsets,
    offsets_path,
    shard_bin_path,
    shard_json_path,
    shard_stem,
    split_record_path,
    split_statistics,
    token_dtype,
    verify_shard,
)

log = logging.getLogger(__name__)

ShardHook = Callable[[dict[str, Any]], None]


class Tokenizer(ABC):
    """What the writer needs of a tokenizer: ``encode_batch``, ``eot_id``, ``vocab_size``, ``name``.

    Tokenizers are picklable: pickling keeps the spec only and the receiving process rebuilds the backend,
    which is how worker processes get theirs.
    """

    name: str
    vocab_size: int
    eot_id: int
    pad_id: int | None = None

    def __init__(self, spec: dict[str, Any], num_threads: int | None = None) -> None:
        self.spec = dict(spec)
        # None: the backend parallelises a batch itself; 1: encode sequentially (inside worker processes).
        self.num_threads = num_threads
        self._build()

    @abstractmethod
    def _build(self) -> None: ...

    @abstractmethod
    def encode_batch(self, texts: list[str]) -> list[list[int]]: ...

    @abstractmethod
    def decode(self, ids: list[int]) -> str: ...

    def with_threads(self, num_threads: int | None) -> Tokenizer:
        clone = copy.copy(self)
        clone.num_threads = num_threads
        return clone

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "vocab_size": self.vocab_size, "eot_id": self.eot_id, "spec": self.spec}

    def __getstate__(self) -> dict[str, Any]:
        return {"spec": self.spec, "num_threads": self.num_threads}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.spec = state["spec"]
        self.num_threads = state["num_threads"]
        self._build()


def tokenize_corpus(
    docs: Iterable[str],
    tokenizer: Tokenizer,
    out_dir: str | os.PathLike[str],
    *,
    split: str = "train",
    num_proc: int = 1,
    shard_tokens: int = 100_000_000,
    batch_docs: int = 256,
    resume: bool = True,
    max_in_flight: int | None = None,
    source: dict[str, Any] | None = None,
    on_shard_done: ShardHook | None = None,
    progress: bool = True,
    total_docs: int | None = None,
    start_method: str = "spawn",
) -> dict[str, Any]:
    """Tokenize ``docs`` (texts in the fixed document order) into ``out_dir/{split}_*.bin`` shards.

    Returns the split's metadata (written to ``{split}_meta.json`` without its ``run`` statistics, which include
    ``tokens_per_s`` for the tokens encoded by this call. ``source`` is recorded verbatim (e.g. the corpus
    order metadata from :func:`assocmem.corpus.load.prepare_corpus`); resuming with a different ``source`` or
    tokenizer is refused. ``on_shard_done(record)`` is called after each shard is finalised (tests use it to
    simulate a crash). Each worker encodes single-threaded, so ``num_proc`` is the whole parallelism.
    ``total_docs`` only sizes the progress bar (``len(docs)`` is used when ``docs`` has a length).
    """
    if shard_tokens < 1 or batch_docs < 1 or num_proc < 1:
        raise AssocmemError("tokenize_corpus needs shard_tokens, batch_docs and num_proc >= 1")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    config = _shard_config(tokenizer, split, shard_tokens, source)
    if resume and (done := _completed_meta(out_dir, split, config)) is not None:
        log.info("split %r in %s is already tokenized (%d tokens)", split, out_dir, done["n_tokens"])
        return {**done, "run": {"skipped": True}}
    finished = _finished_shards(out_dir, split, config) if resume else []
    split_record_path(out_dir, split).unlink(missing_ok=True)  # the shards are about to change under it
    _remove_stale_temporaries(out_dir, split)
    started = time.perf_counter()
    shards, new_tokens, new_docs = _write_shards(
        docs, tokenizer, out_dir, config, finished,
        num_proc=num_proc, batch_docs=batch_docs, max_in_flight=max_in_flight or 2 * num_proc + 2,
        on_shard_done=on_shard_done, progress=progress, total_docs=total_docs, start_method=start_method,
    )
    elapsed = time.perf_counter() - started
    _remove_stale_shards(out_dir, split, keep=len(shards))
    run = {
        "elapsed_s": elapsed, "new_tokens": new_tokens, "new_docs": new_docs, "num_proc": num_proc,
        "resumed_shards": len(finished), "tokens_per_s": new_tokens / elapsed if elapsed > 0 else 0.0,
    }
    meta = _split_meta(config, shards, source)
    write_json(split_record_path(out_dir, split), meta)  # reproducible: the run's timing is returned, not stored
    meta = {**meta, "run": run}
    log.info(
        "tokenized split %r: %d docs, %d tokens in %d shards; %.0f tokens/s (%d new tokens, %d workers)",
        split, meta["n_docs"], meta["n_tokens"], len(shards), run["tokens_per_s"], new_tokens, num_proc,
    )
    return meta


def encode_documents(
    tokenizer: Tokenizer, dtype: np.dtype, texts: list[str]
) -> tuple[np.ndarray, np.ndarray, bytes]:
    """Encode a batch: (flat tokens with EOT after each document, per-document lengths, concatenated sha256
    digests of each document's UTF-8 text)."""
    encoded = tokenizer.encode_batch(texts)
    lengths = np.fromiter((len(ids) + 1 for ids in encoded), dtype=np.int64, count=len(encoded))
    flat = np.empty(int(lengths.sum()), dtype=np.int64)
    ends = np.cumsum(lengths)
    for ids, end, length in zip(encoded, ends, lengths, strict=True):
        flat[end - length:end - 1] = ids
        flat[end - 1] = tokenizer.eot_id
    if flat.size and (flat.min() < 0 or flat.max() > np.iinfo(dtype).max):
        raise AssocmemError(
            f"tokenizer {tokenizer.name} produced an id outside {dtype} "
            f"(is its vocab_size {tokenizer.vocab_size} wrong?)"
        )
    digests = b"".join(hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest() for text in texts)
    return flat.astype(dtype), lengths, digests


def ordered_bounded_map(
    executor: Executor, func: Callable[[Any], Any], items: Iterable[Any], max_in_flight: int
) -> Iterator[Any]:
    """Ordered ``imap`` with back-pressure: at most ``max_in_flight`` tasks submitted and not yet consumed.

    ``Pool.imap`` and ``Executor.map`` read their input ahead without bound (and ``Pool.imap`` also queues
    results without bound); this keeps memory proportional to ``max_in_flight`` batches instead.
    """
    pending: deque[Future[Any]] = deque()
    for item in items:
        pending.append(executor.submit(func, item))
        if len(pending) >= max_in_flight:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()


_worker_state: dict[str, Any] = {}


def _init_worker(tokenizer: Tokenizer, dtype_str: str) -> None:
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _worker_state["tokenizer"] = tokenizer.with_threads(1)
    _worker_state["dtype"] = np.dtype(dtype_str)


def _worker_encode(texts: list[str]) -> tuple[np.ndarray, np.ndarray, bytes]:
    return encode_documents(_worker_state["tokenizer"], _worker_state["dtype"], texts)


def _encoded_batches(
    batches: Iterable[list[str]], tokenizer: Tokenizer, dtype: np.dtype, *,
    num_proc: int, max_in_flight: int, start_method: str, stack: contextlib.ExitStack,
) -> Iterator[tuple[np.ndarray, np.ndarray, bytes]]:
    if num_proc == 1:
        single = tokenizer.with_threads(1)
        return (encode_documents(single, dtype, batch) for batch in batches)
    # A process pool executor rather than multiprocessing.Pool: if a worker dies (OOM killer, segfault) the
    # run fails with BrokenProcessPool instead of waiting forever for the lost batch.
    executor = ProcessPoolExecutor(
        num_proc, mp_context=multiprocessing.get_context(start_method), initializer=_init_worker,
        initargs=(tokenizer, dtype.str),
    )
    stack.callback(executor.shutdown, wait=True, cancel_futures=True)
    return _reraise_broken_pool(ordered_bounded_map(executor, _worker_encode, batches, max_in_flight))


def _reraise_broken_pool(results: Iterator[Any]) -> Iterator[Any]:
    try:
        yield from results
    except BrokenProcessPool as err:
        raise AssocmemError(
            f"a tokenizer worker process died ({err}): killed for memory (lower batch_docs or num_proc and "
            "rerun; finished shards are kept), or, with start_method 'spawn', the calling script lacks an "
            "`if __name__ == '__main__':` guard"
        ) from err


def _batched(items: Iterable[str], size: int) -> Iterator[list[str]]:
    iterator = iter(items)
    while batch := list(islice(iterator, size)):
        yield batch


class _ShardWriter:
    """Appends documents to one shard's temporary file; ``finish`` renames it into place, writes its JSON."""

    def __init__(self, out_dir: Path, config: dict[str, Any], index: int, doc_start: int, token_start: int):
        self.out_dir, self.config, self.index = out_dir, config, index
        self.doc_start, self.token_start = doc_start, token_start
        self.n_docs = 0
        self.n_tokens = 0
        self._file_hash = hashlib.sha256()
        self._docs_hash = hashlib.sha256()
        self._stack = contextlib.ExitStack()
        temp = self._stack.enter_context(atomic_path(shard_bin_path(out_dir, config["split"], index)))
        self._handle = self._stack.enter_context(open(temp, "wb"))  # noqa: SIM115 - closed by finish/abort

    def append(self, tokens: np.ndarray, n_docs: int, digests: bytes) -> None:
        data = tokens.tobytes()
        self._handle.write(data)
        self._file_hash.update(data)
        self._docs_hash.update(digests)
        self.n_tokens += len(tokens)
        self.n_docs += n_docs

    def finish(self) -> dict[str, Any]:
        self._stack.close()  # closes the file, then renames the temporary onto the shard path
        record = {
            **self.config,
            "index": self.index,
            "file": f"{shard_stem(self.config['split'], self.index)}.bin",
            "tokens": self.n_tokens,
            "token_start": self.token_start,
            "doc_start": self.doc_start,
            "doc_end": self.doc_start + self.n_docs,
            "sha256": self._file_hash.hexdigest(),
            "docs_sha256": self._docs_hash.hexdigest(),
        }
        write_json(shard_json_path(self.out_dir, self.config["split"], self.index), record)
        return record

    def abort(self) -> None:
        with contextlib.suppress(AssocmemError):
            self._stack.__exit__(AssocmemError, AssocmemError("aborted"), None)  # deletes the temporary


class _ShardSink:
    """Routes encoded batches into consecutive shards, closing each after the document that fills it."""

    def __init__(self, out_dir: Path, config: dict[str, Any], finished: list[dict[str, Any]],
                 on_shard_done: ShardHook | None) -> None:
        self.out_dir, self.config, self.on_shard_done = out_dir, config, on_shard_done
        self.shards = list(finished)
        self.next_doc, self.next_token = _end_of(finished)
        self.writer: _ShardWriter | None = None

    def add_batch(self, flat: np.ndarray, lengths: np.ndarray, digests: bytes) -> None:
        ends = np.cumsum(lengths)
        first = 0  # first document of the batch not yet written
        while first < len(lengths):
            if self.writer is None:
                self.writer = _ShardWriter(self.out_dir, self.config, len(self.shards), self.next_doc,
                                           self.next_token)
            written_before = int(ends[first - 1]) if first else 0
            need = self.config["shard_tokens"] - self.writer.n_tokens
            # first document at which the shard reaches shard_tokens (or the batch's last document)
            last = min(int(np.searchsorted(ends - written_before, need, side="left")), len(lengths) - 1)
            chunk = flat[written_before:int(ends[last])]
            self.writer.append(chunk, last + 1 - first, digests[32 * first:32 * (last + 1)])
            self.next_doc += last + 1 - first
            self.next_token += len(chunk)
            first = last + 1
            if self.writer.n_tokens >= self.config["shard_tokens"]:
                self._finish()

    def close(self) -> None:
        if self.writer is not None and self.writer.n_docs:
            self._finish()

    def abort(self) -> None:
        if self.writer is not None:
            self.writer.abort()
            self.writer = None

    def _finish(self) -> None:
        assert self.writer is not None
        record = self.writer.finish()
        self.writer = None
        self.shards.append(record)
        if self.on_shard_done is not None:
            self.on_shard_done(record)


def _write_shards(
    docs: Iterable[str], tokenizer: Tokenizer, out_dir: Path, config: dict[str, Any],
    finished: list[dict[str, Any]], *, num_proc: int, batch_docs: int, max_in_flight: int,
    on_shard_done: ShardHook | None, progress: bool, total_docs: int | None, start_method: str,
) -> tuple[list[dict[str, Any]], int, int]:
    sink = _ShardSink(out_dir, config, finished, on_shard_done)
    first_doc, first_token = sink.next_doc, sink.next_token
    remaining = islice(iter(docs), first_doc, None)  # resume: skip the documents of finished shards
    total = len(docs) if hasattr(docs, "__len__") else total_docs  # type: ignore[arg-type]
    with contextlib.ExitStack() as stack, bar(
        total=total, initial=first_doc, unit="doc", disable=not progress, desc=f"tokenize {config['split']}"
    ) as docs_bar:
        batches = _encoded_batches(
            _batched(remaining, batch_docs), tokenizer, np.dtype(config["dtype"]),
            num_proc=num_proc, max_in_flight=max_in_flight, start_method=start_method, stack=stack,
        )
        try:
            for flat, lengths, digests in batches:
                sink.add_batch(flat, lengths, digests)
                docs_bar.update(len(lengths))
                docs_bar.set_postfix(tokens=sink.next_token, refresh=False)
            sink.close()
        finally:
            sink.abort()
    return sink.shards, sink.next_token - first_token, sink.next_doc - first_doc


def _shard_config(
    tokenizer: Tokenizer, split: str, shard_tokens: int, source: dict[str, Any] | None
) -> dict[str, Any]:
    """Settings every shard records; resuming with different settings is refused."""
    source_json = json.dumps(source, sort_keys=True, default=str)
    return {
        "format_version": FORMAT_VERSION,
        "split": split,
        "dtype": token_dtype(tokenizer.vocab_size).str,
        "vocab_size": tokenizer.vocab_size,
        "eot_id": tokenizer.eot_id,
        "tokenizer": tokenizer.name,
        "shard_tokens": shard_tokens,
        "source_sha256": hashlib.sha256(source_json.encode()).hexdigest(),
    }


def _finished_shards(out_dir: Path, split: str, config: dict[str, Any]) -> list[dict[str, Any]]:
    """Leading run of shards whose JSON exists, matches ``config`` and whose file has the recorded size."""
    finished: list[dict[str, Any]] = []
    while (path := shard_json_path(out_dir, split, len(finished))).exists():
        record = read_json(path)
        mismatched = {key for key in config if record.get(key) != config[key]}
        if mismatched:
            raise AssocmemError(
                f"{path} was written with different settings ({sorted(mismatched)}): delete the split's "
                f"files in {out_dir} or pass resume=False"
            )
        contiguous = (record["doc_start"], record["token_start"]) == _end_of(finished)
        if not contiguous or not verify_shard(out_dir, record, check_sha256=False):
            break  # damaged, or left over from an interrupted rerun: redo it and everything after it
        finished.append(record)
    return finished


def _end_of(shards: list[dict[str, Any]]) -> tuple[int, int]:
    """(first document, first token) after the given consecutive shards."""
    if not shards:
        return 0, 0
    return shards[-1]["doc_end"], shards[-1]["token_start"] + shards[-1]["tokens"]


def _completed_meta(out_dir: Path, split: str, config: dict[str, Any]) -> dict[str, Any] | None:
    path = split_record_path(out_dir, split)
    if not path.exists():
        return None
    meta = read_json(path)
    if any(meta.get(key) != value for key, value in config.items() if key != "split"):
        return None
    if not all(verify_shard(out_dir, record, check_sha256=False) for record in meta["shards"]):
        return None
    return meta


def _split_meta(config: dict[str, Any], shards: list[dict[str, Any]], source: dict[str, Any] | None) -> dict[str, Any]:
    order = hashlib.sha256("".join(record["docs_sha256"] for record in shards).encode()).hexdigest()
    return {
        **config,
        "n_tokens": sum(record["tokens"] for record in shards),
        "n_docs": shards[-1]["doc_end"] if shards else 0,
        "shards": shards,
        # sha256 over the shards' docs_sha256 (each: sha256 of the concatenated per-document text sha256s)
        "order_sha256": order,
        "source": source,
    }


def _remove_stale_temporaries(out_dir: Path, split: str) -> None:
    for temp in out_dir.glob(f".{split}_[0-9]*.tmp"):
        temp.unlink(missing_ok=True)


def _remove_stale_shards(out_dir: Path, split: str, keep: int) -> None:
    index = keep
    while shard_json_path(out_dir, split, index).exists() or shard_bin_path(out_dir, split, index).exists():
        log.info("removing stale shard %s from an earlier run", shard_stem(split, index))
        shard_json_path(out_dir, split, index).unlink(missing_ok=True)
        shard_bin_path(out_dir, split, index).unlink(missing_ok=True)
        index += 1


def finish_store(out_dir: str | os.PathLike[str], splits: list[str], tokenizer: Tokenizer, *, batching: str,
                 roles: dict[str, str], loss_tokens: str, extra: dict[str, Any] | None = None,
                 split_extra: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """Fold the finished splits' records into the store's ``meta.json`` (the file readers use).

    ``sequences`` stores also get ``{split}.offsets.npy`` (document boundaries found from the end-of-text
    ids) and per-split length statistics. ``roles`` names the ``validation`` and ``heldout`` splits.
    """
    if batching not in BATCHING:
        raise AssocmemError(f"batching must be one of {BATCHING}, got {batching!r}")
    out_dir = Path(out_dir)
    records = {split: read_json(split_record_path(out_dir, split)) for split in splits}
    missing = [role for role, split in roles.items() if split not in records]
    if missing:
        raise AssocmemError(f"store roles {missing} name splits that were not written ({sorted(records)})")
    meta: dict[str, Any] = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "dtype": token_dtype(tokenizer.vocab_size).str,
        "vocab_size": tokenizer.vocab_size, "eot_id": tokenizer.eot_id, "pad_id": tokenizer.pad_id,
        "tokenizer": tokenizer.describe(), "batching": batching, "roles": roles, "loss_tokens": loss_tokens,
        "splits": {split: {key: records[split][key] for key in ("n_tokens", "n_docs", "shards", "order_sha256")}
                   for split in splits},
        **(extra or {}),
    }
    for split, values in (split_extra or {}).items():
        meta["splits"][split].update(values)
    if batching == "sequences":
        for split in splits:
            write_npy(offsets_path(out_dir, split), document_offsets(TokenStore(out_dir, split, meta)))
            meta["splits"][split].update(split_statistics(TokenStore(out_dir, split, meta)))
    write_json(out_dir / "meta.json", meta)  # last: its presence marks a complete store
    return meta
