"""A memorisation grid's runs: one row per trained run (model size N x number of facts D x seed), read from its
train artifacts, with whether it stored its facts (recall of the training facts >= ``train.stop_at_recall``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from assocmem import layout
from assocmem.errors import AssocmemError
from assocmem.io import read_json, read_table
from assocmem.sweep.cells import SweepRunSpec
from assocmem.tables import EVAL_ROW_COLUMNS, METRIC_COLUMNS, check_train_tables


def run_row(run: SweepRunSpec, summary: dict[str, Any], metrics: pd.DataFrame, where: Path) -> dict[str, Any]:
    """The run's size, facts and outcome. ``budget_limited``: it ended at its step budget without storing its
    facts, so "not stored" is a bound (more steps might have stored them), not a measurement of capacity.
    ``recall_half_budget``: the best recall of the evaluations within the first half of the step budget (was it
    stored with half the exposures?)."""
    recall_at_end = float(metrics["train_recall"].iloc[-1])
    if "recall" not in summary:
        raise AssocmemError(f"{where} has no recall: the run was not trained with train.stop_at_recall (a "
                            "memorisation grid needs it); rerun its train job")
    if abs(float(summary["recall"]) - recall_at_end) > 1e-12:
        raise AssocmemError(f"{where}: recall {summary['recall']} differs from the last evaluation's "
                            f"{recall_at_end} in metrics.csv; rerun its train job")
    stored = bool(summary["stored"])
    return {"model": run.model, "seed": run.replicate, "label": run.label, "subset": run.subset,
            "fraction": run.fraction, "n_params": int(summary["n_params"]),
            "n_facts": int(summary["subset"]["n_docs"]), "recall": float(summary["recall"]), "stored": stored,
            "steps": int(summary["steps"]), "max_steps": int(summary["max_steps"]),
            "stop_rule": summary["stop_rule"], "budget_limited": not stored and summary["stop_rule"] == "budget",
            "recall_half_budget": _best_recall_within(metrics, summary["max_steps"] / 2)}


def _best_recall_within(metrics: pd.DataFrame, steps: float) -> float:
    early = metrics.loc[metrics["step"] <= steps, "train_recall"]
    return float(early.max()) if len(early) else 0.0


def read_runs(results_dir: Path, exp: str, runs: list[SweepRunSpec]) -> pd.DataFrame:
    """One row per run, from each run's summary and metrics (checked whole) under ``results_dir``."""
    rows = []
    for run in runs:
        def at(name: str, run: SweepRunSpec = run) -> Path:
            return layout.path(results_dir, name, exp=exp, model=run.label, subset=run.subset)

        summary = read_json(at("summary"))
        metrics = read_table(at("metrics"), columns=(*METRIC_COLUMNS, "train_recall"))
        check_train_tables(metrics, read_table(at("eval_rows"), columns=EVAL_ROW_COLUMNS), summary,
                           run.eval_interval, at)
        rows.append(run_row(run, summary, metrics, at("summary")))
    return pd.DataFrame(rows)


def stored_at(runs: pd.DataFrame, threshold: float) -> pd.DataFrame:
    """The runs with "stored" redefined at another recall threshold (<= the one training stopped at: a run that
    stopped on reaching its threshold is stored at every lower one)."""
    return runs.assign(stored=runs["recall"] >= threshold,
                       budget_limited=(runs["recall"] < threshold) & (runs["stop_rule"] == "budget"),
                       stored_at_half_budget=runs["recall_half_budget"] >= threshold)


def grid_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Stored runs / runs of each (N, D) cell: rows N ascending, columns D ascending."""
    cells = runs.groupby(["n_params", "n_facts"]).agg(stored=("stored", "sum"), runs=("stored", "size"),
                                                       budget_limited=("budget_limited", "sum"),
                                                       recall=("recall", "median")).reset_index()
    return cells.sort_values(["n_params", "n_facts"]).reset_index(drop=True)
