"""The host's share of a stacked graphed turn: its replicas' batches built and stacked on the host (the baseline,
the feed of a step whose sources are not whole sequences) against the rows picked for the device to gather
(``assocmem.train.device_rows``, the feed of the decisive memorisation column's groups).

On a GPU a turn replayed from a CUDA graph costs the device its kernels and the host this feed, the learning rates,
the uploads and the replicas' bookkeeping; where the host's part is the larger, it is the turn. This script builds
one group of config/memorisation_decisive.yaml (8 stacked seeds of D0 on its 16,384 facts, the largest subset) twice
on this host, its graphed step's code taken on the CPU with the device's work (the graph's replay) replaced by
nothing, once with each feed, and times in the same process, alternating rounds: the step's feed alone
(``StackedGraphedStep.feed``; the uploads, pinned on CUDA, are not timed: a CPU has none), and the whole turn of the
trainer's loop, the host's time a turn, learning rates, loss scales and every replica's bookkeeping included. It
prints each arm's best time a turn and the ratios. Nothing is asserted.

    python benchmarks/bench_device_rows.py
    python benchmarks/bench_device_rows.py --turns 500 --rounds 5 --out rows.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
import time
from pathlib import Path
from unittest import mock

from bench_decisive_wall import column_experiment

from assocmem.autotune.measure import cpu_model_and_flags
from assocmem.memorisation import decisive_wall as dw
from assocmem.train.device_rows import DeviceRows
from assocmem.train.stacked_graphed import StackedGraphedStep

WARMUP = 5


@contextlib.contextmanager
def host_only_turns():
    """Stacked trainers take their graphed step on the CPU and do none of its device work."""
    with mock.patch("assocmem.train.stacked.cuda_graphs_on", lambda settings, device: True), \
            mock.patch.object(StackedGraphedStep, "_advance", lambda self: None):
        yield


def arms(jobs, feed: str):
    """The feed alone and a turn of the trainer's loop over ``jobs`` as one graphed stack fed by ``feed`` (under
    host_only_turns): the graphed step's own calls."""
    with mock.patch.object(DeviceRows, "of", classmethod(lambda cls, *a: None)) if feed == "host" \
            else contextlib.nullcontext():
        training, optimizer, pending, active = dw.ready_group(jobs, WARMUP)
    assert (training._graphed.rows is not None) is (feed == "rows")

    def feed_only(step: int) -> None:
        training._graphed.feed(WARMUP + step, active)

    def turn(step: int) -> None:
        training.loop_step(optimizer, WARMUP + step, active, pending, 0.0)
    return {feed: feed_only, f"turn_{feed}": turn}


def best_per_turn(turn, start: int, turns: int) -> float:
    begin = time.perf_counter()
    for step in range(start, start + turns):
        turn(step)
    return (time.perf_counter() - begin) / turns


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="benchmarks/bench_device_rows.py", description=__doc__.split("\n")[0])
    p.add_argument("--model", default="D0")
    p.add_argument("--turns", type=int, default=300, help="turns timed a round")
    p.add_argument("--rounds", type=int, default=3, help="rounds of each arm, alternating; the best counts")
    p.add_argument("--out", type=Path, help="the record (JSON)")
    args = p.parse_args(argv)
    exp = column_experiment()
    with tempfile.TemporaryDirectory(prefix="device_rows_") as scratch, host_only_turns():
        stores = dw.write_stores(exp, Path(scratch) / "data")
        n_facts = max(stores)

        def jobs(tag: str):
            return dw.group_jobs(exp, args.model, stores[n_facts], ("fp32", True), "cpu", Path(scratch) / tag,
                                 eval_interval=dw.NEVER)
        timed = {**arms(jobs("host"), "host"), **arms(jobs("rows"), "rows")}
        best = dict.fromkeys(timed, float("inf"))
        for round_ in range(args.rounds):
            for name, turn in timed.items():
                best[name] = min(best[name], best_per_turn(turn, round_ * args.turns, args.turns))
    rec = {"cpu": cpu_model_and_flags()[0], "model": args.model, "n_facts": n_facts, "replicas": exp["sweep"]["seeds"],
           "turns": args.turns, "rounds": args.rounds, **{f"{name}_us": 1e6 * s for name, s in best.items()},
           "ratio_rows_over_host": best["rows"] / best["host"],
           "ratio_turn_rows_over_turn_host": best["turn_rows"] / best["turn_host"]}
    print(f"{rec['cpu']}: a turn of {rec['replicas']} replicas of {args.model} / {n_facts}: feed: host batches "
          f"{rec['host_us']:.0f} us, device rows {rec['rows_us']:.0f} us (x{rec['ratio_rows_over_host']:.3f}); "
          f"the loop's turn on the host: {rec['turn_host_us']:.0f} us, {rec['turn_rows_us']:.0f} us "
          f"(x{rec['ratio_turn_rows_over_turn_host']:.3f})")
    if args.out:
        args.out.write_text(json.dumps(rec, indent=1) + "\n")
    return rec


if __name__ == "__main__":
    main()
