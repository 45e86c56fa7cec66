"""The facts in the token store (:mod:`assocmem.tokenstore`): one sequence per fact,
``<sos> k.. <sep> v.. <eos>``, batched as ``sequences`` (padded whole facts), like Question-Formation.

The vocabulary is fixed by the config, not by the data: the specials, then every key symbol ``k0..`` and every
value symbol ``v0..``, so an unseen fact's values are always in it and the model's output covers all V values.
The loss scores the value tokens and ``<eos>`` only: the store's ``loss_from`` (key_length + 2, the position of the
first value token) tells the trainer that the targets before it are context, not predictions.

Roles: ``unseen`` (fresh keys) is the validation split and the held-out split of the activations; recall of the
stored facts is the trainer's fixed sample of the training split (``train_eval``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from assocmem.errors import AssocmemError
from assocmem.facts.generate import SPLITS, FactsSpec
from assocmem.io import sha256_file
from assocmem.rerun import rerun_command
from assocmem.tokenwriter import Tokenizer, finish_store, tokenize_corpus

SOS, EOS, SEP = "<sos>", "<eos>", "<sep>"
SPECIALS = ("<pad>", "<unk>", SOS, EOS, SEP)  # <pad> and <unk> at the ids Question-Formation stores use
PAD_ID = 0
ROLES = {"validation": "unseen", "heldout": "unseen"}
LOSS_TOKENS = "the value tokens and <eos> of each fact (its <sos>, key tokens and <sep> are context, not scored)"


def vocabulary(key_vocab: int, value_vocab: int) -> list[str]:
    return [*SPECIALS, *(f"k{i}" for i in range(key_vocab)), *(f"v{i}" for i in range(value_vocab))]


class SymbolTokenizer(Tokenizer):
    """Whitespace-separated symbols -> ids of a fixed vocabulary (described like Question-Formation's word
    tokenizer, so ``assocmem sample`` and ``evaluate`` read it back)."""

    def _build(self) -> None:
        self.vocab = list(self.spec["vocab"])
        self._index = {symbol: i for i, symbol in enumerate(self.vocab)}
        self.name = "word"
        self.vocab_size = len(self.vocab)
        self.eot_id = self._index[EOS]
        self.pad_id = PAD_ID

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [[self._index[symbol] for symbol in text.split()] for text in texts]

    def decode(self, ids: list[int]) -> str:
        return " ".join(self.vocab[i] for i in ids)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "vocab_size": self.vocab_size, "eot_id": self.eot_id, "vocab": self.vocab}


def read_facts(path: Path, spec: FactsSpec) -> list[tuple[list[str], list[str]]]:
    """The (key symbols, value symbols) of every line of a facts file, checked against ``spec``."""
    keys = {f"k{i}" for i in range(spec.key_vocab)}
    values = {f"v{i}" for i in range(spec.value_vocab)}
    facts = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        key, tab, value = line.partition("\t")
        key_symbols, value_symbols = key.split(), value.split()
        if not (tab and len(key_symbols) == spec.key_length and len(value_symbols) == spec.value_length
                and set(key_symbols) <= keys and set(value_symbols) <= values):
            raise AssocmemError(f"{path}, line {number}: not a fact of {spec.key_length} key symbols k0..k"
                                f"{spec.key_vocab - 1}, a tab and {spec.value_length} value symbols v0..v"
                                f"{spec.value_vocab - 1}: {line!r}; delete {path.parent} and rerun `{rerun_command()}`")
        facts.append((key_symbols, value_symbols))
    return facts


def sequence_text(key: list[str], value: list[str]) -> str:
    """One fact's sequence without its final ``<eos>`` (the store's end-of-text id, which the writer appends)."""
    return " ".join([SOS, *key, SEP, *value])


def tokenize_facts_dir(raw_dir: Path, spec: FactsSpec, out_dir: Path) -> dict[str, Any]:
    """Tokenize ``raw_dir``'s ``train.tsv`` and ``unseen.tsv`` into a store at ``out_dir``; return the source record."""
    files = {split: Path(raw_dir) / f"{split}.tsv" for split in SPLITS}
    missing = [str(path) for path in files.values() if not path.is_file()]
    if missing:
        raise AssocmemError(f"tokenize: facts file(s) {', '.join(missing)} missing (the generate_facts output)")
    tokenizer = SymbolTokenizer({"vocab": vocabulary(spec.key_vocab, spec.value_vocab)})
    for split, path in files.items():
        texts = [sequence_text(key, value) for key, value in read_facts(path, spec)]
        tokenize_corpus(texts, tokenizer, out_dir, split=split, progress=False, resume=False)
    finish_store(out_dir, list(SPLITS), tokenizer, batching="sequences", roles=ROLES, loss_tokens=LOSS_TOKENS,
                 extra={"loss_from": spec.key_length + 2, "facts": spec.settings()})
    return {"kind": "facts", "files": {split: {"path": path.name, "sha256": sha256_file(path)}
                                       for split, path in files.items()}}
