"""Tests for assocmem.tokenwriter (sharded, resumable, multiprocess tokenization) and the TokenStore that
reads its output (assocmem.tokenstore)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from concurrent.futures import Future
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from assocmem.corpus.bpe import EOT_TEXT, CorpusTokenizer, get_tokenizer, train_bytelevel_bpe
from assocmem.errors import AssocmemError
from assocmem.io import sha256_file
from assocmem.tokenstore import TokenStore, shard_bin_path, shard_json_path, split_record_path
from assocmem.tokenwriter import finish_store, ordered_bounded_map, tokenize_corpus

SHARD_TOKENS = 3000
LETTERS = "abcdefghijklmnopqrstuvwxyz"


def make_docs(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    words = ["".join(rng.choice(LETTERS) for _ in range(rng.randint(2, 8))) for _ in range(400)]
    docs = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 120))) for _ in range(n)]
    docs[3] = ""  # an empty document still gets its end-of-text token
    docs[5] = f"naïve café — 東京 {EOT_TEXT} stays text"
    return docs


@pytest.fixture(scope="module")
def docs() -> list[str]:
    return make_docs(500)


@pytest.fixture(scope="module")
def tokenizer(docs: list[str], tmp_path_factory: pytest.TempPathFactory) -> CorpusTokenizer:
    path = tmp_path_factory.mktemp("tok") / "bpe.json"
    spec = {"kind": "bytelevel_bpe", "path": str(path), "vocab_size": 800}
    return get_tokenizer(spec, train_texts=iter(docs))


@pytest.fixture(scope="module")
def reference(docs: list[str], tokenizer: CorpusTokenizer) -> tuple[np.ndarray, np.ndarray]:
    """Single-pass, in-memory tokenization: (all tokens, per-document end offsets)."""
    pieces = [np.array([*ids, tokenizer.eot_id], dtype=np.int64) for ids in tokenizer.encode_batch(docs)]
    return np.concatenate(pieces), np.cumsum([len(piece) for piece in pieces])


@pytest.fixture(scope="module")
def single_process_store(docs, tokenizer, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("single")
    tokenize_corpus(iter(docs), tokenizer, out, num_proc=1, shard_tokens=SHARD_TOKENS, batch_docs=16,
                    progress=False)
    finish(out, tokenizer)
    return out


def finish(out: Path, tokenizer, splits: tuple[str, ...] = ("train",)) -> None:
    """Fold the writer's split records into the store's meta.json, as the tokenize stages do."""
    finish_store(out, list(splits), tokenizer, batching="windows",
                 roles={"validation": splits[-1], "heldout": splits[-1]}, loss_tokens="every token")


def shard_bytes(directory: Path, split: str = "train") -> list[bytes]:
    return [path.read_bytes() for path in sorted(directory.glob(f"{split}_[0-9]*.bin"))]


def test_output_equals_single_pass_tokenization(single_process_store, reference, tokenizer, docs):
    tokens, doc_ends = reference
    meta = json.loads(split_record_path(single_process_store, "train").read_text())
    files = [single_process_store / record["file"] for record in meta["shards"]]
    stored = np.concatenate([np.fromfile(path, dtype="<u2") for path in files])
    np.testing.assert_array_equal(stored, tokens)
    assert meta["dtype"] == "<u2" and meta["eot_id"] == tokenizer.eot_id == 0
    assert meta["n_tokens"] == len(tokens) and meta["n_docs"] == len(docs)
    assert meta["tokenizer"] == tokenizer.name and "run" not in meta  # the stored record holds no timing


def test_shards_are_whole_documents_with_matching_records(single_process_store, reference):
    _, doc_ends = reference
    shards = json.loads(split_record_path(single_process_store, "train").read_text())["shards"]
    assert len(shards) > 3
    for previous, record in zip([None, *shards], shards, strict=False):
        own_json = shard_json_path(single_process_store, "train", record["index"])
        assert record == json.loads(own_json.read_text())
        assert sha256_file(single_process_store / record["file"]) == record["sha256"]
        assert record["doc_start"] == (previous["doc_end"] if previous else 0)
        assert record["token_start"] == (previous["token_start"] + previous["tokens"] if previous else 0)
        assert record["token_start"] + record["tokens"] == doc_ends[record["doc_end"] - 1]
    assert all(record["tokens"] >= SHARD_TOKENS for record in shards[:-1])
    # closed at the first document that fills the shard, not later
    last_doc_tokens = [doc_ends[r["doc_end"] - 1] - doc_ends[r["doc_end"] - 2] for r in shards[:-1]]
    assert all(record["tokens"] - last < SHARD_TOKENS
               for record, last in zip(shards[:-1], last_doc_tokens, strict=True))


def test_two_processes_give_byte_identical_shards(single_process_store, docs, tokenizer, tmp_path):
    meta = tokenize_corpus(docs, tokenizer, tmp_path, num_proc=2, shard_tokens=SHARD_TOKENS, batch_docs=7,
                           max_in_flight=3, progress=False)
    assert shard_bytes(tmp_path) == shard_bytes(single_process_store)
    single = json.loads(split_record_path(single_process_store, "train").read_text())
    assert meta["order_sha256"] == single["order_sha256"]
    assert meta["shards"] == single["shards"]


class Crash(RuntimeError):
    pass


def crash_after_shard(index: int):
    def hook(record: dict) -> None:
        if record["index"] == index:
            raise Crash(f"simulated crash after shard {index}")
    return hook


def test_resume_after_a_crash_is_byte_identical(single_process_store, docs, tokenizer, tmp_path):
    with pytest.raises(Crash):
        tokenize_corpus(iter(docs), tokenizer, tmp_path, shard_tokens=SHARD_TOKENS, batch_docs=16,
                        on_shard_done=crash_after_shard(1), progress=False)
    shard_names = [path.name for path in sorted(tmp_path.glob("train_*.bin"))]
    assert shard_names == ["train_00000.bin", "train_00001.bin"]
    assert not split_record_path(tmp_path, "train").exists()
    assert not list(tmp_path.glob(".*.tmp"))  # the unfinished shard's temporary file was removed
    finished = json.loads(shard_json_path(tmp_path, "train", 1).read_text())
    meta = tokenize_corpus(iter(docs), tokenizer, tmp_path, shard_tokens=SHARD_TOKENS, batch_docs=5,
                           progress=False)
    assert shard_bytes(tmp_path) == shard_bytes(single_process_store)
    assert meta["run"]["resumed_shards"] == 2
    # the documents of finished shards were skipped, not re-encoded
    assert meta["run"]["new_docs"] == len(docs) - finished["doc_end"]


def test_resume_redoes_a_damaged_shard_and_later_ones(single_process_store, docs, tokenizer, tmp_path):
    tokenize_corpus(docs, tokenizer, tmp_path, shard_tokens=SHARD_TOKENS, progress=False)
    with open(shard_bin_path(tmp_path, "train", 2), "r+b") as handle:
        handle.truncate(10)  # as if killed while the shard was being replaced
    split_record_path(tmp_path, "train").unlink()
    meta = tokenize_corpus(docs, tokenizer, tmp_path, shard_tokens=SHARD_TOKENS, progress=False)
    assert meta["run"]["resumed_shards"] == 2
    assert shard_bytes(tmp_path) == shard_bytes(single_process_store)


def test_resume_ignores_shards_left_over_from_an_older_run(docs, tokenizer, tmp_path):
    """Same settings but different documents (no ``source`` recorded): old shards that no longer line up
    with the new ones must be redone, not reused."""
    longer = [f"{doc} {doc}" for doc in docs]
    tokenize_corpus(docs, tokenizer, tmp_path, shard_tokens=SHARD_TOKENS, progress=False)
    split_record_path(tmp_path, "train").unlink()
    with pytest.raises(Crash):
        tokenize_corpus(longer, tokenizer, tmp_path, shard_tokens=SHARD_TOKENS, resume=False,
                        on_shard_done=crash_after_shard(0), progress=False)
    meta = tokenize_corpus(longer, tokenizer, tmp_path, shard_tokens=SHARD_TOKENS, progress=False)
    assert meta["run"]["resumed_shards"] == 1
    fresh = tokenize_corpus(longer, tokenizer, tmp_path / "fresh", shard_tokens=SHARD_TOKENS, progress=False)
    assert shard_bytes(tmp_path) == shard_bytes(tmp_path / "fresh")
    assert meta["shards"] == fresh["shards"]


def test_finished_split_is_not_redone_and_other_settings_are_refused(docs, tokenizer, tmp_path):
    first = tokenize_corpus(docs, tokenizer, tmp_path, shard_tokens=SHARD_TOKENS, progress=False)
    again = tokenize_corpus(docs, tokenizer, tmp_path, shard_tokens=SHARD_TOKENS, progress=False)
    assert again["run"]["skipped"] is True and again["shards"] == first["shards"]
    split_record_path(tmp_path, "train").unlink()
    with pytest.raises(AssocmemError, match=r"train_00000\.json was written with different settings.*shard"):
        tokenize_corpus(docs, tokenizer, tmp_path, shard_tokens=SHARD_TOKENS * 2, progress=False)
    fresh = tokenize_corpus(docs, tokenizer, tmp_path, shard_tokens=SHARD_TOKENS * 2, resume=False,
                            progress=False)
    assert len(list(tmp_path.glob("train_[0-9]*.bin"))) == len(fresh["shards"])  # stale shards removed


def test_splits_share_a_directory(docs, tokenizer, tmp_path):
    train = tokenize_corpus(docs[:400], tokenizer, tmp_path, split="train", shard_tokens=SHARD_TOKENS,
                            progress=False)
    val = tokenize_corpus(docs[400:], tokenizer, tmp_path, split="val", shard_tokens=SHARD_TOKENS,
                          progress=False)
    finish(tmp_path, tokenizer, ("train", "val"))
    assert TokenStore(tmp_path, "train").n_tokens == train["n_tokens"]
    assert TokenStore(tmp_path, "val").n_docs == val["n_docs"] == 100


class WideVocabTokenizer(CorpusTokenizer):
    """Character codes shifted past 65535, to exercise the uint32 path."""

    def _build(self) -> None:
        self.name, self.vocab_size, self.eot_id = "wide", 70_000 + 0x3000, 70_000

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [[66_000 + ord(char) % 0x3000 for char in text] for text in texts]

    def decode(self, ids: list[int]) -> str:
        raise NotImplementedError


def test_vocab_over_65535_is_stored_as_uint32(tmp_path):
    meta = tokenize_corpus(["ab", "c"], WideVocabTokenizer({}), tmp_path, shard_tokens=100, progress=False)
    assert meta["dtype"] == "<u4"
    finish(tmp_path, WideVocabTokenizer({}))
    store = TokenStore(tmp_path)
    np.testing.assert_array_equal(store.window(0, 5), [66_000 + 97, 66_000 + 98, 70_000, 66_000 + 99, 70_000])


def test_ids_that_do_not_fit_the_dtype_are_refused(tmp_path):
    class Liar(WideVocabTokenizer):
        def _build(self) -> None:
            self.name, self.vocab_size, self.eot_id = "liar", 100, 0

    with pytest.raises(AssocmemError, match="outside uint16"):
        tokenize_corpus(["ab"], Liar({}), tmp_path, progress=False)


def test_ordered_bounded_map_keeps_order_and_bounds_submissions():
    class InlineExecutor:
        def __init__(self) -> None:
            self.submitted = 0

        def submit(self, func, item):
            self.submitted += 1
            future = Future()
            future.set_result(func(item))
            return future

    executor = InlineExecutor()
    consumed = []
    for value in ordered_bounded_map(executor, lambda x: x * x, range(20), max_in_flight=3):
        assert executor.submitted - len(consumed) <= 3
        consumed.append(value)
    assert consumed == [x * x for x in range(20)]


class DyingTokenizer(WideVocabTokenizer):
    """Kills the worker process it runs in (as the OOM killer would)."""

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        if os.getpid() != self.spec["parent_pid"]:
            os._exit(3)
        return super().encode_batch(texts)


def test_a_dead_worker_fails_the_run_instead_of_hanging(tmp_path):
    tokenizer = DyingTokenizer({"parent_pid": os.getpid()})
    with pytest.raises(AssocmemError, match="worker process died"):
        tokenize_corpus(["ab"] * 50, tokenizer, tmp_path, num_proc=2, batch_docs=5, progress=False)
    assert not split_record_path(tmp_path, "train").exists()
    assert not list(tmp_path.glob(".*.tmp"))


# Peak RSS of this process is read from /proc/self/status (VmHWM): ru_maxrss survives exec on Linux and would
# report the pytest process that launched the child. Workers are spawned by the child, so RUSAGE_CHILDREN is
# the largest worker's peak (never below the child's size when it spawned them).
MEMORY_CHILD = """
import json, re, resource, sys
from pathlib import Path
from assocmem.corpus.bpe import get_tokenizer
from assocmem.tokenwriter import tokenize_corpus

