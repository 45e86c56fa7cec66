"""The train/held-out loop every activation dumper runs: which stores, which seeds, and ``meta.json``.

Training chunks come from the store's (subset's) ``train`` split with ``seed``; held-out chunks from
``heldout_split`` (default: the store's held-out role) with ``seed + 1``. A dumper supplies the per-split work
(``dump_split``: write ``{split}.npy`` and ``{split}.index.parquet``, return the split's info) and its own
top-level ``meta.json`` keys; :func:`dump_splits` adds ``splits`` and ``heldout_split`` and writes the file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assocmem.io import write_json
from assocmem.tokenstore import TokenStore


@dataclass(frozen=True)
class ChunkSplit:
    """One split to dump: ``name`` ("train" or "heldout") names the output files, ``store`` the chunks' source."""

    name: str
    store: TokenStore
    seed: int


@dataclass(frozen=True)
class SplitPlan:
    heldout_split: str  # the store split the "heldout" chunks come from
    train: ChunkSplit
    heldout: ChunkSplit

    @property
    def splits(self) -> tuple[ChunkSplit, ChunkSplit]:
        return self.train, self.heldout


SplitDumper = Callable[[ChunkSplit], dict[str, Any]]


def plan_splits(store_dir: Path, heldout_split: str | None, seed: int) -> SplitPlan:
    """Open the training split and the held-out split (``heldout_split`` or the store's held-out role)."""
    train = TokenStore(store_dir, "train")
    heldout_name = heldout_split or train.roles["heldout"]
    return SplitPlan(heldout_name, ChunkSplit("train", train, seed),
                     ChunkSplit("heldout", TokenStore(store_dir, heldout_name), seed + 1))


def dump_splits(plan: SplitPlan, out_dir: Path, meta: dict[str, Any], dump_split: SplitDumper) -> dict[str, Any]:
    """Run ``dump_split`` on the train then the held-out split and write ``meta`` plus ``splits`` (each split's
    info) and ``heldout_split`` to ``out_dir / "meta.json"``; returns what it wrote."""
    meta = {**meta, "heldout_split": plan.heldout_split,
            "splits": {split.name: dump_split(split) for split in plan.splits}}
    write_json(out_dir / "meta.json", meta)
    return meta
