"""Load every pipeline artifact the report needs into one in-memory view."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from assocmem import layout
from assocmem.config import evaluated_runs, run_settings
from assocmem.dataset_kinds import kind_of
from assocmem.io import load_npy, read_json, read_table
from assocmem.sweep.analysis import from_json
from assocmem.tables import (
    EVAL_ROW_COLUMNS,
    METRIC_COLUMNS,
    NN_HELDOUT_COLUMNS,
    NN_SELF_COLUMNS,
    NN_SUMMARY_COLUMNS,
    RADIUS_COLUMNS,
    check_neighbour_tables,
    check_train_tables,
)


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
    radius: pd.DataFrame  # last-layer NN distances among distinct prefixes (and gain-free), by the neighbours stage
    radius_meta: dict[str, Any]
    eval_rows: pd.DataFrame | None  # per-row losses of the final model on the validation batches (trained runs)
    evaluation: dict[str, Any] | None = None  # the evaluate stage's sets (full-data runs of audited data)

    @property
    def label(self) -> str:
        return f"{self.model}/{self.subset}"

    @property
    def trained(self) -> bool:
        return self.metrics is not None

    @property
    def checkpoint(self) -> str:
        """Which weights the activations come from: 'best' (lowest validation CE) or 'final'."""
        return self.act_meta.get("checkpoint", "final")

    def checkpoint_metrics(self) -> pd.Series:
        """The metrics row of the checkpoint the activations come from."""
        if self.checkpoint == "best":
            return self.metrics.loc[self.metrics["val_ce"].idxmin()]
        return self.metrics.iloc[-1]

    def activations(self, split: str) -> np.ndarray:
        """(n_layers, n_chunks, d) float32 memmap; split is 'train' or 'heldout'."""
        meta = self.act_meta
        return load_npy(self.act_dir / f"{split}.npy", dtype="float32",
                        shape=(len(meta["layers"]), meta["splits"][split]["n_chunks"], meta["d_model"]))


@dataclass
class Experiment:
    """Artifacts of one experiment: its token store's meta and source record; a kind with a data stage also has
    that stage's record (QF: the raw manifest; facts: information.json, the exact information content), and an
    audited one the exact floor and the comparison with the real files."""

    name: str
    config: dict[str, Any]
    token_meta: dict[str, Any]
    source: dict[str, Any]
    manifest: dict[str, Any] | None = None
    floor: dict[str, Any] | None = None
    compare: dict[str, Any] | None = None
    runs: list[Run] = field(default_factory=list)
    sweep: dict[str, Any] | None = None  # a scaling sweep's analysis (the sweep stage's, assocmem.sweep.analysis)
    memorisation: dict[str, Any] | None = None  # a memorisation grid's analysis (assocmem.memorisation.analysis)

    @property
    def trained_runs(self) -> list[Run]:
        return [run for run in self.runs if run.trained]


def load_run(results: Path, exp: str, exp_cfg: dict[str, Any], model: str, fraction: float | None,
             evaluated: bool = False) -> Run:
    """A trained run (fraction given) or a pretrained model (fraction None) of experiment ``exp`` (its config
    ``exp_cfg``), every table checked against what its producer wrote (:func:`check_run_tables`); ``evaluated``:
    the evaluate stage ran on it."""
    subset = layout.subset_name(fraction) if fraction is not None else layout.PRETRAINED_SUBSET
    trained = fraction is not None

    def at(name: str) -> Path:
        return layout.path(results, name, exp=exp, model=model, subset=subset)

    run = Run(
        exp=exp, model=model, subset=subset, fraction=fraction if trained else 1.0,
        metrics=read_table(at("metrics"), columns=METRIC_COLUMNS) if trained else None,
        summary=read_json(at("summary")) if trained else None,
        act_meta=read_json(at("acts_meta")), act_dir=at("acts_meta").parent,
        nn_summary=read_table(at("nn_summary"), columns=NN_SUMMARY_COLUMNS),
        nn_self=read_table(at("nn_self"), columns=NN_SELF_COLUMNS),
        nn_heldout=read_table(at("nn_heldout"), columns=NN_HELDOUT_COLUMNS),
        radius=read_table(at("nn_radius"), columns=RADIUS_COLUMNS), radius_meta=read_json(at("nn_radius_meta")),
        eval_rows=read_table(at("eval_rows"), columns=EVAL_ROW_COLUMNS) if trained else None,
        evaluation=read_json(at("evaluation")) if evaluated else None,
    )
    check_run_tables(run, exp_cfg, at)
    return run


def check_run_tables(run: Run, exp_cfg: dict[str, Any], at: Callable[[str], Path]) -> None:
    """Each table of the run holds the rows its producer wrote (:mod:`assocmem.tables`): a damaged, cut or
    shortened one is refused, naming it, instead of changing a figure."""
    tables = {"nn_summary": run.nn_summary, "nn_self": run.nn_self, "nn_heldout": run.nn_heldout,
              "nn_radius": run.radius}
    check_neighbour_tables(tables, run.act_meta, run.radius_meta, exp_cfg["neighbours"], at)
    if run.trained:
        eval_interval = run_settings(exp_cfg, run.model)[1]["eval_interval"]
        check_train_tables(run.metrics, run.eval_rows, run.summary, eval_interval, at)


def load_grid_analysis(experiment: Experiment, results_dir: Path) -> None:
    """The grid's analysis from the file of the rule that wrote it (``dataset_kinds.grid_analysis``): a memorisation
    grid's ``memorisation/analysis.json`` (:mod:`assocmem.memorisation.analysis`, plain JSON) as ``memorisation``, a
    scaling sweep's ``sweep/analysis.json`` (through :func:`assocmem.sweep.analysis.from_json`) as ``sweep``. Two
    analyses, two files: nothing reads a field of the JSON to tell them apart."""
    rule = kind_of(experiment.config["dataset"]).grid_analysis
    analysis = read_json(layout.path(Path(results_dir), f"{rule}_analysis", exp=experiment.name))
    if rule == "memorisation":
        experiment.memorisation = analysis
    else:
        experiment.sweep = from_json(analysis)


def load_experiments(results_dir: Path, config: dict[str, Any]) -> list[Experiment]:
    results = Path(results_dir)
    experiments = []
    for name, exp_cfg in config["experiments"].items():
        experiment = Experiment(name=name, config=exp_cfg,
                                token_meta=read_json(layout.path(results, "tokens_meta", exp=name)),
                                source=read_json(layout.path(results, "tokens_source", exp=name)))
        kind = kind_of(exp_cfg["dataset"])
        if kind.raw_splits:
            experiment.manifest = read_json(layout.path(results, kind.raw_record, exp=name))
        if kind.audited:
            experiment.floor = read_json(layout.path(results, "floor", exp=name))
            experiment.compare = read_json(layout.path(results, "compare", exp=name))
        fractions = exp_cfg["subsets"]["fractions"]
        if exp_cfg.get("sweep") is not None:
            load_grid_analysis(experiment, results)
            experiments.append(experiment)
            continue
        evaluated = set(evaluated_runs(exp_cfg))
        experiment.runs = [load_run(results, name, exp_cfg, model, f, (model, f) in evaluated)
                           for model in exp_cfg["models"] for f in fractions]
        experiment.runs += [load_run(results, name, exp_cfg, model, None) for model in exp_cfg["pretrained"]]
        experiments.append(experiment)
    return experiments
