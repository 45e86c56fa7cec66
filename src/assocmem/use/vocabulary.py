"""The tokenizer a model was trained with, rebuilt from its token store: a model file holds weights and their
config only, the store's ``meta.json`` holds the vocabulary (Question-Formation: the word list; a text corpus: its
tokenizer's spec, a byte-level BPE's file lying in the store)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assocmem import layout
from assocmem.errors import AssocmemError
from assocmem.model import DecoderLM
from assocmem.qf.generate import EOS, SOS
from assocmem.qf.tokenize import WordTokenizer
from assocmem.tokenstore import meta_path, read_store_meta
from assocmem.tokenwriter import Tokenizer
from assocmem.trust import check_store
from assocmem.use.checkpoint import run_fields

STORE_TEMPLATE = "tokens_meta"  # the layout's name of the store the models of an experiment were trained on


@dataclass(frozen=True)
class Vocabulary:
    """A store's tokenizer with its sequence conventions: Question-Formation sequences are words from ``<sos>`` to
    ``<eos>``; corpus documents follow an end-of-text id and end with one."""

    store_dir: Path
    tokenizer: Tokenizer
    start: tuple[int, ...]  # what every generated sequence starts with
    stop_id: int  # where a sequence ends: <eos>, or the end-of-text id
    words: bool  # word level (Question-Formation, McCoy-format files)

    def encode_prompt(self, text: str) -> list[int]:
        """``start`` and the prompt's token ids (a word prompt may begin with ``<sos>`` itself)."""
        if not self.words:
            return [*self.start, *self.tokenizer.encode_batch([text])[0]] if text else list(self.start)
        words = text.split()
        words = words[1:] if words[:1] == [SOS] else words
        unknown = sorted({word for word in words if word not in self.tokenizer.vocab})
        if unknown:
            raise AssocmemError(f"prompt word(s) {', '.join(map(repr, unknown))} not in the vocabulary of "
                                f"{meta_path(self.store_dir)} ({self.tokenizer.vocab_size} tokens)")
        return [*self.start, *self.tokenizer.encode_batch([" ".join(words)])[0]]

    def decode(self, ids: list[int]) -> str:
        """The text of a sequence, without its ``start`` and its final stop id."""
        ids = ids[len(self.start):] if tuple(ids[:len(self.start)]) == self.start else ids
        ids = ids[:-1] if ids[-1:] == [self.stop_id] else ids
        return self.tokenizer.decode(ids)


def default_store(model_file: Path) -> Path:
    """The token store of a model file placed in a results directory: ``<results>/<exp>/data/tokens``."""
    found = run_fields(model_file)
    if found is None:
        raise AssocmemError(f"cannot tell which token store {model_file} was trained on (it is not in a results "
                            "directory's layout, <results>/<exp>/train/<model>/<subset>/): pass --store "
                            "<results>/<exp>/data/tokens")
    fields, results_dir = found
    store = layout.path(results_dir, STORE_TEMPLATE, exp=fields["exp"]).parent
    if not meta_path(store).is_file():
        raise AssocmemError(f"the token store of {model_file} (its vocabulary) is not at {store}: pass --store DIR")
    return store


def load_vocabulary(store_dir: str | os.PathLike[str], model: DecoderLM,
                    model_file: Path | None = None) -> Vocabulary:
    """The tokenizer of the store at ``store_dir``, which must have the model's vocabulary size and, inside a
    results directory, hold the files its tokenize job wrote (and be the store ``model_file`` was trained on)."""
    store_dir = Path(store_dir)
    check_store(store_dir, model_file)
    meta = read_store_meta(store_dir)
    if int(meta["vocab_size"]) != model.cfg.vocab_size:
        raise AssocmemError(f"the token store {store_dir} has {meta['vocab_size']} tokens but the model was trained "
                            f"on {model.cfg.vocab_size}: pass the --store it was trained on")
    described = meta["tokenizer"]
    if "vocab" in described:
        tokenizer = WordTokenizer({"vocab": described["vocab"]})
        return Vocabulary(store_dir, tokenizer, (tokenizer.vocab.index(SOS),), tokenizer.vocab.index(EOS), True)
    tokenizer = corpus_tokenizer(store_dir, described["spec"])
    return Vocabulary(store_dir, tokenizer, (int(meta["eot_id"]),), int(meta["eot_id"]), False)


def corpus_tokenizer(store_dir: Path, spec: dict[str, Any]) -> Tokenizer:
    """A corpus store's tokenizer; a byte-level BPE file named by a relative path is looked for in the store first,
    then where the tokenize job ran (its sha256 is checked against the store's record either way)."""
    from assocmem.corpus.bpe import get_tokenizer

    if spec.get("kind") == "bytelevel_bpe" and not Path(spec["path"]).is_absolute():
        candidates = [store_dir / spec["path"], Path(spec["path"])]
        found = next((candidate for candidate in candidates if candidate.is_file()), None)
        if found is None:
            raise AssocmemError(f"the byte-level BPE file of {meta_path(store_dir)} is in none of "
                                f"{', '.join(map(str, candidates))}")
        spec = {**spec, "path": str(found)}
    return get_tokenizer(spec)
