"""A stacked group's evaluation round in one batched pass against each replica evaluated alone (issue 41).

For each model asked, the decisive memorisation column's group (8 seeds on its 16,384 facts, built as its stacked job
builds them; a few training turns first) runs one evaluation round both ways through the trainer's own calls: every
replica's CE sets and recall of all its facts from one stacked pass (``StackedTraining.evaluations``, what the
trainer does), and each replica copied out and evaluated alone (the trainer's fallback, and its only path before
2026-11-29), best of ``--rounds`` each, alternating. Prints each time and the ratio stacked / alone.

    python benchmarks/bench_stacked_eval.py                     # D0, fp32, on the CPU (or CUDA where present)
    python benchmarks/bench_stacked_eval.py --models D0,D14 --precision bf16 --device cuda
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch
from bench_decisive_wall import column_experiment

from assocmem.autotune.measure import cpu_model_and_flags
from assocmem.io import write_json
from assocmem.memorisation import decisive_wall as dw
from assocmem.train.stacked import StackedTraining


def round_seconds(training: StackedTraining, stacked: bool) -> float:
    """One evaluation round of every replica, stacked or each alone, timed to the device's end."""
    dw.synchronize(training.device)
    start = time.perf_counter()
    dw.evaluation_round(training, stacked)
    dw.synchronize(training.device)
    return time.perf_counter() - start


def compare(training: StackedTraining, rounds: int) -> dict[str, float]:
    for stacked in (True, False):  # a first round each warms up (uploads, caches) and is not kept
        round_seconds(training, stacked)
    times: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(rounds):  # alternating: a slow spell of the host falls on both
        for stacked in (True, False):
            times[stacked].append(round_seconds(training, stacked))
    best = {stacked: min(seconds) for stacked, seconds in times.items()}
    return {"stacked_s": best[True], "alone_s": best[False], "ratio_stacked_over_alone": best[True] / best[False]}


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="D0")
    p.add_argument("--precision", default="fp32", choices=sorted(dw.PRECISION_DTYPES))
    p.add_argument("--device", default="auto")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", type=Path, help="the record (JSON)")
    args = p.parse_args(argv)
    device = "cuda" if args.device == "auto" and torch.cuda.is_available() else \
        "cpu" if args.device == "auto" else args.device
    exp = column_experiment()
    rows = []
    with tempfile.TemporaryDirectory(prefix="stacked_eval_") as scratch:
        stores = dw.write_stores(exp, Path(scratch) / "data")
        n_facts = max(stores)
        for model in args.models.split(","):
            jobs = dw.group_jobs(exp, model, stores[n_facts], (args.precision, False), device,
                                 Path(scratch) / model, eval_interval=dw.NEVER)
            training = dw.ready_group(jobs, warmup=3)[0]  # trained weights, not the initial ones
            rows.append({"model": model, "n_facts": n_facts, "replicas": len(jobs), "precision": args.precision,
                         "device": device, **compare(training, args.rounds)})
    rec = {"cpu": cpu_model_and_flags()[0], "torch": torch.__version__, "rows": rows}
    if args.out:
        write_json(args.out, rec)
    print(json.dumps(rec))
    return rows


if __name__ == "__main__":
    main()