def lines(path):
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            yield line.rstrip("\\n")

def own_peak_kb():
    return int(re.search(r"VmHWM:\\s+(\\d+) kB", Path("/proc/self/status").read_text()).group(1))

if __name__ == "__main__":
    corpus, tokenizer_path, out = sys.argv[1:4]
    tokenizer = get_tokenizer({"kind": "bytelevel_bpe", "path": tokenizer_path})
    meta = tokenize_corpus(lines(corpus), tokenizer, out, num_proc=2, shard_tokens=500_000, batch_docs=64,
                           progress=False)
    print(json.dumps({"parent_kb": own_peak_kb(),
                      "workers_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
                      "n_tokens": meta["n_tokens"]}))
"""


def write_corpus(path: Path, megabytes: float, rng: random.Random, words: list[str]) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        size = 0
        while size < megabytes * 1e6:
            line = " ".join(rng.choice(words) for _ in range(rng.randint(20, 400))) + "\n"
            handle.write(line)
            size += len(line)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="peak RSS is read from Linux /proc")
def test_peak_memory_does_not_grow_with_corpus_size(tmp_path):
    rng = random.Random(0)
    words = ["".join(rng.choice(LETTERS) for _ in range(rng.randint(2, 9))) for _ in range(5000)]
    write_corpus(tmp_path / "small.txt", 4, rng, words)
    write_corpus(tmp_path / "large.txt", 8, rng, words)
    with open(tmp_path / "small.txt", encoding="utf-8") as handle:
        train_bytelevel_bpe((line for i, line in enumerate(handle) if i % 10 == 0), tmp_path / "tok.json",
                            vocab_size=4000)
    (tmp_path / "child.py").write_text(MEMORY_CHILD)
    peaks = {}
    for name in ("small", "large"):
        result = subprocess.run(
            [sys.executable, str(tmp_path / "child.py"), str(tmp_path / f"{name}.txt"),
             str(tmp_path / "tok.json"), str(tmp_path / f"out-{name}")],
            check=True, capture_output=True, text=True,
        )
        peaks[name] = json.loads(result.stdout.strip().splitlines()[-1])
    small, large = peaks["small"], peaks["large"]
    assert large["n_tokens"] > 1.9 * small["n_tokens"]
    assert large["parent_kb"] / small["parent_kb"] < 1.3, peaks
    assert large["workers_kb"] / small["workers_kb"] < 1.3, peaks
    # holding the extra 4 MB of text alone would add ~4 MB to the parent
    assert large["parent_kb"] - small["parent_kb"] < 2_000, peaks


# --- TokenStore -------------------------------------------------------------------------------------------


def test_store_window_crosses_shard_boundaries(single_process_store, reference):
    tokens, _ = reference
    store = TokenStore(single_process_store)
    assert store.n_tokens == len(tokens) and len(store) == store.n_docs == 500  # len: documents
    boundary = store.info["shards"][1]["token_start"]
    window = store.window(boundary - 10, 25)
    assert window.dtype == np.int64
    np.testing.assert_array_equal(window, tokens[boundary - 10:boundary + 15])
    np.testing.assert_array_equal(store.window(0, len(tokens)), tokens)
    with pytest.raises(IndexError):
        store.window(len(tokens) - 5, 6)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_store_window_equals_slice_of_the_token_stream(single_process_store, reference, data):
    tokens, _ = reference
    store = TokenStore(single_process_store)
    offset = data.draw(st.integers(0, len(tokens)))
    length = data.draw(st.integers(0, len(tokens) - offset))
    np.testing.assert_array_equal(store.window(offset, length), tokens[offset:offset + length])


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_tokens_at_equals_the_token_stream_at_those_positions(single_process_store, reference, data):
    """One gather per shard (several shards here) returns the stream's tokens at any positions, in their shape."""
    tokens, _ = reference
    store = TokenStore(single_process_store)
    assert len(store.info["shards"]) > 3
    rows, cols = data.draw(st.integers(0, 6)), data.draw(st.integers(1, 5))
    positions = np.array(data.draw(st.lists(st.integers(0, len(tokens) - 1), min_size=rows * cols,
                                            max_size=rows * cols)), dtype=np.int64).reshape(rows, cols)
    found = store.tokens_at(positions)
    assert found.shape == positions.shape and found.dtype == np.int64
    np.testing.assert_array_equal(found, tokens[positions])


