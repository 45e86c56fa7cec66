"""The facts: keys drawn at a minimum Hamming distance from one another, values i.i.d. uniform, from a fixed seed.

Key ``i`` is a sequence of ``key_length`` symbols over ``key_vocab``; candidates are drawn uniformly, in batches of
a fixed size from their own random stream, and a candidate is kept when it lies at Hamming distance >=
``min_key_distance`` from every key kept before it (1: keys are only distinct). So key i is uniform over the keys
far enough from keys 0..i-1, and the stream does not depend on how many keys are asked for. Values are
``value_length`` symbols over ``value_vocab``, i.i.d. uniform from a second stream, independent of the keys.

The first ``count`` facts are the training facts, the next ``unseen`` facts the held-out ones: fresh keys, drawn by
the same process as if there were more facts. The facts of a smaller ``count`` (same seed and settings) are
therefore the first facts of a larger one, and an unseen fact is exactly what one more stored fact would have been.

Files (one fact per line, ``k3 k0 k7<TAB>v2 v5``): ``train.tsv``, ``unseen.tsv``; ``information.json`` holds the
settings, the exact information content (:mod:`assocmem.facts.information`), the key separation reached and each
file's sha256.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from assocmem.errors import AssocmemError
from assocmem.facts.information import information_content
from assocmem.facts.separation import guaranteed_keys, max_keys, min_distance, request_problems
from assocmem.io import sha256_file, write_json, write_text

SPLITS = ("train", "unseen")
KEY_STREAM, VALUE_STREAM = 0, 1
BATCH = 1024  # candidate keys per draw: fixed, so the candidate stream is the same whatever is asked for
PATIENCE = 256  # batches in a row without a kept key before the request is called too hard to reach
CELLS = 1 << 24  # candidate x kept-key x position comparisons at once (bounds the memory of a distance check)


@dataclass(frozen=True)
class FactsSpec:
    count: int  # D, the training facts
    unseen: int  # held-out facts with fresh keys
    key_length: int
    value_length: int
    key_vocab: int
    value_vocab: int
    min_key_distance: int
    seed: int

    @classmethod
    def from_config(cls, facts: Mapping[str, Any], seed: int | None = None) -> FactsSpec:
        """The spec of a validated ``dataset.facts`` config; its own ``seed``, or when that is null ``seed`` (the
        global one)."""
        own = facts.get("seed")
        if own is None and seed is None:
            raise AssocmemError("dataset.facts.seed is null and no global seed was given")
        return cls(**{key: facts[key] for key in cls.__dataclass_fields__ if key != "seed"},
                   seed=int(seed if own is None else own))

    @property
    def total(self) -> int:
        return self.count + self.unseen

    def settings(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Facts:
    keys: np.ndarray  # int64 (count + unseen, key_length)
    values: np.ndarray  # int64 (count + unseen, value_length)
    candidates: int  # candidate keys drawn

    def split(self, name: str, spec: FactsSpec) -> tuple[np.ndarray, np.ndarray]:
        rows = slice(0, spec.count) if name == "train" else slice(spec.count, spec.total)
        return self.keys[rows], self.values[rows]


def generate_facts(spec: FactsSpec) -> Facts:
    """The facts of ``spec`` (pure: the same spec gives the same arrays)."""
    problems = request_problems(spec.settings())
    if problems:
        raise AssocmemError(f"dataset.{problems[0]}")
    keys, drawn = sample_keys(spec)
    values = np.random.default_rng([spec.seed, VALUE_STREAM]).integers(
        0, spec.value_vocab, size=(spec.total, spec.value_length), dtype=np.int64)
    return Facts(keys, values, drawn)


def sample_keys(spec: FactsSpec) -> tuple[np.ndarray, int]:
    """``spec.total`` keys at pairwise distance >= ``min_key_distance``, by sequential rejection; and the number of
    candidates drawn."""
    rng = np.random.default_rng([spec.seed, KEY_STREAM])
    keys = np.empty((spec.total, spec.key_length), dtype=np.int64)
    kept, drawn, idle = 0, 0, 0
    seen: set[bytes] = set()
    while kept < spec.total:
        batch = rng.integers(0, spec.key_vocab, size=(BATCH, spec.key_length), dtype=np.int64)
        drawn += BATCH
        before = kept
        for row in _kept_rows(batch, keys, kept, spec.min_key_distance, seen):
            keys[kept] = batch[row]
            kept += 1
            if kept == spec.total:
                break
        idle = idle + 1 if kept == before else 0
        if idle >= PATIENCE:
            raise AssocmemError(_too_hard(spec, kept, drawn))
    return keys, drawn


def _kept_rows(batch: np.ndarray, keys: np.ndarray, kept: int, d: int, seen: set[bytes]) -> Iterator[int]:
    """Rows of ``batch`` kept in order: each far enough from ``keys[:kept]`` and from the rows kept before it."""
    if d <= 1:
        for row, key in enumerate(batch):
            code = key.tobytes()
            if code not in seen:
                seen.add(code)
                yield row
        return
    far = _far_from(batch, keys[:kept], d)
    taken: list[int] = []
    for row in np.flatnonzero(far):
        if not taken or np.count_nonzero(batch[taken] != batch[row], axis=1).min() >= d:
            taken.append(int(row))
            yield int(row)


def _far_from(batch: np.ndarray, keys: np.ndarray, d: int) -> np.ndarray:
    """Whether each row of ``batch`` lies at distance >= ``d`` from every row of ``keys``."""
    far = np.ones(len(batch), dtype=bool)
    chunk = max(1, CELLS // (len(batch) * batch.shape[1]))
    for start in range(0, len(keys), chunk):
        block = keys[start:start + chunk]
        far &= np.count_nonzero(batch[:, None, :] != block[None, :, :], axis=2).min(axis=1) >= d
    return far


def _too_hard(spec: FactsSpec, kept: int, drawn: int) -> str:
    q, n, d = spec.key_vocab, spec.key_length, spec.min_key_distance
    return (f"dataset.facts.min_key_distance: kept {kept} of the {spec.total} keys needed (facts.count + "
            f"facts.unseen) at pairwise Hamming distance >= {d} after drawing {drawn} candidates, and none of the "
            f"last {PATIENCE * BATCH} was far enough from the kept ones: too hard to reach by random sampling "
            f"(it always reaches {guaranteed_keys(q, n, d)}; at most {max_keys(q, n, d)} can exist). Lower "
            "facts.count, facts.unseen or facts.min_key_distance, or raise facts.key_length or facts.key_vocab")


def fact_lines(keys: np.ndarray, values: np.ndarray) -> str:
    """The file text of these facts: ``k<i> ...<TAB>v<j> ...`` per line."""
    return "".join(" ".join(f"k{s}" for s in key) + "\t" + " ".join(f"v{s}" for s in value) + "\n"
                   for key, value in zip(keys.tolist(), values.tolist(), strict=True))


def write_facts(spec: FactsSpec, out_dir: Path) -> dict[str, Any]:
    """Generate the facts of ``spec`` into ``out_dir`` (``train.tsv``, ``unseen.tsv``, ``information.json``);
    return the information record."""
    facts = generate_facts(spec)
    out_dir.mkdir(parents=True, exist_ok=True)
    for split in SPLITS:
        write_text(out_dir / f"{split}.tsv", fact_lines(*facts.split(split, spec)))
    train_keys, unseen_keys = facts.split("train", spec)[0], facts.split("unseen", spec)[0]
    floor = spec.min_key_distance
    record = {
        "kind": "facts", "settings": spec.settings(),
        "keys": {"space": spec.key_vocab ** spec.key_length, "min_distance_requested": floor,
                 "min_distance_train": min_distance(train_keys, floor=floor),
                 "min_distance_unseen_to_train": min_distance(unseen_keys, train_keys, floor=floor),
                 "max_keys_bound": max_keys(spec.key_vocab, spec.key_length, floor),
                 "guaranteed_by_sampling": guaranteed_keys(spec.key_vocab, spec.key_length, floor),
                 "candidates_drawn": facts.candidates},
        "information": information_content(spec.count, spec.unseen, spec.value_length, spec.value_vocab,
                                           key_space=spec.key_vocab ** spec.key_length, min_key_distance=floor),
        "splits": {"train": spec.count, "unseen": spec.unseen},
        "sha256": {f"{split}.tsv": sha256_file(out_dir / f"{split}.tsv") for split in SPLITS},
    }
    write_json(out_dir / "information.json", record)
    return record
