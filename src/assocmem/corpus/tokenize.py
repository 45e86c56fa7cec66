"""Tokenize a text corpus into the token store: load it in its fixed order (HF hub parquet or local files),
hold out validation documents, and stream both splits through :func:`assocmem.tokenwriter.tokenize_corpus`.
The store batches ``windows`` (nanoGPT-style random windows over the token stream).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from assocmem.corpus.bpe import get_tokenizer
from assocmem.corpus.load import iter_documents, prepare_corpus
from assocmem.io import write_json
from assocmem.tokenwriter import finish_store, tokenize_corpus

SPLITS = ("train", "val")
ROLES = {"validation": "val", "heldout": "val"}
LOSS_TOKENS = "every token of each training window (targets are the next tokens)"


def corpus_spec(dataset: dict[str, Any], seed: int) -> dict[str, Any]:
    """Translate the config's dataset section into the corpus loader's spec."""
    spec: dict[str, Any] = {"source": dataset["source"], "text_column": dataset["text_column"],
                            "split": dataset["split"], "val_fraction": dataset["val_fraction"], "seed": seed}
    if dataset["source"] == "hf":
        spec.update(name=dataset["hf_name"], revision=dataset["revision"], data_files=dataset["data_files"],
                    allow_unpinned=dataset["allow_unpinned"])
    else:
        spec["paths"] = dataset["paths"]
    return spec


def tokenizer_spec(dataset: dict[str, Any], out_dir: Path, order: dict[str, Any]) -> dict[str, Any]:
    """The corpus tokenizer's spec. A byte-level BPE trained here lives in the store, named for what it was trained
    on (the tokenizer settings and the corpus order, ``order``), so a changed config or corpus trains a new one and
    a rerun of the same job reuses its own (never a file another run left in the working directory)."""
    tok = dataset["tokenizer"]
    if tok["kind"] == "tiktoken":
        return {"kind": "tiktoken", "encoding": tok["name"]}
    if tok["kind"] == "hf":
        return {"kind": "hf", "name": tok["name"]}
    trained_on = hashlib.sha256(json.dumps({"tokenizer": tok, "corpus": order}, sort_keys=True,
                                           default=str).encode()).hexdigest()[:12]
    return {"kind": "bytelevel_bpe", "path": str(out_dir / f"tokenizer-{trained_on}.json"),
            "vocab_size": tok["vocab_size"]}


def tokenize_text_corpus(dataset_cfg: dict[str, Any], seed: int, out_dir: Path) -> dict[str, Any]:
    """Load, split and tokenize the corpus; writes ``source.json``, ``val_ids.npy`` and the store."""
    dataset, order = prepare_corpus(corpus_spec(dataset_cfg, seed), out_dir)
    val_ids = np.load(out_dir / "val_ids.npy")
    column = dataset_cfg["text_column"]

    def docs(split: str):
        return iter_documents(dataset, text_column=column, split=split, val_ids=val_ids)

    tokenizer = get_tokenizer(tokenizer_spec(dataset_cfg, out_dir, order), train_texts=docs("train"))
    runs = {}
    for split in SPLITS:
        meta = tokenize_corpus(docs(split), tokenizer, out_dir, split=split, num_proc=dataset_cfg["num_proc"],
                               shard_tokens=dataset_cfg["shard_tokens"], source=order)
        runs[split] = meta["run"]
    write_json(out_dir / "timing.json", runs)  # throughput lives apart from the (reproducible) store meta
    return finish_store(out_dir, list(SPLITS), tokenizer, batching="windows", roles=ROLES, loss_tokens=LOSS_TOKENS)
