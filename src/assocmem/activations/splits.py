"""The train/held-out loop every activation dumper runs: which stores, which seeds, and ``meta.json``.

Training chunks come from the store's (subset's) ``train`` split with ``seed``; held-out chunks from
``heldout_split`` (default: the store's held-out role) with ``seed + 1``. A dumper supplies the per-split work
(``dump_split``: write ``{split}.npy`` and ``{split}.index.parquet``, return the split's info), the radius
test's larger last-layer sample of the training split when one is asked for (``dump_radius``: ``radius.npy``,
shape (1, n, d)), and its own top-level ``meta.json`` keys; :func:`dump_splits` adds ``splits``, ``radius`` and
``heldout_split`` and writes the file. Without a larger sample, ``radius.npy`` is the training dump's last layer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assocmem.io import write_bytes, write_json, write_npy
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


def dump_splits(plan: SplitPlan, out_dir: Path, meta: dict[str, Any], dump_split: SplitDumper,
                dump_radius: SplitDumper | None = None) -> dict[str, Any]:
    """Run ``dump_split`` on the train then the held-out split, ``dump_radius`` (None: the training dump's last
    layer) on the train split, and write ``meta`` plus ``splits`` (each split's info), ``radius`` and
    ``heldout_split`` to ``out_dir / "meta.json"``; returns what it wrote."""
    splits = {split.name: dump_split(split) for split in plan.splits}
    radius = dump_radius(plan.train) if dump_radius else _last_layer_of_train(out_dir, splits["train"], meta)
    meta = {**meta, "heldout_split": plan.heldout_split, "splits": splits, "radius": radius}
    write_json(out_dir / "meta.json", meta)
    return meta


def _last_layer_of_train(out_dir: Path, train_info: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    """``radius.npy`` and its index as the training dump's last layer and index (no second pass of the model)."""
    import numpy as np

    train = np.load(out_dir / "train.npy", mmap_mode="r")
    write_npy(out_dir / "radius.npy", np.ascontiguousarray(train[-1:]))
    write_bytes(out_dir / "radius.index.parquet", (out_dir / "train.index.parquet").read_bytes())
    return {**train_info, "layer": meta["layers"][-1]}
