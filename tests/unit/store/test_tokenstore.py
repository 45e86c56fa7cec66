"""The token store (assocmem.tokenstore) as written for Question-Formation (assocmem.qf.tokenize), and the
subset views (assocmem.subsets) on it."""

import json

import numpy as np
import pytest
from helpers import LINES, make_token_dir
from hypothesis import given, settings
from hypothesis import strategies as st

from assocmem.errors import AssocmemError
from assocmem.qf.tokenize import SPECIALS, WordTokenizer, build_vocab
from assocmem.subsets import make_subset, prefix_count
from assocmem.tokenstore import TokenStore, token_dtype


def test_tokenize_roundtrip(tmp_path):
    token_dir = make_token_dir(tmp_path)
    store = TokenStore(token_dir, "train")
    vocab = store.meta["tokenizer"]["vocab"]
    assert vocab[:4] == list(SPECIALS)
    assert len(store) == len(LINES["train"])
    words = [vocab[i] for i in store.sequence(1)]
    assert words == ["<sos>", "the", "newt", "does", "swim", ".", "quest", "does", "the", "newt", "swim", "?",
                     "<eos>"]
    assert store.meta["dtype"] == "<u2" and store.batching == "sequences"
    assert store.n_tokens == int(store.offsets[-1])
    assert store.roles == {"validation": "dev", "heldout": "test"}


def test_unknown_words_in_heldout_are_counted(tmp_path):
    token_dir = make_token_dir(tmp_path)
    meta = TokenStore(token_dir, "test").meta
    assert meta["splits"]["test"]["n_unk"] == 0  # every test word occurs in train
    tokenizer = WordTokenizer({"vocab": build_vocab([["a"]])})
    assert tokenizer.encode_batch(["<sos> zzz a"]) == [[2, 1, 4]]


def test_one_dtype_rule():
    assert token_dtype(65536) == np.dtype("<u2")  # ids 0..65535 fit in uint16
    assert token_dtype(65537) == np.dtype("<u4")
    with pytest.raises(AssocmemError):
        token_dtype(0)


def test_padded_batch(tmp_path):
    store = TokenStore(make_token_dir(tmp_path), "train")
    batch = store.padded_batch([0, 5])
    assert batch.shape == (2, max(len(store.sequence(0)), len(store.sequence(5))))
    assert (batch[0, len(store.sequence(0)):] == 0).all()


def _row_by_row(store: TokenStore, indices: list[int]) -> np.ndarray:
    """The padded batch built one sequence at a time: the oracle of the one-gather path."""
    seqs = [store.sequence(i) for i in indices]
    batch = np.full((len(seqs), max(len(s) for s in seqs)), store.pad_id, dtype=np.int64)
    for row, seq in enumerate(seqs):
        batch[row, :len(seq)] = seq
    return batch


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """A store and a 10% view of it (200 and 20 training sequences)."""
    root = tmp_path_factory.mktemp("gather")
    token_dir = make_token_dir(root, repeat=25)
    make_subset(token_dir, 0.1, out_dir=root / "s10")
    return {"full": TokenStore(token_dir, "train"), "view": TokenStore(root / "s10", "train")}


@settings(max_examples=60, deadline=None)
@given(which=st.sampled_from(["full", "view"]), picks=st.lists(st.integers(0, 10**6), min_size=1, max_size=40))
def test_gathered_batch_equals_row_by_row(stores, which, picks):
    store = stores[which]
    indices = [pick % len(store) for pick in picks]  # repeats and any order, as an epoch permutation gives
    assert np.array_equal(store.padded_batch(indices), _row_by_row(store, indices))


def test_large_stores_batch_row_by_row(stores, monkeypatch):
    """Above FLAT_BATCH_TOKENS the split is not held in memory: the per-row path gives the same batch."""
    import assocmem.tokenstore as module

    store = TokenStore(stores["full"].store_dir, "train")
    monkeypatch.setattr(module, "FLAT_BATCH_TOKENS", store.n_tokens - 1)
    assert np.array_equal(store.padded_batch([3, 0, 199]), _row_by_row(store, [3, 0, 199]))
    assert store._flat is None
    with pytest.raises(IndexError, match="outside"):
        stores["view"].padded_batch([20])


def test_corrupt_token_file_is_reported(tmp_path):
    token_dir = make_token_dir(tmp_path)
    (token_dir / "train_00000.bin").write_bytes(b"\x00\x01\x02\x03")
    with pytest.raises(AssocmemError, match="corrupt token store.*train_00000.bin"):
        TokenStore(token_dir, "train")
    with pytest.raises(AssocmemError, match="split 'nope' not found"):
        TokenStore(token_dir, "nope")


def test_subsets_are_nested_prefixes_and_views(tmp_path):
    token_dir = make_token_dir(tmp_path, repeat=25)  # 200 training sequences
    small = make_subset(token_dir, 0.1, out_dir=tmp_path / "s10")
    full = make_subset(token_dir, 1.0, out_dir=tmp_path / "s100")
    assert small["subset"]["n_docs"] == 20 and full["subset"]["n_docs"] == 200
    assert small["subset"]["n_tokens"] < full["subset"]["n_tokens"] == full["subset"]["parent"]["n_tokens"]
    view = TokenStore(tmp_path / "s10", "train")
    parent = TokenStore(token_dir, "train")
    assert len(view) == 20 and np.array_equal(view.sequence(19), parent.sequence(19))
    assert TokenStore(tmp_path / "s10", "dev").n_docs == parent.meta["splits"]["dev"]["n_docs"]
    assert json.loads((tmp_path / "s10" / "meta.json").read_text())["view"]["splits"]["train"]["n_docs"] == 20
    assert prefix_count(0.0001, 200) == 1
    with pytest.raises(AssocmemError):
        prefix_count(1.5, 10)
