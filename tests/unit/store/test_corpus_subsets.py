"""Tests for assocmem.subsets on a corpus store: first-X% subsets by document (cut at a document boundary) and
by token (exact cut), as views into the parent shards."""

from __future__ import annotations

import json
import math
import random
from decimal import ROUND_FLOOR, Decimal
from pathlib import Path

import numpy as np
import pytest
from helpers import make_corpus_store
from hypothesis import given, settings
from hypothesis import strategies as st

from assocmem.corpus.bpe import CorpusTokenizer, get_tokenizer
from assocmem.errors import AssocmemError
from assocmem.subsets import make_subset
from assocmem.tokenstore import TokenStore, meta_path

N_DOCS = 300
SHARD_TOKENS = 2000


def make_docs(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    words = ["".join(rng.choice("abcdefghij") for _ in range(rng.randint(2, 7))) for _ in range(200)]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(1, 80))) for _ in range(n)]


@pytest.fixture(scope="module")
def parent(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray, np.ndarray, CorpusTokenizer]:
    """A store of N_DOCS documents in several shards, plus (all tokens, per-document end offsets)."""
    directory = tmp_path_factory.mktemp("parent")
    docs = make_docs(N_DOCS)
    spec = {"kind": "bytelevel_bpe", "path": str(directory / "bpe.json"), "vocab_size": 400}
    tokenizer = get_tokenizer(spec, train_texts=iter(docs))
    make_corpus_store(directory / "store", docs, tokenizer, shard_tokens=SHARD_TOKENS)
    pieces = [np.array([*ids, tokenizer.eot_id]) for ids in tokenizer.encode_batch(docs)]
    return directory / "store", np.concatenate(pieces), np.cumsum([len(piece) for piece in pieces]), tokenizer


def test_document_subset_is_the_first_documents_cut_after_their_eot(parent, tmp_path):
    store_dir, tokens, doc_ends, tokenizer = parent
    meta = make_subset(store_dir, 0.1, by="document", out_dir=tmp_path)
    n_docs = math.floor(0.1 * N_DOCS)
    assert meta["subset"]["n_docs"] == meta["subset"]["n_docs_complete"] == n_docs
    assert meta["subset"]["n_tokens"] == doc_ends[n_docs - 1]
    assert meta["subset"]["partial_last_doc"] is False
    assert meta == json.loads(meta_path(tmp_path).read_text())
    subset = TokenStore(tmp_path)
    assert subset.n_tokens == doc_ends[n_docs - 1] and subset.n_docs == n_docs
    np.testing.assert_array_equal(subset.window(0, subset.n_tokens), tokens[: subset.n_tokens])
    assert subset.window(subset.n_tokens - 1, 1)[0] == tokenizer.eot_id


def test_token_subset_cuts_exactly_and_counts_the_partial_document(parent, tmp_path):
    store_dir, tokens, doc_ends, _ = parent
    meta = make_subset(store_dir, 0.25, by="token", out_dir=tmp_path / "view")
    cut = math.floor(0.25 * len(tokens))
    complete = int(np.searchsorted(doc_ends, cut, side="right"))
    assert meta["subset"]["n_tokens"] == cut
    assert meta["subset"]["n_docs_complete"] == complete
    assert meta["subset"]["partial_last_doc"] == (doc_ends[complete - 1] != cut)
    assert meta["subset"]["n_docs"] == complete + int(meta["subset"]["partial_last_doc"])
    np.testing.assert_array_equal(TokenStore(tmp_path / "view").window(0, cut), tokens[:cut])


def test_view_writes_no_token_data(parent, tmp_path):
    store_dir, _, _, _ = parent
    meta = make_subset(store_dir, 0.01, by="document", out_dir=tmp_path)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["meta.json"]
    assert meta["subset"]["token_range"][0] == 0 and meta["subset"]["n_docs"] == 3  # floor(0.01 * 300)
    assert Path(tmp_path / meta["view"]["parent"]).resolve() == store_dir.resolve()


def test_fraction_one_keeps_everything_and_fractions_are_read_as_decimals(parent, tmp_path):
    store_dir, tokens, _, _ = parent
    full = make_subset(store_dir, 1.0, by="document", out_dir=tmp_path / "full")
    assert full["subset"]["n_tokens"] == len(tokens) and full["subset"]["n_docs"] == N_DOCS
    decimal = make_subset(store_dir, 0.29, by="document", out_dir=tmp_path / "dec")
    assert decimal["subset"]["n_docs"] == 87  # 0.29 * 300 is 86.99999999999999 in binary floating point
    tiny = make_subset(store_dir, 1e-9, by="token", out_dir=tmp_path / "tiny")
    assert tiny["subset"]["n_tokens"] == 1  # at least one unit is kept


def decimal_prefix(fraction: float, total: int) -> int:
    """floor(fraction * total) with the fraction read as the decimal it prints as; at least 1."""
    return max(1, int((Decimal(repr(fraction)) * total).to_integral_value(rounding=ROUND_FLOOR)))


@settings(max_examples=40, deadline=None)
@given(fraction=st.floats(min_value=1e-6, max_value=1.0), by=st.sampled_from(["document", "token"]))
def test_subset_counts_match_the_token_stream(parent, tmp_path_factory, fraction, by):
    store_dir, tokens, doc_ends, tokenizer = parent
    meta = make_subset(store_dir, fraction, by=by, out_dir=tmp_path_factory.mktemp("sub"))
    cut = meta["subset"]["n_tokens"]
    prefix = tokens[:cut]
    assert meta["subset"]["n_docs_complete"] == int(np.count_nonzero(prefix == tokenizer.eot_id))
    assert meta["subset"]["partial_last_doc"] == bool(prefix[-1] != tokenizer.eot_id)
    if by == "document":
        assert meta["subset"]["n_docs"] == decimal_prefix(fraction, N_DOCS)
        assert cut == doc_ends[meta["subset"]["n_docs"] - 1]
    else:
        assert cut == decimal_prefix(fraction, len(tokens))


def test_bad_requests_are_refused(parent, tmp_path):
    store_dir, _, _, _ = parent
    with pytest.raises(AssocmemError, match=r"fraction must be in \(0, 1\]"):
        make_subset(store_dir, 0.0, out_dir=tmp_path)
    with pytest.raises(AssocmemError, match="by must be"):
        make_subset(store_dir, 0.5, by="byte", out_dir=tmp_path)
    with pytest.raises(AssocmemError, match="must differ"):
        make_subset(store_dir, 0.5, out_dir=store_dir)
    make_subset(store_dir, 0.5, out_dir=tmp_path / "view")
    with pytest.raises(AssocmemError, match="is itself a view"):
        make_subset(tmp_path / "view", 0.5, out_dir=tmp_path / "nested")
    with pytest.raises(AssocmemError, match="split 'val' not found"):
        make_subset(store_dir, 0.5, split="val", out_dir=tmp_path / "val")
