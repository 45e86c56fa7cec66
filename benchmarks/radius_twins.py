"""The radius test's "distinct" rows against distinct token prefixes, in a finished run's results.

``assocmem.knn.radius.distinct_rows`` tells rows apart by their bytes. One token prefix computed in two batches of
the activation dump can round apart, and its two vectors then count as two patterns, each the other's nearest
neighbour at ~1e-6. For each run's radius sample this prints the byte-distinct rows, the distinct token prefixes,
the twins (byte-distinct rows whose nearest byte-distinct neighbour is closer than ``--tolerance``), the nearest
pair left once twins are merged, and the mean and median NN distance (raw last-layer vectors, float64, exact) with
and without the twins merged.

    python benchmarks/radius_twins.py results/qf --runs L2/pct1 L4/pct1 [--out twins.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from assocmem.knn.radius import distinct_rows
from assocmem.tokenstore import TokenStore


def nearest(x: torch.Tensor, block: int = 4096) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's nearest other row of ``x``: (distance, index), exact in float64."""
    dists, ids = [], []
    for start in range(0, len(x), block):
        d = torch.cdist(x[start:start + block], x)
        d[torch.arange(d.shape[0]), torch.arange(start, start + d.shape[0])] = float("inf")
        best = d.min(1)
        dists.append(best.values)
        ids.append(best.indices)
    return torch.cat(dists), torch.cat(ids)


def merge_twins(x: torch.Tensor, tolerance: float, block: int = 4096) -> torch.Tensor:
    """Rows of ``x`` left when every row within ``tolerance`` of an earlier one is dropped."""
    keep = torch.ones(len(x), dtype=torch.bool)
    for start in range(0, len(x), block):
        d = torch.cdist(x[start:start + block], x)
        for i, j in torch.nonzero(d < tolerance).tolist():
            if j < start + i:
                keep[start + i] = False
    return x[keep]


def prefixes(store: TokenStore, index: pd.DataFrame) -> int:
    seen = {store.tokens_at(store.offsets[row] + np.arange(pos + 1)).tobytes()
            for row, pos in zip(index["seq_row"], index["position"], strict=True)}
    return len(seen)


def measure(exp_dir: Path, run: str, tolerance: float) -> dict[str, float | int | str]:
    model, subset = run.split("/")
    folder = exp_dir / "activations" / model / subset
    last = np.load(folder / "radius.npy")[-1]
    index = pd.read_parquet(folder / "radius.index.parquet")
    rows = distinct_rows(last)
    x = torch.from_numpy(last[rows]).double()
    nn, _ = nearest(x)
    merged = merge_twins(x, tolerance)
    nn_merged, _ = nearest(merged)
    twins = nn[nn < tolerance]
    return {"run": run, "chunks": len(last), "byte_distinct": int(rows.size),
            "token_prefixes": prefixes(TokenStore(exp_dir / "data" / "subsets" / subset, "train"), index),
            "twins": int(twins.numel()), "twin_nn_min": float(twins.min()) if twins.numel() else float("nan"),
            "twin_nn_max": float(twins.max()) if twins.numel() else float("nan"), "merged": len(merged),
            "nearest_pair_merged": float(nn_merged.min()), "mean_nn": float(nn.mean()),
            "mean_nn_merged": float(nn_merged.mean()), "mean_rise": float(nn_merged.mean() / nn.mean() - 1),
            "median_nn": float(nn.median()), "median_nn_merged": float(nn_merged.median()),
            "median_rise": float(nn_merged.median() / nn.median() - 1), "tolerance": tolerance}


def line(m: dict) -> str:
    return (f"{m['run']}: {m['chunks']} chunks, {m['byte_distinct']} byte-distinct rows, "
            f"{m['token_prefixes']} distinct token prefixes; {m['twins']} twins "
            f"(NN < {m['tolerance']:g}: {m['twin_nn_min']:.2e}–{m['twin_nn_max']:.2e}); "
            f"merged {m['merged']} rows, nearest pair {m['nearest_pair_merged']:.4f}; "
            f"mean NN {m['mean_nn']:.5f} -> {m['mean_nn_merged']:.5f} ({m['mean_rise'] * 100:+.2f} %), "
            f"median {m['median_nn']:.5f} -> {m['median_nn_merged']:.5f} ({m['median_rise'] * 100:+.2f} %)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("exp_dir", type=Path, help="an experiment's results, e.g. results/qf")
    parser.add_argument("--runs", nargs="+", default=["L2/pct1", "L4/pct1"])
    parser.add_argument("--tolerance", type=float, default=1e-4)
    parser.add_argument("--out", type=Path, help="also write the numbers as JSON here")
    args = parser.parse_args()
    found = [measure(args.exp_dir, run, args.tolerance) for run in args.runs]
    for m in found:
        print(line(m))
    if args.out:
        args.out.write_text(json.dumps({"schema": "assocmem-radius-twins-v1", "runs": found}, indent=2) + "\n")


if __name__ == "__main__":
    main()
