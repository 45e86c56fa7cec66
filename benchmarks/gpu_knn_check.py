"""The k-NN part of the GPU check (issue 40): the torch engine on CUDA at the paper's Fig. 2 shape (80,000 x 1024,
k = 10, Gaussian rows, seed 0) against faiss on the CPU cores of the same machine, and its ids against faiss's.

Measurements, one JSON line each (also appended to DIR/knn_check.jsonl with --out DIR):

  * torch_search   the torch engine's float32 candidate search alone (fp32 GEMM + topk, TF32 off), all queries;
  * torch_knn      the project's knn on the torch engine: self match excluded by id, duplicates grouped, centring,
                   the verified float64 refine; all queries;
  * faiss_knn      the project's knn on the faiss engine on the CPU cores, on a query sample (>= 4,096 queries) and
                   extrapolated to all queries when the whole run would take over --faiss-budget seconds
                   (``extrapolated``: true);
  * faiss_flat     faiss.knn (IndexFlatL2's search) as is on the CPU cores, the same sample and extrapolation;
  * agreement      ids of torch_knn against faiss_knn on the sample (the same contract: they should be equal) and
                   against raw faiss.knn (float32 ties may differ there);
  * host_*         the host work knn does before it searches, each step timed alone on the whole array: the
                   finiteness check, the duplicate-row hashing, the mean, the centred copy, the rows' squared norms.

Without CUDA it runs the torch engine on the CPU and says so (``device``). --dry-run: 2,000 x 64 unless --n or --dim
say otherwise, seconds on a CPU.

    python benchmarks/gpu_knn_check.py [--n N] [--dim D] [--k K] [--out DIR] [--dry-run]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from assocmem.autotune.measure import cpu_model_and_flags
from assocmem.knn import DEFAULT_QUERY_BATCH, Engine, knn
from assocmem.knn.duplicates import duplicate_groups
from assocmem.knn.inputs import as_matrix
from assocmem.knn.shards import Shards
from assocmem.knn.torch_engine import TorchSearch
from assocmem.runtime import set_threads
from assocmem.runtime.blas import import_faiss

MIN_SAMPLE = 4096


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=None, help="rows (default 80,000; 2,000 with --dry-run)")
    parser.add_argument("--dim", type=int, default=None, help="dimension (default 1024; 64 with --dry-run)")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--out", type=Path, default=None, help="append the JSON lines to DIR/knn_check.jsonl")
    parser.add_argument("--dry-run", action="store_true", help="a small shape, seconds on a CPU")
    parser.add_argument("--faiss-budget", type=float, default=60.0,
                        help="seconds faiss may take on all queries before it is timed on a sample")
    args = parser.parse_args(argv)
    args.n = args.n or (2000 if args.dry_run else 80_000)
    args.dim = args.dim or (64 if args.dry_run else 1024)
    return args


def host() -> dict[str, Any]:
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"cpu": cpu_model_and_flags()[0], "cores": os.cpu_count(), "gpu": gpu, "torch": torch.__version__,
            "faiss": import_faiss().__version__, "date": time.strftime("%Y-%m-%d %H:%M:%S")}


def timed(run: Callable[[], Any], device: str) -> tuple[float, Any]:
    """Seconds of one call, the device synchronised on both sides."""
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    sync()
    start = time.perf_counter()
    result = run()
    sync()
    return time.perf_counter() - start, result


def query_sample(n: int, seed: int = 1) -> np.ndarray:
    size = min(n, MIN_SAMPLE)
    return np.sort(np.random.default_rng(seed).choice(n, size=size, replace=False))


def torch_measurements(x: np.ndarray, k: int, engine: Engine) -> tuple[list[dict[str, Any]], np.ndarray]:
    everyone = np.arange(len(x))
    knn(x[:2048], x[:2048], k, engine=engine, exclude_ids=everyone[:2048])  # warm-up: CUDA context, kernels
    shards = Shards(x, None, center=True)
    queries = shards.centre(x, True)
    search = TorchSearch(shards, engine, DEFAULT_QUERY_BATCH)
    search(queries[:2048], k + 1)
    search_s, _ = timed(lambda: search(queries, k + 1), engine.device)
    knn_s, (_, ids) = timed(lambda: knn(x, x, k, engine=engine, exclude_ids=everyone), engine.device)
    rows = [{"measure": "torch_search", "seconds": search_s, "queries": len(x), "extrapolated": False},
            {"measure": "torch_knn", "seconds": knn_s, "queries": len(x), "extrapolated": False}]
    return rows, ids


def host_measurements(x: np.ndarray, k: int) -> list[dict[str, Any]]:
    """Seconds of each step of knn's host work before its search (a self-search's, on the whole array)."""
    shards = Shards(x, None, center=True)
    steps = {"host_finite_check": lambda: as_matrix("database", x), "host_duplicates": lambda: duplicate_groups(x, k),
             "host_mean": lambda: Shards(x, None, center=True), "host_centred_copy": lambda: shards.centre(x, True),
             "host_squared_norms": shards.squared_norms}
    return [{"measure": name, "seconds": timed(step, "cpu")[0], "queries": len(x), "extrapolated": False}
            for name, step in steps.items()]


def faiss_measurement(name: str, run: Callable[[np.ndarray], np.ndarray], n: int, sample: np.ndarray,
                      budget_s: float) -> tuple[dict[str, Any], np.ndarray]:
    """Seconds for all n queries: measured on ``sample`` and extrapolated when the whole run would exceed the
    budget, else measured on all; with the sample's ids."""
    sample_s, sample_ids = timed(lambda: run(sample), "cpu")
    if sample_s * n / len(sample) > budget_s or len(sample) == n:
        return {"measure": name, "seconds": sample_s * n / len(sample), "queries": len(sample),
                "extrapolated": len(sample) < n}, sample_ids
    all_s, _ = timed(lambda: run(np.arange(n)), "cpu")
    return {"measure": name, "seconds": all_s, "queries": n, "extrapolated": False}, sample_ids


