"""Exact k-NN speed (assocmem.knn.knn) against the hardware: arms interleaved in one process.

Part 1, speed: a Gaussian self-search (N x n, k) timed round by round in a rotating order:
  * peak      fp32 GEMM (N-row blocks of 4096 x n times n x 4096): faiss's bundled OpenBLAS (cblas_sgemm), torch
              (MKL) and oneDNN; the largest is the machine's peak of that round;
  * numpy     float32 BLAS ||q||^2 + ||x||^2 - 2<q, x> per query block, then argpartition;
  * torch     GEMM + topk in query blocks;
  * raw       faiss brute force as is (refine=False, center=False);
  * raw-onednn the same through the onednn engine (oneDNN distance GEMM + torch.topk, refine=False, center=False);
  * default   the project's knn: self match excluded by id, duplicates grouped, centring, verified refine
              (cpu_engine auto: the faster engine at this shape, timed once and cached; assocmem.autotune);
  * default-faiss the same on the faiss engine;
  * default-torch the same on the torch engine (fp32 GEMM + topk in blocks; the engine CUDA runs without faiss-GPU).
It prints each arm's GFLOP/s as a share of the same round's GEMM peak (2 N^2 n FLOPs), the default path's
cost over raw faiss, id agreement, and the BLAS core type faiss's OpenBLAS runs with.

Part 2, --scaling (issue 10): the neighbours stage (assocmem.knn.search_layer: self-search at four nested
fractions plus held-out queries) on growing numbers of chunks, from real activations (--acts DIR: an activations
directory, layer --layer) or synthetic ones with Question-Formation's duplicate structure (short shared prefixes:
a few thousand distinct rows repeat, the rest are distinct). Prints seconds against the search FLOPs and the
time the smallest size predicts by FLOPs.

    python benchmarks/bench_neighbours.py --quick 2>/dev/null
    python benchmarks/bench_neighbours.py --rows 20000 --rounds 3 2>/dev/null
    python benchmarks/bench_neighbours.py --scaling --acts results/qf/activations/L4/pct100 --layer 1 2>/dev/null

(``2>/dev/null`` hides the tqdm progress bars.) Asserts nothing and writes no files.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from assocmem.autotune.measure import rotated
from assocmem.gemm import onednn_available, onednn_linear
from assocmem.knn import knn, search_layer
from assocmem.knn.engine import Engine, resolve_engine
from assocmem.runtime import set_threads
from assocmem.runtime.blas import check_blas_core, faiss_openblas_library, import_faiss

FAISS = Engine("faiss")

# --------------------------------------------------------------------------- the arms


def numpy_knn(database: np.ndarray, queries: np.ndarray, k: int, block: int = 4096) -> np.ndarray:
    """Baseline: float32 BLAS ||q||^2 + ||x||^2 - 2<q, x> per query block, argpartition, then sort the k."""
    db_norms = np.einsum("ij,ij->i", database, database)
    ids = np.empty((len(queries), k), dtype=np.int64)
    for start in range(0, len(queries), block):
        q = queries[start:start + block]
        sq = db_norms[None, :] - 2.0 * (q @ database.T) + np.einsum("ij,ij->i", q, q)[:, None]
        part = np.argpartition(sq, k - 1, axis=1)[:, :k]
        order = np.argsort(np.take_along_axis(sq, part, axis=1), axis=1)
        ids[start:start + block] = np.take_along_axis(part, order, axis=1)
    return ids


def torch_knn(database: np.ndarray, queries: np.ndarray, k: int, block: int = 4096) -> np.ndarray:
    """torch GEMM + topk: ||x||^2 - 2<q, x> per query block (||q||^2 does not change the order)."""
    x, q_all = torch.from_numpy(database), torch.from_numpy(queries)
    norms = (x * x).sum(dim=1)
    ids = []
    for start in range(0, len(queries), block):
        scores = torch.addmm(norms[None, :], q_all[start:start + block], x.T, alpha=-2.0)
        ids.append(torch.topk(scores, k, dim=1, largest=False, sorted=True).indices)
    return torch.cat(ids).numpy()


def openblas_sgemm() -> Callable[[np.ndarray, np.ndarray, np.ndarray], None] | None:
    """C = A B^T with the OpenBLAS that faiss-cpu bundles (what faiss's brute force runs on), or None."""
    library = faiss_openblas_library()
    if library is None:
        return None
    lib = ctypes.CDLL(library)
    row_major, no_trans, trans = 101, 111, 112

    def sgemm(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None:
        (m, n), rows = a.shape, b.shape[0]
        lib.cblas_sgemm(row_major, no_trans, trans, m, rows, n, ctypes.c_float(1.0), a.ctypes.data_as(ctypes.c_void_p),
                        n, b.ctypes.data_as(ctypes.c_void_p), n, ctypes.c_float(0.0),
                        c.ctypes.data_as(ctypes.c_void_p), rows)

    return sgemm


def gemm_peak(dim: int, seconds: float = 1.0) -> dict[str, float]:
    """Best FLOP/s of 4096 x dim x 4096 fp32 GEMMs (the shape of the k-NN's distance blocks), per library."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((4096, dim), dtype=np.float32), rng.standard_normal((4096, dim), dtype=np.float32)
    c = np.empty((4096, 4096), dtype=np.float32)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    runs = {"torch": lambda: torch.mm(ta, tb.T)}
    if onednn_available():
        runs["onednn"] = lambda: onednn_linear(ta, tb)
    sgemm = openblas_sgemm()
    if sgemm is not None:
        runs["faiss_openblas"] = lambda: sgemm(a, b, c)
    rates = {}
    for name, run in runs.items():
        run()
        best, start = 0.0, time.perf_counter()
        while time.perf_counter() - start < seconds / len(runs):
            t0 = time.perf_counter()
            run()
            best = max(best, 2.0 * 4096 * 4096 * dim / (time.perf_counter() - t0))
        rates[name] = best
    return rates


def timed(run: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    result = run()
    return time.perf_counter() - start, result


# --------------------------------------------------------------------------- part 1: speed


def bench_speed(rows: int, dim: int, k: int, rounds: int, seed: int, arms: list[str]) -> None:
    x = np.random.default_rng(seed).standard_normal((rows, dim)).astype(np.float32)
    everyone = np.arange(rows)
    runs = {
        "numpy": lambda: numpy_knn(x, x, k + 1)[:, 1:],
        "torch": lambda: torch_knn(x, x, k + 1)[:, 1:],
        "raw": lambda: knn(x, x, k + 1, engine=FAISS, refine=False, center=False)[1][:, 1:],
        "raw-onednn": lambda: knn(x, x, k + 1, engine=Engine("onednn"), refine=False,
                                  center=False)[1][:, 1:],
        "default": lambda: knn(x, x, k, engine=resolve_engine("cpu", "auto", (rows, rows, dim, k + 1)),
                                exclude_ids=everyone)[1],
        "default-faiss": lambda: knn(x, x, k, engine=FAISS, exclude_ids=everyone)[1],
        "default-torch": lambda: knn(x, x, k, engine=Engine("torch"), exclude_ids=everyone)[1],
    }
    flops = 2.0 * rows * rows * dim
    seconds: dict[str, list[float]] = {arm: [] for arm in arms}
    peaks: list[float] = []
    ids: dict[str, np.ndarray] = {}
    print(f"CPU self-search: N={rows}, n={dim}, k={k}; {rounds} rounds, arms in rotating order; "
          f"{flops / 1e9:.0f} GFLOP per search")
    for round_ in range(rounds):
        peak = gemm_peak(dim)
        peaks.append(max(peak.values()))
        for arm in rotated(arms, round_):
            elapsed, ids[arm] = timed(runs[arm])
            seconds[arm].append(elapsed)
        print(f"  round {round_ + 1}: GEMM peak " + ", ".join(f"{n} {v / 1e9:.1f}" for n, v in peak.items())
              + " GFLOP/s; " + ", ".join(f"{a} {seconds[a][-1]:.2f} s" for a in arms)
              + f"; load average {os.getloadavg()[0]:.2f}", flush=True)
    print(f"  {'arm':13s} {'seconds min-max':>16s} {'GFLOP/s (best)':>15s} {'% of GEMM peak min-max':>23s}")
    for arm in arms:
        share = [flops / s / p for s, p in zip(seconds[arm], peaks, strict=True)]
        print(f"  {arm:13s} {min(seconds[arm]):7.2f}-{max(seconds[arm]):<8.2f} {flops / min(seconds[arm]) / 1e9:15.1f} "
              f"{min(share):10.0%}-{max(share):<11.0%}")
    for full, raw in (("default", "raw"), ("default", "raw-onednn"), ("default-faiss", "raw")):
        if full in arms and raw in arms:
            ratio = [d / r for d, r in zip(seconds[full], seconds[raw], strict=True)]
            print(f"  {full} knn / {raw} time, per round: {min(ratio):.3f}-{max(ratio):.3f} "
                  f"(best/best {min(seconds[full]) / min(seconds[raw]):.3f})")
    reference = ids.get("default")
    for arm in arms:
        if reference is not None and arm != "default":
            print(f"  ids equal {arm} vs default: {np.mean(ids[arm] == reference):.4%}")


# --------------------------------------------------------------------------- part 2: scaling (issue 10)


def synthetic_activations(n_chunks: int, dim: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Train and held-out rows shaped like Question-Formation prefix states: 20% of the rows are copies of 400
    short-prefix states (Zipf-weighted, so one row repeats thousands of times at 100,000 chunks), the rest
    distinct."""
    rng = np.random.default_rng(seed)
    prefixes = rng.standard_normal((400, dim)).astype(np.float32)
    weights = 1.0 / np.arange(1, 401)

    def split() -> np.ndarray:
        rows = rng.standard_normal((n_chunks, dim)).astype(np.float32)
        shared = rng.random(n_chunks) < 0.2
        rows[shared] = prefixes[rng.choice(400, size=int(shared.sum()), p=weights / weights.sum())]
        return rows

    return split(), split()


def load_activations(acts: Path, layer: int) -> tuple[np.ndarray, np.ndarray]:
    meta = json.loads((acts / "meta.json").read_text())
    print(f"activations {acts}, layer {meta['layers'][layer]}")
    return tuple(np.load(acts / f"{split}.npy", mmap_mode="r")[layer] for split in ("train", "heldout"))


def bench_scaling(sizes: list[int], acts: Path | None, layer: int, dim: int, k: int, seed: int) -> None:
    train, heldout = (load_activations(acts, layer) if acts is not None
                      else synthetic_activations(max(sizes), dim, seed))
    fractions = (0.25, 0.5, 0.75, 1.0)
    cfg = {"k": k, "fractions": list(fractions), "device": "cpu", "method": "exact"}
    print(f"the neighbours stage on one layer (self-search at fractions {fractions} + held-out), k={k}")
    print(f"  {'n_chunks':>8s} {'distinct':>8s} {'largest group':>13s} {'GFLOP':>8s} {'seconds':>8s} "
          f"{'predicted by FLOPs':>18s} {'GFLOP/s':>8s}")
    first = None
    for n in sizes:
        x, q = (np.ascontiguousarray(a[:n], dtype=np.float32) for a in (train, heldout))
        _, counts = np.unique(x, axis=0, return_counts=True)
        gflop = 2.0 * n * n * x.shape[1] * (sum(f * f for f in fractions) + 1) / 1e9
        elapsed, _ = timed(lambda x=x, q=q: search_layer(x, q, cfg, seed))
        first = first or (gflop, elapsed)
        predicted = first[1] * gflop / first[0]
        print(f"  {n:8d} {len(counts):8d} {counts.max():13d} {gflop:8.1f} {elapsed:8.2f} {predicted:18.2f} "
              f"{gflop / elapsed:8.1f}  (load average {os.getloadavg()[0]:.2f})", flush=True)


# --------------------------------------------------------------------------- GPU (when torch or faiss sees one)


def bench_gpu(rows: int, dim: int, k: int, cpu_queries: int, seed: int) -> None:
    """GPU against CPU on N x n, the CPU timed on the first ``cpu_queries`` queries (compared per query)."""
    x = np.random.default_rng(seed).standard_normal((rows, dim)).astype(np.float32)
    gpu = resolve_engine("cuda")
    knn(x[:1000], x[:1000], k, engine=gpu)  # warm-up: CUDA context and resources
    t_gpu, (_, gpu_ids) = timed(lambda: knn(x, x, k, engine=gpu))
    t_cpu, (_, cpu_ids) = timed(lambda: knn(x, x[:cpu_queries], k, engine=resolve_engine("cpu")))
    gpu_qps, cpu_qps = rows / t_gpu, cpu_queries / t_cpu
    print(f"GPU vs CPU self-search N={rows}, n={dim}, k={k}: GPU {gpu_qps:,.0f} queries/s, CPU {cpu_qps:,.0f} "
          f"queries/s ({gpu_qps / cpu_qps:.1f}x); ids equal on the CPU's queries: "
          f"{np.mean(gpu_ids[:cpu_queries] == cpu_ids):.4%}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="N=2000, n=256, 2 rounds; scaling up to 8000")
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--arms", default="numpy,torch,raw,raw-onednn,default,default-faiss")
    parser.add_argument("--threads", type=int, default=None, help="threads (default: $OMP_NUM_THREADS or all)")
    parser.add_argument("--scaling", action="store_true", help="part 2 only: stage time against FLOPs")
    parser.add_argument("--sizes", default="2000,5000,10000,20000,40000")
    parser.add_argument("--acts", type=Path, default=None, help="an activations directory (default: synthetic)")
    parser.add_argument("--layer", type=int, default=1)
    parser.add_argument("--scaling-dim", type=int, default=64, help="dimension of the synthetic activations")
    parser.add_argument("--gpu-rows", type=int, default=80000)
    parser.add_argument("--gpu-cpu-queries", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    threads = set_threads(args.threads)
    print(f"faiss {import_faiss().__version__}, torch {torch.__version__}, numpy {np.__version__}, "
          f"threads={threads}; BLAS: {check_blas_core()}")
    if args.quick:
        args.rows, args.dim, args.rounds, args.sizes = 2000, 256, 2, "1000,2000,4000,8000"
    if args.scaling:
        sizes = [int(s) for s in args.sizes.split(",")]
        bench_scaling(sizes, args.acts, args.layer, args.scaling_dim, args.k, args.seed)
        return
    bench_speed(args.rows, args.dim, args.k, args.rounds, args.seed, args.arms.split(","))
    if resolve_engine("auto").on_gpu and not args.quick:
        bench_gpu(args.gpu_rows, args.dim, args.k, args.gpu_cpu_queries, args.seed)


if __name__ == "__main__":
    main()
