"""The dataset kinds, in one table: which data stages a kind runs, which config keys it takes, what the report may
expect of it. The rules (``workflow/rules/common.smk``), the stages, the config checks and the report look a kind up
here instead of testing a dataset's name.

Adding a kind: one :class:`DatasetKind` entry in :data:`KINDS` with its tokenizer, and its name in the schema's
``dataset.name`` enum (``workflow/schemas/config.schema.yaml``). A kind with a data stage of its own (facts:
``generate_facts``) also needs that rule, its stage function and its layout entries, named by ``raw_stage``,
``raw_file``, ``raw_record`` and ``raw_stamp``. After tokenization every stage reads the same token store, so
nothing downstream changes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assocmem.errors import AssocmemError
from assocmem.facts.generate import SPLITS as FACTS_SPLITS
from assocmem.qf.generate import SPLITS as QF_SPLITS

Tokenizer = Callable[[dict[str, Any], Path, Path | None], None]  # (stage params, store dir, raw-data dir)
Checker = Callable[[Mapping[str, Any]], list[str]]  # dataset config -> problems, each naming its key under dataset.


def _tokenize_question_formation(params: dict[str, Any], out_dir: Path, raw_dir: Path | None) -> None:
    from assocmem.io import write_json
    from assocmem.qf.tokenize import tokenize_qf_dir
    from assocmem.qf.variant import Variant

    if raw_dir is None:
        raise AssocmemError("tokenize: question_formation data needs --raw-dir (the generate_data output)")
    variant = Variant.from_config(params["dataset"].get("variant"))
    write_json(out_dir / "source.json", tokenize_qf_dir(raw_dir, out_dir, variant, params["seed"]))


def _tokenize_facts(params: dict[str, Any], out_dir: Path, raw_dir: Path | None) -> None:
    from assocmem.facts.generate import FactsSpec
    from assocmem.facts.tokenize import tokenize_facts_dir
    from assocmem.io import write_json

    if raw_dir is None:
        raise AssocmemError("tokenize: facts data needs --raw-dir (the generate_facts output)")
    spec = FactsSpec.from_config(params["dataset"]["facts"], params["seed"])
    write_json(out_dir / "source.json", tokenize_facts_dir(raw_dir, spec, out_dir))


def _facts_problems(dataset: Mapping[str, Any]) -> list[str]:
    from assocmem.facts.separation import request_problems

    return request_problems(dataset["facts"])


def _no_problems(dataset: Mapping[str, Any]) -> list[str]:
    return []


def _tokenize_corpus(params: dict[str, Any], out_dir: Path, raw_dir: Path | None) -> None:
    from assocmem.corpus.tokenize import tokenize_text_corpus

    # worker processes = the rule's threads (num_proc), which never change the tokens
    tokenize_text_corpus({**params["dataset"], "num_proc": params["threads"]}, params["seed"], out_dir)


@dataclass(frozen=True)
class DatasetKind:
    name: str
    sources: tuple[str, ...]  # the dataset.source values it takes
    tokenize: Tokenizer
    raw_splits: tuple[str, ...] = ()  # files of a data stage (none: the tokenizer reads the source itself)
    raw_stage: str | None = None  # the rule that writes them (generate_data, generate_facts)
    raw_file: str = "raw_file"  # the layout name of a raw split file (its {split} field)
    raw_record: str = "raw_manifest"  # the layout names of the data stage's record and stamp
    raw_stamp: str = "raw_stamp"
    audited: bool = False  # a data_audit stage writes an exact entropy floor and a comparison with the real data
    exact_information: bool = False  # the data stage's record holds the exact information content (facts)
    grid_analysis: str = "sweep"  # the rule (and layout prefix) that analyses a grid (experiments.<exp>.sweep)
    problems: Checker = _no_problems  # config problems only this kind has (validated config -> messages)
    sized: bool = False  # dataset.sizes fixes the number of sequences per split
    windowed: bool = False  # the store is one token stream cut into windows (activations.chunk_len applies)
    takes_pretrained: bool = False  # pretrained HF models can be run on it (their tokenizer's text)
    parallel_tokenizer: bool = False  # tokenization runs dataset.num_proc worker processes
    store_keys: tuple[str, ...] | None = None  # dataset keys that change the token store (None: every own key)
    own_keys: frozenset[str] = frozenset()  # keys of the dataset config that only this kind reads
    resources: Mapping[str, Mapping[str, int]] = field(default_factory=dict)  # rule -> {mem_mb, runtime}

    def store_params(self, dataset: Mapping[str, Any]) -> dict[str, Any]:
        """The dataset keys the token store depends on: exactly what reruns tokenization when it changes."""
        if self.store_keys is not None:
            return {key: dataset[key] for key in self.store_keys}
        others = set().union(*(kind.own_keys for kind in KINDS.values() if kind is not self))
        return {key: value for key, value in dataset.items() if key not in others and key != "num_proc"}


QUESTION_FORMATION = DatasetKind(
    "question_formation", sources=("generate", "download"), tokenize=_tokenize_question_formation,
    raw_splits=QF_SPLITS, raw_stage="generate_data", audited=True, sized=True, store_keys=("name", "variant"),
    own_keys=frozenset({"sizes", "download", "reference_dev", "grammar_weights", "fresh_sequences", "variant"}),
    resources={"tokenize": {"mem_mb": 2000, "runtime": 30}, "train": {"mem_mb": 3000, "runtime": 240}})
CORPUS = DatasetKind(
    "corpus", sources=("hf", "text", "jsonl", "parquet"), tokenize=_tokenize_corpus, windowed=True,
    takes_pretrained=True, parallel_tokenizer=True,
    own_keys=frozenset({"hf_name", "revision", "allow_unpinned", "data_files", "paths", "split", "text_column",
                        "val_fraction", "tokenizer", "shard_tokens"}),
    resources={"tokenize": {"mem_mb": 8000, "runtime": 720}, "train": {"mem_mb": 16000, "runtime": 2880}})
FACTS = DatasetKind(
    "facts", sources=("generate",), tokenize=_tokenize_facts, raw_splits=FACTS_SPLITS, raw_stage="generate_facts",
    raw_file="facts_file", raw_record="facts_information", raw_stamp="facts_stamp", exact_information=True,
    grid_analysis="memorisation",
    problems=_facts_problems, store_keys=("name", "facts"), own_keys=frozenset({"facts"}),
    resources={"tokenize": {"mem_mb": 2000, "runtime": 30}, "train": {"mem_mb": 3000, "runtime": 240}})
KINDS: dict[str, DatasetKind] = {kind.name: kind for kind in (QUESTION_FORMATION, CORPUS, FACTS)}


def kind_of(dataset: Mapping[str, Any]) -> DatasetKind:
    """The kind of a (validated) dataset config."""
    name = dataset.get("name")
    if name not in KINDS:
        raise AssocmemError(f"dataset.name: unknown kind {name!r}; use one of {', '.join(KINDS)}")
    return KINDS[name]
