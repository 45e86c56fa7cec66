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

import itertools
import math
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
MAX_MASKS = 256  # sets of positions a key's parts are hashed under; above it candidates are compared pair by pair


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
    near = _near_check(spec.key_length, spec.min_key_distance, spec.key_vocab)
    kept, drawn, idle = 0, 0, 0
    while kept < spec.total:
        batch = rng.integers(0, spec.key_vocab, size=(BATCH, spec.key_length), dtype=np.int64)
        drawn += BATCH
        before = kept
        for row in near.kept_rows(batch, keys[:kept]):
            keys[kept] = batch[row]
            kept += 1
            if kept == spec.total:
                break
        idle = idle + 1 if kept == before else 0
        if idle >= PATIENCE:
            raise AssocmemError(_too_hard(spec, kept, drawn))
    return keys, drawn


def _near_check(length: int, d: int, vocab: int) -> _SharedParts | _Pairwise:
    """The exact check of a candidate against the kept keys: through their shared parts where a key has at most
    MAX_MASKS sets of them, else pair by pair."""
    masks = math.comb(length, _hidden_count(length, d))
    return _SharedParts(length, d, vocab) if masks <= MAX_MASKS else _Pairwise(d)


def _hidden_count(length: int, d: int) -> int:
    """How many positions a near pair may differ on: d - 1, within the key."""
    return min(max(d - 1, 0), length)


class _SharedParts:
    """Keys within distance d - 1 of each other differ on at most m = d - 1 positions, so they agree outside some m
    positions (any m that hold the differing ones), and conversely: a candidate is near a kept key iff it shares
    the key's symbols outside one of the C(length, m) sets of m positions. The kept keys' parts are held in one
    hash set per set of positions, so a candidate costs C(length, m) lookups, not one comparison per kept key. A
    part is held in the narrowest unsigned type of the vocabulary (the same for every batch: equal bytes iff equal
    symbols)."""

    def __init__(self, length: int, d: int, vocab: int) -> None:
        self.symbols = np.min_scalar_type(max(vocab - 1, 0))
        self.parts = [np.array([i for i in range(length) if i not in hidden], dtype=np.intp)
                      for hidden in itertools.combinations(range(length), _hidden_count(length, d))]
        self.seen: list[set[bytes]] = [set() for _ in self.parts]

    def kept_rows(self, batch: np.ndarray, kept_keys: np.ndarray) -> Iterator[int]:
        """Rows of ``batch`` kept in order, each far from the keys kept before it (``kept_keys``: the keys of
        earlier batches, already held in the sets)."""
        symbols = batch.astype(self.symbols)
        codes = list(zip(*(_row_bytes(symbols[:, part]) for part in self.parts), strict=True))
        for row, row_codes in enumerate(codes):
            if not any(code in seen for code, seen in zip(row_codes, self.seen, strict=True)):
                for code, seen in zip(row_codes, self.seen, strict=True):
                    seen.add(code)
                yield row


def _row_bytes(rows: np.ndarray) -> list[bytes]:
    """Each row's symbols as one hashable value (equal bytes: equal rows)."""
    if rows.shape[1] == 0:  # no position left: every key shares the empty part
        return [b""] * len(rows)
    rows = np.ascontiguousarray(rows)
    return rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).ravel().tolist()


class _Pairwise:
    """The check by distances to every kept key (where a key has too many sets of positions to hash)."""

    def __init__(self, d: int) -> None:
        self.d = max(d, 1)  # keys are distinct at any requested distance

    def kept_rows(self, batch: np.ndarray, kept_keys: np.ndarray) -> Iterator[int]:
        """Rows of ``batch`` kept in order: each far enough from ``kept_keys`` and from the rows kept before it."""
        far = _far_from(batch, kept_keys, self.d)
        taken: list[int] = []
        for row in np.flatnonzero(far):
            if not taken or np.count_nonzero(batch[taken] != batch[row], axis=1).min() >= self.d:
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
