"""A byte-level BPE trained by the tokenize stage belongs to its store and to what it was trained on: a changed
tokenizer config or corpus trains a new one, and no file in the working directory is ever picked up (issue 28)."""

from __future__ import annotations

import json

from helpers import ROOT

from assocmem.config import load_schema, validate_config
from assocmem.corpus.tokenize import tokenize_text_corpus

TEXT = "the quick brown fox jumps over the lazy dog and the cat sleeps on the warm mat\n"


def dataset(tmp_path, vocab_size: int) -> dict:
    config = {"experiments": {"web": {
        "dataset": {"name": "corpus", "source": "text", "paths": [str(tmp_path / "doc*.txt")], "val_fraction": 0.2,
                    "tokenizer": {"kind": "bytelevel_bpe", "vocab_size": vocab_size}, "shard_tokens": 4096},
        "models": {"tiny": {"n_layer": 1, "d_model": 16, "n_head": 2, "max_len": 32}},
        "train": {"block_size": 16}, "activations": {"n_chunks": 4, "chunk_len": 8}, "neighbours": {"k": 1,
                                                                                               "fractions": [1.0]}}}}
    schema = load_schema(ROOT / "workflow" / "schemas" / "config.schema.yaml")
    return validate_config(config, schema)["experiments"]["web"]["dataset"]


def trained_file(store) -> str:
    return json.loads((store / "meta.json").read_text())["tokenizer"]["spec"]["path"]


def test_the_bpe_lives_in_the_store_and_is_keyed_on_what_it_was_trained_on(tmp_path, monkeypatch):
    for i in range(10):
        (tmp_path / f"doc{i}.txt").write_text(TEXT * (i + 1))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tokenizer.json").write_text("a file another run left here")
    tokenize_text_corpus(dataset(tmp_path, 300), 7, tmp_path / "store")
    first = trained_file(tmp_path / "store")
    assert first.startswith(str(tmp_path / "store" / "tokenizer-"))
    assert list((tmp_path / "store").glob("tokenizer-*.json")) == [tmp_path / "store" / first.rsplit("/", 1)[1]]
    # another vocabulary size: a new file, not the old one reused
    tokenize_text_corpus(dataset(tmp_path, 280), 7, tmp_path / "store2")
    assert trained_file(tmp_path / "store2").rsplit("/", 1)[1] != first.rsplit("/", 1)[1]
    # the same settings and corpus: the same name (a rerun reuses its own file)
    tokenize_text_corpus(dataset(tmp_path, 300), 7, tmp_path / "store3")
    assert trained_file(tmp_path / "store3").rsplit("/", 1)[1] == first.rsplit("/", 1)[1]
