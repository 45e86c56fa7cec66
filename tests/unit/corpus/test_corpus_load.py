"""Tests for assocmem.corpus.load: local text/jsonl/parquet through the real `datasets` loaders, order
metadata, the seeded validation split, and the errors users see."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import datasets
import huggingface_hub.constants
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from assocmem.corpus.load import (
    ids_sha256,
    iter_documents,
    load_corpus,
    prepare_corpus,
    resolve_paths,
    validation_ids,
)
from assocmem.errors import AssocmemError


def make_docs(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"]
    return [f"doc{i} " + " ".join(rng.choice(words) for _ in range(rng.randint(3, 20))) for i in range(n)]


def write_sources(directory: Path, docs: list[str]) -> dict[str, list[Path]]:
    """The same documents as two text, two jsonl and two parquet files (first half, second half)."""
    halves = [docs[: len(docs) // 2], docs[len(docs) // 2:]]
    files: dict[str, list[Path]] = {"text": [], "jsonl": [], "parquet": []}
    for part, half in enumerate(halves):
        text_path = directory / f"part{part}.txt"
        text_path.write_text("\n\n".join(half), encoding="utf-8")  # no final newline: datasets keeps it
        jsonl_path = directory / f"part{part}.jsonl"
        jsonl_path.write_text("".join(json.dumps({"body": doc, "n": i}) + "\n" for i, doc in enumerate(half)))
        parquet_path = directory / f"part{part}.parquet"
        pd.DataFrame({"body": half}).to_parquet(parquet_path, index=False)
        files["text"].append(text_path)
        files["jsonl"].append(jsonl_path)
        files["parquet"].append(parquet_path)
    return files


@pytest.fixture(scope="module")
def corpus_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], dict[str, list[Path]], Path]:
    directory = tmp_path_factory.mktemp("corpus")
    docs = make_docs(40)
    return docs, write_sources(directory, docs), directory


def spec_for(source: str, directory: Path, cache: Path, **extra: object) -> dict:
    column = "text" if source == "text" else "body"
    suffix = {"text": "txt", "jsonl": "jsonl", "parquet": "parquet"}[source]
    return {"source": source, "paths": [str(directory / f"part*.{suffix}")], "text_column": column,
            "cache_dir": str(cache), **extra}


@pytest.mark.parametrize("source", ["text", "jsonl", "parquet"])
def test_local_sources_load_every_document_in_source_order(corpus_files, tmp_path, source):
    docs, _, directory = corpus_files
    spec = spec_for(source, directory, tmp_path / "cache")
    dataset = load_corpus(spec)
    assert dataset.num_rows == len(docs)
    assert list(iter_documents(dataset, text_column=spec["text_column"])) == docs


def test_listed_order_wins_over_name_order(corpus_files, tmp_path):
    docs, files, _ = corpus_files
    spec = {"source": "parquet", "paths": [str(files["parquet"][1]), str(files["parquet"][0])],
            "text_column": "body", "cache_dir": str(tmp_path)}
    half = len(docs) // 2
    assert list(iter_documents(load_corpus(spec), text_column="body")) == docs[half:] + docs[:half]


def test_text_sample_by_line_and_document(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("one\ntwo\n\nthree\n", encoding="utf-8")
    lines = load_corpus({"source": "text", "paths": [str(path)], "sample_by": "line",
                         "cache_dir": str(tmp_path)})
    whole = load_corpus({"source": "text", "paths": [str(path)], "sample_by": "document",
                         "cache_dir": str(tmp_path)})
    assert list(iter_documents(lines)) == ["one", "two", "", "three"]
    assert list(iter_documents(whole)) == ["one\ntwo\n\nthree\n"]


def test_bad_text_column_names_the_column_and_the_columns_present(corpus_files, tmp_path):
    _, _, directory = corpus_files
    spec = spec_for("jsonl", directory, tmp_path, text_column="content")
    with pytest.raises(AssocmemError, match=r"no column 'content'.*\['body', 'n'\]"):
        load_corpus(spec)


def test_missing_file_and_empty_glob_are_named(tmp_path):
    with pytest.raises(AssocmemError, match=r"missing corpus file .*nope\.parquet"):
        load_corpus({"source": "parquet", "paths": [str(tmp_path / "nope.parquet")]})
    with pytest.raises(AssocmemError, match=r"no corpus files match .*\*\.jsonl"):
        load_corpus({"source": "jsonl", "paths": str(tmp_path / "*.jsonl")})


def test_unknown_source_and_duplicate_paths_are_refused(corpus_files):
    _, files, _ = corpus_files
    with pytest.raises(AssocmemError, match="'source' is 'csv'"):
        load_corpus({"source": "csv", "paths": []})
    with pytest.raises(AssocmemError, match="more than once"):
        resolve_paths([str(files["text"][0]), str(files["text"][0])])


def test_unreadable_file_is_reported(tmp_path):
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not a parquet file")
    with pytest.raises(AssocmemError, match=r"could not read parquet corpus files .*bad\.parquet"):
        load_corpus({"source": "parquet", "paths": [str(bad)], "cache_dir": str(tmp_path / "cache")})


@pytest.fixture
def hub_offline(monkeypatch):
    """HF_HUB_OFFLINE=1 as the libraries see it (they read the variable once, at import)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)


