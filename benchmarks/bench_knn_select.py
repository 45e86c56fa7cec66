"""The oneDNN k-NN engine's selection: the k smallest of each block of scores through column groups
(:func:`assocmem.knn.select.smallest_k`) against ``torch.topk`` over the whole block (group 0, the baseline).

Part 1 times the selection alone on one block of 256 x 8,192 Gaussian scores (the engine's ``GemmBlocks``) for
each k and group; part 2 times :func:`assocmem.knn.gemm_knn` (products and selection) at the neighbours stage's
shapes: 80,000 database rows, dimension 64 (the default's models) and 1,024 (GPT-2 medium's), pools of 17 (the
radius test) and 19 (the self-search at k = 10). Arms interleaved, in rotating order, over rounds; prints min-max
and the ratio of medians to the baseline; every arm's values are checked equal to the baseline's (part 2: the
distances bit for bit, the ids where no tie allows another). ``--blocks`` adds other ``GemmBlocks`` to part 2.

    python benchmarks/bench_knn_select.py --rounds 5
    python benchmarks/bench_knn_select.py --rounds 3 --ks 17 --groups 0,32 --pools 17 --blocks 128x16384x64
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import astuple
from functools import partial

import numpy as np
import torch

from assocmem.autotune.measure import cpu_model_and_flags, rotated
from assocmem.knn import GemmBlocks, gemm_knn
from assocmem.knn.select import smallest_k


def timed(run: Callable[[], object], repeats: int) -> float:
    run()
    began = time.perf_counter()
    for _ in range(repeats):
        run()
    return (time.perf_counter() - began) / repeats


def rounds_of(arms: dict[str, Callable[[], object]], rounds: int, repeats: int) -> dict[str, list[float]]:
    """Each arm's seconds per call in every round, the arms' order rotating from round to round."""
    names, seconds = list(arms), {name: [] for name in arms}
    for round_ in range(rounds):
        for name in rotated(names, round_):
            seconds[name].append(timed(arms[name], repeats))
    return seconds


def report(title: str, seconds: dict[str, list[float]], unit: float, label: str) -> None:
    base = statistics.median(seconds["group 0 (topk)"])
    print(title)
    for name, times in seconds.items():
        median = statistics.median(times)
        print(f"  {name:16s} {min(times) * unit:9.2f}-{max(times) * unit:9.2f} {label}   x{median / base:.2f}")


def selection(rounds: int, groups: list[int], ks: list[int]) -> None:
    scores = torch.randn(256, 8192, generator=torch.Generator().manual_seed(0))
    for k in ks:
        want = torch.topk(scores, k, dim=1, largest=False).values
        for group in groups:
            values, columns = smallest_k(scores, k, group)
            assert torch.equal(values.sort(dim=1).values, want) and torch.equal(scores.gather(1, columns), values)
        arms = {f"group {g}" + (" (topk)" if g == 0 else ""): partial(smallest_k, scores, k, g) for g in groups}
        report(f"selection, 256 x 8,192 scores, k = {k}:", rounds_of(arms, rounds, repeats=50), 1e3, "ms")


def searches(rounds: int, queries: int, dims: list[int], pools: list[int], other_blocks: list[GemmBlocks]) -> None:
    for dim in dims:
        database = np.random.default_rng(1).standard_normal((80_000, dim), dtype=np.float32)
        query_rows = np.ascontiguousarray(database[:queries])
        for pool in pools:
            arms = {"group 0 (topk)": GemmBlocks(group=0), "default": GemmBlocks()}
            arms |= {"x".join(map(str, astuple(blocks))): blocks for blocks in other_blocks}
            results = {name: gemm_knn(query_rows, database, pool, blocks) for name, blocks in arms.items()}
            for name, (distances, _) in results.items():
                assert np.array_equal(distances, results["group 0 (topk)"][0]), name
            same_ids = float(np.mean(results["default"][1] == results["group 0 (topk)"][1]))
            seconds = rounds_of({name: partial(gemm_knn, query_rows, database, pool, blocks)
                                 for name, blocks in arms.items()}, rounds, repeats=1)
            report(f"gemm_knn, {queries:,} queries x 80,000 rows x {dim}, pool {pool} "
                   f"(default {GemmBlocks()}; ids equal on {same_ids:.4%}):", seconds, 1.0, "s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--queries", type=int, default=4096, help="part 2's queries")
    parser.add_argument("--groups", default="0,16,32,64", help="column groups to time; 0 (topk, the baseline) is "
                        "always timed")
    parser.add_argument("--ks", default="9,17,33")
    parser.add_argument("--dims", default="64,1024")
    parser.add_argument("--pools", default="17,19")
    parser.add_argument("--blocks", default="", help="part 2's other arms: query_tile x column_chunk x group, e.g. "
                        "128x16384x64,512x8192x32")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"{cpu_model_and_flags()[0]}; torch {torch.__version__}, {args.threads} thread(s)")
    groups = [0, *(g for g in dict.fromkeys(int(g) for g in args.groups.split(",")) if g != 0)]
    selection(args.rounds, groups, [int(k) for k in args.ks.split(",")])
    other_blocks = [GemmBlocks(*(int(n) for n in arm.split("x"))) for arm in args.blocks.split(",") if arm]
    searches(args.rounds, args.queries, [int(d) for d in args.dims.split(",")], [int(p) for p in args.pools.split(",")],
             other_blocks)


if __name__ == "__main__":
    main()