def test_tokens_at_refuses_positions_outside_the_split(single_process_store, reference):
    store = TokenStore(single_process_store)
    with pytest.raises(IndexError, match="outside"):
        store.tokens_at(np.array([0, len(reference[0])]))
    with pytest.raises(IndexError, match="outside"):
        store.tokens_at(np.array([-1]))


def test_sample_windows_is_next_token_shifted_and_seeded(single_process_store, reference):
    tokens, _ = reference
    store = TokenStore(single_process_store)
    x, y = store.sample_windows(np.random.default_rng(7), batch_size=32, block_size=64)
    assert x.shape == y.shape == (32, 64) and x.dtype == y.dtype == np.int64
    np.testing.assert_array_equal(x[:, 1:], y[:, :-1])
    x_again, y_again = store.sample_windows(np.random.default_rng(7), batch_size=32, block_size=64)
    np.testing.assert_array_equal(x, x_again)
    np.testing.assert_array_equal(y, y_again)
    offsets = np.random.default_rng(7).integers(0, len(tokens) - 64, size=32)
    np.testing.assert_array_equal(x, np.stack([tokens[o:o + 64] for o in offsets]))
    with pytest.raises(AssocmemError, match="too few"):
        store.sample_windows(np.random.default_rng(0), 1, len(tokens))


