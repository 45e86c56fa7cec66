"""The neighbours stage on arrays: every layer's self-search and held-out search (exact or IVF) and the
nearest-neighbour distance summary per layer, fraction and protocol."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from assocmem.errors import AssocmemError
from assocmem.knn.engine import Engine, resolve_engine
from assocmem.knn.ivf import ivf_heldout_search, ivf_self_search
from assocmem.knn.protocols import heldout_search, self_search
from assocmem.knn.radius import radius_searches, rms_norm
from assocmem.runtime.blas import check_blas_core

log = logging.getLogger(__name__)

SUMMARY_COLUMNS = ("count", "mean", "median", "std", "min", "p05", "p95")


def summarise(df: pd.DataFrame, group_cols: Sequence[str]) -> pd.DataFrame:
    """Nearest-neighbour (rank 1) distance statistics per group.

    Columns: ``group_cols`` then count, mean, median, std (ddof=1), min, p05, p95 (linear-interpolated
    percentiles). An empty ``group_cols`` gives one row over everything.
    """
    group_cols = list(group_cols)
    missing = [c for c in [*group_cols, "rank", "distance"] if c not in df.columns]
    if missing:
        raise AssocmemError(f"summarise: DataFrame lacks column(s) {missing}; has {list(df.columns)}")
    nearest = df.loc[df["rank"] == 1, [*group_cols, "distance"]]
    nearest = nearest.assign(distance=nearest["distance"].astype(np.float64))
    keys = group_cols or np.zeros(len(nearest), dtype=np.int64)
    stats = nearest.groupby(keys, sort=True)["distance"].agg(
        count="count",
        mean="mean",
        median="median",
        std="std",
        min="min",
        p05=lambda s: s.quantile(0.05),
        p95=lambda s: s.quantile(0.95),
    )
    if group_cols:
        return stats.reset_index()[[*group_cols, *SUMMARY_COLUMNS]]
    return stats.reset_index(drop=True)[list(SUMMARY_COLUMNS)]


def search_layer(x: np.ndarray, q: np.ndarray, cfg: dict[str, Any], seed: int, engine: Engine | None = None
                 ) -> tuple[pd.DataFrame, pd.DataFrame, list[dict[str, Any]]]:
    """Self-search of one layer's training activations at every subsample fraction, and held-out queries
    against them: exact (default) or IVF, which also returns its measured recall@k. ``engine``: the job's
    (:func:`job_engine`; None: resolved from ``cfg`` here)."""
    k, fractions = cfg["k"], tuple(cfg["fractions"])
    if engine is None:
        engine = resolve_engine(cfg["device"], cfg.get("cpu_engine", "auto"))
    if cfg["method"] == "exact":
        return (self_search(x, k, fractions=fractions, seed=seed, engine=engine),
                heldout_search(x, q, k, engine=engine), [])
    ivf = {"nlist": cfg["nlist"], "nprobe": cfg["nprobe"], "sample": cfg["recall_sample"], "seed": seed,
           "engine": engine}
    self_df, self_recall = ivf_self_search(x, k, fractions, **ivf)
    held_df, held_recall = ivf_heldout_search(x, q, k, **ivf)
    recall = [{"fraction": f, "protocol": "self", "recall_at_k": r} for f, r in self_recall.items()]
    return self_df, held_df, recall + [{"fraction": 1.0, "protocol": "heldout", "recall_at_k": held_recall}]


def job_engine(cfg: dict[str, Any], n_train: int, n_heldout: int, n_radius: int, dim: int,
               threads: int | None = None) -> Engine:
    """The engine of a whole neighbours job (:func:`assocmem.knn.engine.resolve_engine`); on the CPU its engine is
    timed at the job's largest exact search: the radius test's sample (at most ``radius_sample_max`` of its
    ``n_radius`` rows) against itself and, for ``method: exact``, the self-search of all ``n_train`` rows and the
    ``n_heldout`` held-out queries against them."""
    radius = min(n_radius, cfg.get("radius_sample_max") or n_radius)
    searches = [(radius, radius)] + ([(n_train, n_train), (n_heldout, n_train)] if cfg["method"] == "exact" else [])
    queries, rows = max(searches, key=lambda search: search[0] * search[1])
    return resolve_engine(cfg["device"], cfg.get("cpu_engine", "auto"), (queries, rows, dim, int(cfg["k"]) + 1),
                          threads=threads)


def search_activations(train: np.ndarray, heldout: np.ndarray, layers: Sequence[str], cfg: dict[str, Any],
                       seed: int, engine: Engine | None = None) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Every layer of (n_layers, n_chunks, d) activation arrays: (self frame, held-out frame, summary), on the
    job's ``engine`` (None: resolved from ``cfg`` per layer)."""
    log.info("BLAS for exact search: %s; engine: %s", check_blas_core(), engine)
    self_frames, held_frames, recalls = [], [], []
    for slot, layer in enumerate(layers):
        x = np.ascontiguousarray(train[slot], dtype=np.float32)
        q = np.ascontiguousarray(heldout[slot], dtype=np.float32)
        self_df, held_df, recall = search_layer(x, q, cfg, seed, engine)
        self_frames.append(self_df.assign(layer=layer))
        held_frames.append(held_df.assign(layer=layer))
        recalls += [{"layer": layer, **row} for row in recall]
    self_df = pd.concat(self_frames, ignore_index=True)
    held_df = pd.concat(held_frames, ignore_index=True)
    summary = pd.concat([
        summarise(self_df, ["layer", "fraction"]).assign(protocol="self"),
        summarise(held_df.assign(fraction=1.0), ["layer", "fraction"]).assign(protocol="heldout"),
    ], ignore_index=True)
    summary["n_dim"] = int(train.shape[2])
    summary["method"] = cfg["method"]
    if recalls:
        summary = summary.merge(pd.DataFrame(recalls), on=["layer", "fraction", "protocol"], how="left")
    return self_df, held_df, summary


def search_radius(sample: np.ndarray, train: np.ndarray, layers: Sequence[str], cfg: dict[str, Any], seed: int,
                  affine: tuple[np.ndarray, np.ndarray] | None, engine: Engine | None = None
                  ) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The radius test's searches (see :mod:`.radius`) on its last-layer sample (n_chunks, d), always exact, up to
    ``cfg["radius_sample_max"]`` distinct rows, with the RMS norm of every layer of the (n_layers, n_chunks, d)
    training activations. ``affine``: the final norm's (gain, bias) when the last layer is its output, else
    None. ``engine``: the job's (None: resolved from ``cfg``)."""
    if engine is None:
        engine = resolve_engine(cfg["device"], cfg.get("cpu_engine", "auto"))
    frame, numbers = radius_searches(sample, cfg["fractions"], seed, affine, max_size=cfg.get("radius_sample_max"),
                                     engine=engine)
    numbers.update(layer=layers[-1], layer_rms_norm={layer: rms_norm(train[slot]) for slot, layer in enumerate(layers)})
    return frame, numbers
