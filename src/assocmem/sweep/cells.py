"""A sweep's cells: one row per trained run (model size x training-set size x seed) read from its train artifacts,
and the noise of one run's validation CE at each training-set size."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from assocmem import layout
from assocmem.io import read_json, read_table
from assocmem.stats import clustered_ce
from assocmem.tables import EVAL_ROW_COLUMNS, METRIC_COLUMNS, check_train_tables

LAST_EVALS = 5  # evaluations whose spread measures the noise of a converged run's validation CE


@dataclass(frozen=True)
class SweepRunSpec:
    """One run of a sweep as the config names it, with the train settings its budget rule needs."""

    model: str  # the config's model name
    replicate: int
    fraction: float
    patience: int | None  # early_stopping_patience (evaluations)
    eval_interval: int

    @property
    def label(self) -> str:
        return layout.replicate_label(self.model, self.replicate)

    @property
    def subset(self) -> str:
        return layout.subset_name(self.fraction)


def budget_limited(summary: dict[str, Any], patience: int | None, eval_interval: int) -> bool:
    """True when the step budget ended the run before its early-stopping rule was met: fewer than ``patience``
    evaluations since the best one (without early stopping: the best was the last evaluation). Such a run's
    best validation CE is only an upper bound on what its cell reaches."""
    since_best = int(summary["steps"]) - int(summary["best_step"])
    if patience is None:
        return since_best == 0
    return since_best < patience * int(eval_interval)


def cell_row(run: SweepRunSpec, metrics: pd.DataFrame, summary: dict[str, Any],
             eval_rows: pd.DataFrame) -> dict[str, Any]:
    """The run's best validation CE and what the analyses and the loss-floor claim need beside it. ``eval_se``:
    the clustered SE of the final validation CE over the dev rows (the evaluation sample's noise)."""
    best = int(metrics["val_ce"].idxmin())
    return {"model": run.model, "seed": run.replicate, "label": run.label, "subset": run.subset,
            "fraction": run.fraction, "n_params": summary["n_params"], "n_tokens": summary["subset"]["n_tokens"],
            "val_ce": float(metrics["val_ce"].iloc[best]), "final_val_ce": float(metrics["val_ce"].iloc[-1]),
            "train_ce": float(metrics["train_eval_ce"].iloc[best]), "best_step": int(metrics["step"].iloc[best]),
            "steps": int(summary["steps"]), "stopped_early": bool(summary.get("stopped_early", False)),
            "budget_limited": budget_limited(summary, run.patience, run.eval_interval),
            "late_spread": float(metrics["val_ce"].iloc[-LAST_EVALS:].std(ddof=1)) if len(metrics) > 2 else np.nan,
            "eval_se": clustered_ce(eval_rows["nll"].to_numpy(), eval_rows["tokens"].to_numpy())[1]}


def read_cells(results_dir: Path, exp: str, runs: list[SweepRunSpec]) -> pd.DataFrame:
    """One row per run, from each run's metrics, summary and evaluation rows under ``results_dir``."""
    rows = []
    for run in runs:
        def at(name: str, run: SweepRunSpec = run) -> Path:
            return layout.path(results_dir, name, exp=exp, model=run.label, subset=run.subset)

        metrics, summary = read_table(at("metrics"), columns=METRIC_COLUMNS), read_json(at("summary"))
        eval_rows = read_table(at("eval_rows"), columns=EVAL_ROW_COLUMNS)
        check_train_tables(metrics, eval_rows, summary, run.eval_interval, at)  # no cut or shortened table
        rows.append(cell_row(run, metrics, summary, eval_rows))
    return pd.DataFrame(rows)


def measured_noise(cells: pd.DataFrame) -> tuple[dict[float, float], str]:
    """The noise of one run's validation CE at each D (the comparisons it calibrates are between the cells of one
    D, and a memorising small-D run is far noisier than a full-data one): the standard deviation over seeds pooled
    over the cells of that D when there are several seeds, else the median spread of the last evaluations of the
    runs at that D. Budget-limited runs are left out where a D has cells without them: how far a still-improving
    run got is not the noise of a converged cell's CE."""
    usable = cells
    if "budget_limited" in cells.columns:
        open_cells = cells.groupby(["n_tokens", "n_params"])["budget_limited"].transform("any").astype(bool)
        has_closed = (~open_cells).groupby(cells["n_tokens"]).transform("any")
        usable = cells[~open_cells | ~has_closed]
    if cells["seed"].nunique() > 1:
        within = usable.groupby(["n_tokens", "n_params"])["val_ce"].var(ddof=1)
        noise = within.groupby(level="n_tokens").mean() ** 0.5
        source = ("standard deviation of the best validation CE over seeds, pooled over the cells of each D whose "
                  "runs all met their early-stopping rule")
    else:
        noise = usable.groupby("n_tokens")["late_spread"].median()
        source = f"median standard deviation of the validation CE over each run's last {LAST_EVALS} evaluations"
    return {float(d): float(v) for d, v in noise.items()}, source