@pytest.mark.parametrize("data_files", ["plain_text/train/*.parquet", None])
def test_hf_source_offline_gives_a_clear_error(hub_offline, tmp_path, data_files):
    spec = {"source": "hf", "name": "Skylion007/openwebtext", "revision": "0123456789abcdef" * 2 + "01234567",
            "data_files": data_files, "split": "train", "cache_dir": str(tmp_path)}
    with pytest.raises(AssocmemError) as info:
        load_corpus(spec)
    message = str(info.value)
    assert "Skylion007/openwebtext" in message
    assert "offline mode: HF_HUB_OFFLINE" in message
    assert "local spec" in message
    assert ("refs/convert/parquet" in message) == (data_files is None)  # the script-repository hint


def test_hf_source_requires_a_pinned_revision():
    with pytest.raises(AssocmemError, match="'revision' is 'main'"):
        load_corpus({"source": "hf", "name": "Skylion007/openwebtext", "revision": "main"})
    with pytest.raises(AssocmemError, match="needs key 'name'"):
        load_corpus({"source": "hf", "revision": "a" * 40})


def test_prepare_corpus_records_order_and_saves_validation_ids(corpus_files, tmp_path):
    docs, _, directory = corpus_files
    spec = spec_for("parquet", directory, tmp_path / "cache", val_docs=5, seed=3)
    dataset, meta = prepare_corpus(spec, tmp_path / "out")
    saved = json.loads((tmp_path / "out" / "source.json").read_text())
    val_ids = np.load(tmp_path / "out" / "val_ids.npy")
    assert saved == json.loads(json.dumps(meta))
    assert meta["n_docs"] == len(docs)
    assert meta["order_sha256"] == ids_sha256(np.arange(len(docs)))
    assert [Path(record["path"]).name for record in meta["files"]] == ["part0.parquet", "part1.parquet"]
    assert all(len(record["sha256"]) == 64 for record in meta["files"])
    assert len(val_ids) == 5 and meta["val"]["ids_sha256"] == ids_sha256(val_ids)
    assert meta["train"]["n_docs"] == len(docs) - 5
    np.testing.assert_array_equal(val_ids, validation_ids(len(docs), seed=3, val_docs=5))
    again, meta_again = prepare_corpus(spec, tmp_path / "out2")
    assert meta_again == meta  # same files, same seed: same record
    assert again.num_rows == dataset.num_rows


def test_iter_documents_splits_partition_the_corpus_in_order(corpus_files, tmp_path):
    docs, _, directory = corpus_files
    dataset = load_corpus(spec_for("jsonl", directory, tmp_path))
    val_ids = validation_ids(len(docs), seed=0, val_fraction=0.2)
    train = list(iter_documents(dataset, text_column="body", split="train", val_ids=val_ids, batch_size=7))
    val = list(iter_documents(dataset, text_column="body", split="val", val_ids=val_ids, batch_size=3))
    assert val == [docs[i] for i in val_ids]
    assert train == [doc for i, doc in enumerate(docs) if i not in set(val_ids.tolist())]


def test_iter_documents_rejects_missing_text(tmp_path):
    path = tmp_path / "nulls.parquet"
    pd.DataFrame({"text": ["fine", None]}).to_parquet(path, index=False)
    dataset = load_corpus({"source": "parquet", "paths": [str(path)], "cache_dir": str(tmp_path)})
    with pytest.raises(AssocmemError, match="document 1: column 'text' holds NoneType"):
        list(iter_documents(dataset))


@settings(max_examples=60, deadline=None)
@given(n_docs=st.integers(2, 5000), fraction=st.floats(0, 0.5), seed=st.integers(0, 2**32 - 1))
def test_validation_ids_are_a_seeded_sorted_sample(n_docs, fraction, seed):
    ids = validation_ids(n_docs, seed=seed, val_fraction=fraction)
    assert len(ids) == math.ceil(fraction * n_docs)
    assert np.all(np.diff(ids) > 0) and (len(ids) == 0 or (ids[0] >= 0 and ids[-1] < n_docs))
    np.testing.assert_array_equal(ids, validation_ids(n_docs, seed=seed, val_fraction=fraction))


def test_validation_ids_reject_bad_requests():
    with pytest.raises(AssocmemError, match="not both"):
        validation_ids(10, seed=0, val_fraction=0.1, val_docs=1)
    with pytest.raises(AssocmemError, match="does not fit"):
        validation_ids(10, seed=0, val_docs=10)
    with pytest.raises(AssocmemError, match=r"\[0, 1\)"):
        validation_ids(10, seed=0, val_fraction=1.5)