def agreement(torch_ids: np.ndarray, faiss_ids: np.ndarray, flat_ids: np.ndarray, k: int) -> dict[str, Any]:
    recall = np.mean([len(set(a) & set(b)) / k for a, b in zip(torch_ids, flat_ids, strict=True)])
    return {"measure": "agreement", "queries": len(torch_ids),
            "ids_equal_faiss_knn": float(np.mean(torch_ids == faiss_ids)),
            "ids_equal_faiss_flat": float(np.mean(torch_ids == flat_ids)), "recall_vs_faiss_flat": float(recall)}


def flat_search(x: np.ndarray, k: int) -> Callable[[np.ndarray], np.ndarray]:
    """faiss.knn as is (k + 1, then the query's own row dropped by id, the last column where it is absent)."""
    faiss = import_faiss()

    def run(rows: np.ndarray) -> np.ndarray:
        _, ids = faiss.knn(np.ascontiguousarray(x[rows]), x, k + 1)
        own = ids == rows[:, None]
        drop = np.where(own.any(axis=1), own.argmax(axis=1), k)
        keep = np.ones(ids.shape, dtype=bool)
        keep[np.arange(len(rows)), drop] = False
        return ids[keep].reshape(len(rows), k)

    return run


def table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'measure':<20} {'seconds':>10} {'queries':>8} {'ms/query':>9}  note"]
    for row in rows:
        if "seconds" not in row:
            continue
        per_query = 1e3 * row["seconds"] / row["n"]
        note = f"extrapolated from {row['queries']} queries" if row["extrapolated"] else ""
        lines.append(f"{row['measure']:<20} {row['seconds']:10.3f} {row['queries']:8d} {per_query:9.4f}  {note}")
    check = next(row for row in rows if row["measure"] == "agreement")
    lines.append(f"ids equal on {check['queries']} queries: {check['ids_equal_faiss_knn']:.4%} against knn on faiss, "
                 f"{check['ids_equal_faiss_flat']:.4%} against raw faiss.knn "
                 f"(recall {check['recall_vs_faiss_flat']:.4f})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    args = parse(argv)
    threads = set_threads(os.cpu_count() or 1)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    common = {"n": args.n, "dim": args.dim, "k": args.k, "device": device, "cpu_threads": threads, **host()}
    x = np.random.default_rng(0).standard_normal((args.n, args.dim), dtype=np.float32)
    rows, torch_ids = torch_measurements(x, args.k, Engine("torch", device))
    sample = query_sample(args.n)
    faiss_row, faiss_ids = faiss_measurement(
        "faiss_knn", lambda q: knn(x, x[q], args.k, engine=Engine("faiss"), exclude_ids=q)[1], args.n, sample,
        args.faiss_budget)
    flat_row, flat_ids = faiss_measurement("faiss_flat", flat_search(x, args.k), args.n, sample, args.faiss_budget)
    rows += [faiss_row, flat_row, agreement(torch_ids[sample], faiss_ids, flat_ids, args.k),
             *host_measurements(x, args.k + 1)]
    rows = [{**common, **row} for row in rows]
    for row in rows:
        print(json.dumps(row), flush=True)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        with open(args.out / "knn_check.jsonl", "a") as out:
            out.writelines(json.dumps(row) + "\n" for row in rows)
    print(table(rows), flush=True)
    return rows


if __name__ == "__main__":
    main()
