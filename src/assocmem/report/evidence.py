"""What the claims rest on: the artifacts of one run of the pipeline, loaded once, with each run's convergence
status, each scaling sweep's analysis and each memorisation grid's. Claims read from here (``Claim.evaluate``);
nothing here trains a model or searches neighbours: those numbers are artifacts of the stages that own them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from assocmem.report import convergence
from assocmem.report.artifacts import Experiment, Run, load_experiments


def run_key(run: Run) -> str:
    """The key of a run in the convergence table: '<experiment>:<model>/<subset>'."""
    return f"{run.exp}:{run.label}"


def run_convergence(run: Run, margin: float, window: float = convergence.WINDOW) -> convergence.Convergence:
    """The run's status (:mod:`assocmem.report.convergence`); its evaluation noise is the SE of its final val CE on
    the fixed evaluation batches the training job evaluated on (their per-row losses are written by the train
    stage)."""
    if not run.trained:
        return convergence.pretrained(run.label)
    rows = run.eval_rows
    return convergence.assess_with_noise(run.label, run.metrics, rows["nll"].to_numpy(), rows["tokens"].to_numpy(),
                                         margin, window)


def margin_of(exp: Experiment) -> float:
    """The resolution asked of the experiment's runs (convergence.claim_margin of its exact floor, if any)."""
    return convergence.claim_margin(exp.floor["train"]["floor_nats_per_token"] if exp.floor else None)


def floors(exp: Experiment) -> tuple[float, float]:
    """(exact entropy floor of the training data, the floor of a model that memorised the training pool)."""
    train_floor = exp.floor["train"]
    floor = float(train_floor["floor_nats_per_token"])
    return floor, floor - float(train_floor.get("exclusion_bound_nats_per_token", 0.0))


@dataclass
class Evidence:
    """The loaded artifacts of every experiment and what the report derives from them cheaply."""

    experiments: list[Experiment]
    report_cfg: dict[str, Any]
    fig_dir: Path

    @classmethod
    def load(cls, results_dir: Path, config: dict[str, Any], report_cfg: dict[str, Any], fig_dir: Path) -> Evidence:
        return cls(load_experiments(results_dir, config), report_cfg, fig_dir)

    @property
    def seed(self) -> int:
        return int(self.report_cfg["synthetic_seed"])

    @property
    def sweeps(self) -> dict[str, dict[str, Any]]:
        """The scaling-sweep analyses (the sweep stage's, assocmem.sweep.analysis) by experiment; never a
        memorisation grid's (:attr:`memorisation_grids`)."""
        return {exp.name: exp.sweep for exp in self.experiments if exp.sweep is not None}

    @property
    def memorisation_grids(self) -> dict[str, dict[str, Any]]:
        """The memorisation grids' analyses (the sweep stage's on facts, assocmem.memorisation.analysis) by
        experiment."""
        return {exp.name: exp.memorisation for exp in self.experiments if exp.memorisation is not None}

    @cached_property
    def statuses(self) -> dict[str, convergence.Convergence]:
        """Convergence status of every run with activations, keyed by :func:`run_key`."""
        return self.statuses_under(convergence.WINDOW, 1.0)

    def statuses_under(self, window: float, margin_factor: float) -> dict[str, convergence.Convergence]:
        """The statuses under another window and margin (the sensitivity of a verdict to the rule's choices)."""
        return {run_key(run): run_convergence(run, margin_factor * margin_of(exp), window)
                for exp in self.experiments for run in exp.runs}

    @property
    def runs(self) -> list[Run]:
        """Every run with activations and neighbours (trained and pretrained)."""
        return [run for exp in self.experiments for run in exp.runs]

    @property
    def trained_runs(self) -> list[Run]:
        return [run for run in self.runs if run.trained]

    def status(self, run: Run) -> convergence.Convergence:
        return self.statuses[run_key(run)]

    def status_columns(self, runs: list[Run], at_best: bool = False) -> dict[str, list[Any]]:
        """Columns 'usable' and 'status' for a frame with one row per run (claims drop unusable rows). ``at_best``:
        the claim reads the model at its best checkpoint, so a run that over-fitted counts too."""
        return {"usable": [self.status(run).usable_at_best if at_best else self.status(run).usable for run in runs],
                "status": [self.status(run).status for run in runs]}

    def convergence_records(self) -> list[dict[str, Any]]:
        """Each run's convergence status as plain records (for checks.json)."""
        return [{"experiment": key.split(":", 1)[0], **status.as_record()} for key, status in self.statuses.items()]

    @cached_property
    def energy_sets(self) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Per (run, layer): training activations as stored patterns and a seeded sample of held-out activations
        as queries (the inputs of Props. 1-3)."""
        rng = np.random.default_rng(self.seed)
        n_queries = self.report_cfg["energy_queries"]
        patterns, queries = {}, {}
        for run in self.runs:
            train, heldout = run.activations("train"), run.activations("heldout")
            rows = np.sort(rng.choice(heldout.shape[1], size=min(n_queries, heldout.shape[1]), replace=False))
            for slot, layer in enumerate(run.act_meta["layers"]):
                key = f"{run.label}/{layer}"
                patterns[key] = np.asarray(train[slot], dtype=np.float64)
                queries[key] = np.asarray(heldout[slot][rows], dtype=np.float64)
        return patterns, queries

    @property
    def primary_run(self) -> Run:
        """The run closest to the paper's setting: a pretrained model if any, else the deepest model on the
        largest subset."""
        pretrained = [run for run in self.runs if not run.trained]
        if pretrained:
            return pretrained[0]
        return max(self.runs, key=lambda r: (r.fraction, r.summary["model_config"]["n_layer"], r.summary["n_params"]))

    def with_floor(self) -> list[Experiment]:
        """Experiments whose data has an exact entropy floor and that trained something (runs or a sweep)."""
        return [exp for exp in self.experiments
                if exp.floor is not None and (exp.trained_runs or exp.sweep is not None)]