def test_random_chunks_are_reproducible_windows(single_process_store, reference):
    tokens, _ = reference
    store = TokenStore(single_process_store)
    chunks, offsets = store.random_chunks(50, 100, seed=3)
    assert chunks.shape == (50, 100) and chunks.dtype == offsets.dtype == np.int64
    assert offsets.min() >= 0 and offsets.max() <= len(tokens) - 100
    for chunk, offset in zip(chunks, offsets, strict=True):
        np.testing.assert_array_equal(chunk, tokens[offset:offset + 100])
    again, again_offsets = store.random_chunks(50, 100, seed=3)
    np.testing.assert_array_equal(chunks, again)
    np.testing.assert_array_equal(offsets, again_offsets)


def test_store_detects_missing_and_corrupt_shards(docs, tokenizer, tmp_path):
    tokenize_corpus(docs, tokenizer, tmp_path, shard_tokens=SHARD_TOKENS, progress=False)
    finish(tmp_path, tokenizer)
    store = TokenStore(tmp_path)
    store.verify()
    path = shard_bin_path(tmp_path, "train", 1)
    data = bytearray(path.read_bytes())
    data[0] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(AssocmemError, match=r"train_00001\.bin fails its sha256 check"):
        TokenStore(tmp_path).verify()
    path.write_bytes(bytes(data[:-2]))
    with pytest.raises(AssocmemError, match=r"train_00001\.bin is missing or has the wrong size"):
        TokenStore(tmp_path)
    with pytest.raises(AssocmemError, match=r"split 'test' not found"):
        TokenStore(tmp_path, "test")
    (tmp_path / "meta.json").unlink()
    with pytest.raises(AssocmemError, match=r"no token store.*meta\.json is missing"):
        TokenStore(tmp_path)
