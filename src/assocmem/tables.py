"""The tables the stages write and later stages read back: the columns each must have and the rows its producer
writes, so a reader refuses a damaged, cut or shortened table, naming it (:func:`assocmem.io.expect_rows`), instead
of drawing a changed figure from it (issue 28).

The row counts restate what the producers do, without importing them (no torch or faiss for the report), and
tests hold them to the producers: ``metrics.csv`` and ``eval_rows.parquet`` by :class:`assocmem.train.TrainJob`,
``summary.csv``, ``self.parquet`` and ``heldout.parquet`` by :func:`assocmem.knn.search_activations`,
``radius.parquet`` by :func:`assocmem.knn.radius.radius_searches`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from assocmem.io import expect_rows

METRIC_COLUMNS = ("step", "lr", "train_loss", "train_eval_ce", "val_ce")
EVAL_ROW_COLUMNS = ("row", "nll", "tokens")
NN_SUMMARY_COLUMNS = ("layer", "fraction", "protocol", "count", "mean", "median", "std", "min", "p05", "p95",
                      "n_dim", "method")
NN_HELDOUT_COLUMNS = ("query_row", "rank", "neighbour_row", "distance", "layer")
NN_SELF_COLUMNS = ("fraction", *NN_HELDOUT_COLUMNS)
RADIUS_COLUMNS = ("set", "fraction", "n_patterns", "query", "distance")

At = Callable[[str], Path]  # layout name -> the run's artifact path


def metric_rows(steps: int, eval_interval: int) -> int:
    """Rows of metrics.csv after ``steps`` steps: an evaluation every ``eval_interval`` steps and one at the last
    step (a run stopped early stops right after an evaluation): ceil(steps / eval_interval)."""
    return -(-int(steps) // int(eval_interval))


def summary_rows(n_layers: int, fractions: Sequence[float]) -> int:
    """Rows of the neighbours summary: per layer one self row per distinct fraction and one held-out row."""
    return n_layers * (len({float(f) for f in fractions}) + 1)


def neighbour_rows(n_layers: int, n_train: int, n_heldout: int, fractions: Sequence[float],
                   k: int) -> tuple[int, int]:
    """Rows of the (self, held-out) neighbour frames: k per query, the self queries being each fraction's nested
    subsample of round(fraction * n_train) rows."""
    self_queries = sum(round(float(f) * n_train) for f in fractions)
    return n_layers * self_queries * k, n_layers * n_heldout * k


def radius_rows(numbers: dict[str, Any]) -> int:
    """Rows of radius.parquet from radius.json: every subsample of two or more rows, for the distinct set and, where
    there is one (``gain_rms`` recorded), the gain-free set."""
    sets = 2 if "gain_rms" in numbers else 1
    return sets * sum(size for size in numbers["sizes"] if size >= 2)


def check_train_tables(metrics: Any, eval_rows: Any, summary: dict[str, Any], eval_interval: int, at: At) -> None:
    """metrics.csv holds one row per evaluation of the run's steps, eval_rows.parquet the validation rows recorded in
    summary.json."""
    steps = int(summary["steps"])
    expect_rows(metrics, at("metrics"), metric_rows(steps, eval_interval),
                f"an evaluation every {eval_interval} steps and at the last of the {steps} steps in {at('summary')}")
    if "eval_rows" in summary:  # recorded by the train stage
        expect_rows(eval_rows, at("eval_rows"), int(summary["eval_rows"]),
                    f"the validation rows recorded in {at('summary')}")


def check_neighbour_tables(tables: dict[str, Any], act_meta: dict[str, Any], radius_meta: dict[str, Any],
                           cfg: dict[str, Any], at: At) -> None:
    """The neighbours stage's tables (``tables``: layout name -> frame) hold the rows it writes for the run's
    activations (``act_meta``), its radius numbers and the neighbours config ``cfg`` (k, fractions)."""
    layers, fractions, k = len(act_meta["layers"]), cfg["fractions"], int(cfg["k"])
    n_train, n_heldout = (int(act_meta["splits"][split]["n_chunks"]) for split in ("train", "heldout"))
    source = f"by {at('acts_meta')} and neighbours.k/fractions"
    self_rows, heldout_rows = neighbour_rows(layers, n_train, n_heldout, fractions, k)
    expect_rows(tables["nn_summary"], at("nn_summary"), summary_rows(layers, fractions),
                f"{layers} layers x ({len(set(fractions))} self fractions + held-out), {source}")
    expect_rows(tables["nn_self"], at("nn_self"), self_rows,
                f"{k} neighbours of the self-search queries of {n_train} chunks at fractions {fractions} x {layers} "
                f"layers, {source}")
    expect_rows(tables["nn_heldout"], at("nn_heldout"), heldout_rows,
                f"{k} neighbours of {n_heldout} held-out chunks x {layers} layers, {source}")
    expect_rows(tables["nn_radius"], at("nn_radius"), radius_rows(radius_meta),
                f"the subsample sizes recorded in {at('nn_radius_meta')}")
