"""The stored patterns of a memorisation run, against the paper's radius r* (Sec. 5, eq. (13)).

The paper reads the last layer's activation at each training sample as a stored pattern and the nearest-neighbour
distance between patterns as twice the radius of the ball B_i each one holds (Sec. 6.1: mean NN distance about 20,
"so that a typical B_i of pattern ρ^i has radius 10", against r* = sqrt(n / (2 pi e)) = 7.74 at n = 1024). For a
fact the pattern is the state that retrieves its value: the final-LayerNorm output (what feeds the unembedding, as
GPT-2's last hidden state in the paper) at the fact's ``<sep>``, the position that predicts its first value token.
Distances are exact (float64, all pairs, in blocks on the neighbours engine's device), the pattern itself excluded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from assocmem.knn.engine import Engine
from assocmem.theory.radius import radius_star
from assocmem.tokenstore import TokenStore

BATCH = 512


@torch.no_grad()
def pattern_states(model: torch.nn.Module, store: TokenStore) -> np.ndarray:
    """(facts, d_model): the final-LayerNorm state at every training fact's ``<sep>`` (position loss_from - 1)."""
    position = store.loss_from - 1
    if position < 1:
        raise ValueError(f"{store.store_dir} has no key before its scored tokens (loss_from {store.loss_from})")
    states = []
    for start in range(0, len(store), BATCH):
        rows = np.arange(start, min(start + BATCH, len(store)))
        tokens = torch.from_numpy(store.padded_batch(rows)[:, :position + 1])
        _, hidden = model(tokens, return_hidden=True)
        states.append(hidden[-1][:, position].double().numpy())
    return np.concatenate(states)


def nearest_neighbour_distances(states: np.ndarray, engine: Engine | None = None) -> np.ndarray:
    """Each row's exact Euclidean distance to its nearest other row (float64 throughout), on ``engine``'s torch
    device (default: the CPU) in blocks of query rows within its memory budget: no N x N temporary."""
    engine = Engine() if engine is None else engine
    x = torch.as_tensor(np.asarray(states, dtype=np.float64)).to(engine.torch_device)
    squared = (x * x).sum(dim=1)
    rows = max(1, engine.block_budget() // (2 * 8 * x.shape[0]))  # the block's products and its sums
    nearest = torch.empty(x.shape[0], dtype=torch.float64, device=x.device)
    for start in range(0, x.shape[0], rows):
        block = x[start : start + rows]
        gram = squared[start : start + rows, None] + squared[None, :] - 2.0 * block @ x.T
        own = torch.arange(block.shape[0], device=x.device)
        gram[own, own + start] = torch.inf
        nearest[start : start + rows] = gram.min(dim=1).values
    return np.sqrt(np.maximum(nearest.cpu().numpy(), 0.0))


def pattern_row(model: torch.nn.Module, store_dir: Path, engine: Engine | None = None) -> dict[str, Any]:
    """NN-distance statistics of one run's stored patterns beside r*(n), n = d_model (the paper's reading), their
    distances on ``engine`` (:func:`nearest_neighbour_distances`)."""
    store = TokenStore(store_dir, "train")
    distances = nearest_neighbour_distances(pattern_states(model, store), engine)
    n = int(model.cfg.d_model)
    radius = float(np.median(distances)) / 2.0
    return {"n": n, "patterns": len(distances), "nn_mean": float(distances.mean()),
            "nn_median": float(np.median(distances)), "nn_p05": float(np.quantile(distances, 0.05)),
            "nn_p95": float(np.quantile(distances, 0.95)), "radius": radius, "r_star": float(radius_star(n)),
            "radius_over_r_star": radius / float(radius_star(n))}


def grid_patterns(results_dir: Path, exp: str, runs: list[Any], outcomes: dict[str, dict[str, Any]],
                  engine: Engine | None = None) -> list[dict]:
    """``pattern_row`` of the first seed's run of every model and number of facts (``runs``: the grid's
    :class:`assocmem.sweep.cells.SweepRunSpec`; ``outcomes``: each run's row of
    :func:`assocmem.memorisation.cells.read_runs`, by label/subset), with whether it stored its facts; distances on
    ``engine``."""
    from assocmem import layout
    from assocmem.train import load_model

    rows = []
    for run in runs:
        if run.replicate != 0:
            continue
        model = load_model(layout.path(results_dir, "model", exp=exp, model=run.label, subset=run.subset))
        store_dir = layout.path(results_dir, "subset_meta", exp=exp, subset=run.subset).parent
        outcome = outcomes[f"{run.label}/{run.subset}"]
        rows.append({"model": run.model, "n_params": outcome["n_params"], "n_facts": outcome["n_facts"],
                     "recall": outcome["recall"], **pattern_row(model, store_dir, engine)})
    return rows
