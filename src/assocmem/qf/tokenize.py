"""Word-level tokenization of Question-Formation splits into the token store (:mod:`assocmem.tokenstore`).

Each example becomes the Murty et al. (2023) LM sequence ``<sos> w1 .. wk . <task> o1 .. om <eos>``. The
store's end-of-text id is ``<eos>``, so every stored document is exactly one sequence; the store batches
``sequences`` (whole padded examples). The vocabulary is the specials, then the training words sorted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from assocmem.errors import AssocmemError
from assocmem.io import sha256_file
from assocmem.qf.generate import EOS, SOS, SPLITS, lm_tokens, read_qf
from assocmem.qf.variant import Variant, variant_rng
from assocmem.tokenwriter import Tokenizer, finish_store, tokenize_corpus

SPECIALS = ("<pad>", "<unk>", SOS, EOS)
PAD_ID = 0
UNK_ID = 1
ROLES = {"validation": "dev", "heldout": "test"}
LOSS_TOKENS = "every token after <sos>, up to and including <eos>"


def build_vocab(train_sequences: Iterable[Sequence[str]]) -> list[str]:
    """Specials first, then the training words sorted (deterministic)."""
    words = sorted({w for seq in train_sequences for w in seq} - set(SPECIALS))
    return [*SPECIALS, *words]


class WordTokenizer(Tokenizer):
    """Whitespace-separated words -> ids of a fixed vocabulary; unknown words -> ``<unk>``.

    A document is the text of one LM sequence without its final ``<eos>``, which the writer appends as the
    end-of-text id.
    """

    def _build(self) -> None:
        self.vocab = list(self.spec["vocab"])
        self._index = {word: i for i, word in enumerate(self.vocab)}
        self.name = "word"
        self.vocab_size = len(self.vocab)
        self.eot_id = self._index[EOS]
        self.pad_id = PAD_ID

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [[self._index.get(word, UNK_ID) for word in text.split()] for text in texts]

    def decode(self, ids: list[int]) -> str:
        return " ".join(self.vocab[i] for i in ids)

    def describe(self) -> dict[str, Any]:
        variant = {key: self.spec[key] for key in ("variant", "variant_seed") if key in self.spec}
        return {"name": self.name, "vocab_size": self.vocab_size, "eot_id": self.eot_id, "vocab": self.vocab,
                **variant}


def sequence_texts(path: Path, variant: Variant | None = None, seed: int = 0) -> list[str]:
    """The LM sequences of a McCoy-format file, without the final ``<eos>``, as space-joined words; under a data
    variant (:mod:`assocmem.qf.variant`) its sequences, spelled from the file's own stream of ``seed``."""
    if variant is None or variant.identity:
        return [" ".join(lm_tokens(example)[:-1]) for example in read_qf(path)]
    rng = variant_rng(seed, Path(path).name)
    return [" ".join(variant.lm_tokens(example, rng)[:-1]) for example in read_qf(path)]


def variant_spec(variant: Variant | None, seed: int) -> dict[str, Any]:
    """What the store's tokenizer record keeps of a variant, so evaluation encodes other files the same way."""
    if variant is None or variant.identity:
        return {}
    return {"variant": {"synonyms": variant.synonyms, "output_copies": variant.output_copies}, "variant_seed": seed}


def tokenize_qf(raw_files: dict[str, Path], out_dir: Path, variant: Variant | None = None,
                seed: int = 0) -> dict[str, Any]:
    """Tokenize every split of ``raw_files`` (split -> McCoy-format file) into a store at ``out_dir`` (under a data
    ``variant``, spelled from ``seed``)."""
    if "train" not in raw_files:
        raise AssocmemError("tokenize: a 'train' split is required to build the vocabulary")
    texts = {split: sequence_texts(path, variant, seed) for split, path in raw_files.items()}
    vocab = build_vocab(text.split() + [EOS] for text in texts["train"])
    tokenizer = WordTokenizer({"vocab": vocab, **variant_spec(variant, seed)})
    unknown = {}
    for split in SPLITS:
        if split in texts:
            tokenize_corpus(texts[split], tokenizer, out_dir, split=split, progress=False, resume=False)
            unknown[split] = sum(word not in tokenizer._index for text in texts[split] for word in text.split())
    word_counts = Counter(word for text in texts["train"] for word in [*text.split(), EOS])
    return finish_store(out_dir, [s for s in SPLITS if s in texts], tokenizer, batching="sequences",
                        roles=ROLES, loss_tokens=LOSS_TOKENS, split_extra={s: {"n_unk": n} for s, n in unknown.items()},
                        extra={"word_counts_train": dict(word_counts.most_common())})


def tokenize_qf_dir(raw_dir: Path, out_dir: Path, variant: Variant | None = None, seed: int = 0) -> dict[str, Any]:
    """Tokenize the ``question.{split}`` files of ``raw_dir``; return the source record (files and hashes)."""
    files = {split: Path(raw_dir) / f"question.{split}" for split in SPLITS
             if (Path(raw_dir) / f"question.{split}").exists()}
    if not files:
        raise AssocmemError(f"no question.* files found in {raw_dir}")
    tokenize_qf(files, out_dir, variant, seed)
    return {"kind": "question_formation", "files": {split: {"path": path.name, "sha256": sha256_file(path)}
                                                     for split, path in files.items()}}
