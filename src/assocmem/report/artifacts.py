"""Load every pipeline artifact the report needs into one in-memory view."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from assocmem import layout
from assocmem.io import AssocmemError, read_json


@dataclass
class Run:
    """One trained model on one subset, or a pretrained model (subset 'pretrained': no metrics/summary)."""

    exp: str
    model: str
    subset: str
    fraction: float
    metrics: pd.DataFrame | None
    summary: dict[str, Any] | None
    act_meta: dict[str, Any]
    act_dir: Path
    nn_summary: pd.DataFrame
    nn_self: pd.DataFrame
    nn_heldout: pd.DataFrame

    @property
    def label(self) -> str:
        return f"{self.model}/{self.subset}"

    @property
    def trained(self) -> bool:
        return self.metrics is not None

    def activations(self, split: str) -> np.ndarray:
        """(n_layers, n_chunks, d) float32 memmap; split is 'train' or 'heldout'."""
        return np.load(self.act_dir / f"{split}.npy", mmap_mode="r")


@dataclass
class Experiment:
    """Artifacts of one experiment: its token store's meta and source record; QF experiments also have
    the raw manifest, the exact floor and the comparison with McCoy's files."""

    name: str
    config: dict[str, Any]
    token_meta: dict[str, Any]
    source: dict[str, Any]
    manifest: dict[str, Any] | None = None
    floor: dict[str, Any] | None = None
    compare: dict[str, Any] | None = None
    runs: list[Run] = field(default_factory=list)

    @property
    def trained_runs(self) -> list[Run]:
        return [run for run in self.runs if run.trained]


def _read_csv(path: Path) -> pd.DataFrame:
    if not path.exists():
        raise AssocmemError(f"missing artifact: {path}")
    return pd.read_csv(path)


def _read_parquet(path: Path) -> pd.DataFrame:
    if not path.exists():
        raise AssocmemError(f"missing artifact: {path}")
    return pd.read_parquet(path)


def load_run(results: Path, exp: str, model: str, fraction: float | None) -> Run:
    """A trained run (fraction given) or a pretrained model (fraction None)."""
    subset = layout.subset_name(fraction) if fraction is not None else layout.PRETRAINED_SUBSET
    trained = fraction is not None

    def at(name: str) -> Path:
        return layout.path(results, name, exp=exp, model=model, subset=subset)

    return Run(
        exp=exp, model=model, subset=subset, fraction=fraction if trained else 1.0,
        metrics=_read_csv(at("metrics")) if trained else None,
        summary=read_json(at("summary")) if trained else None,
        act_meta=read_json(at("acts_meta")), act_dir=at("acts_meta").parent,
        nn_summary=_read_csv(at("nn_summary")), nn_self=_read_parquet(at("nn_self")),
        nn_heldout=_read_parquet(at("nn_heldout")),
    )


def load_experiments(results_dir: Path, config: dict[str, Any]) -> list[Experiment]:
    results = Path(results_dir)
    experiments = []
    for name, exp_cfg in config["experiments"].items():
        experiment = Experiment(name=name, config=exp_cfg,
                                token_meta=read_json(layout.path(results, "tokens_meta", exp=name)),
                                source=read_json(layout.path(results, "tokens_source", exp=name)))
        if exp_cfg["dataset"]["name"] == "question_formation":
            experiment.manifest = read_json(layout.path(results, "raw_manifest", exp=name))
            experiment.floor = read_json(layout.path(results, "floor", exp=name))
            experiment.compare = read_json(layout.path(results, "compare", exp=name))
        fractions = exp_cfg["subsets"]["fractions"]
        experiment.runs = [load_run(results, name, model, f) for model in exp_cfg["models"] for f in fractions]
        experiment.runs += [load_run(results, name, model, None) for model in exp_cfg["pretrained"]]
        experiments.append(experiment)
    return experiments
