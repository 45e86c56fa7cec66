"""The decisive memorisation column's wall on this machine, measured with the trainer that would run it (issue 41):
each (model, subset) group of config/memorisation_decisive.yaml timed as a stacked job, the column projected per
overhead truth and judged by the rule that :mod:`assocmem.memorisation.decisive_wall` states (fits one group after
another / cannot fit on this device / open), and with ``--check-steps`` the smallest group trained for real against
the projection, in each arm (precision, CUDA graphs). With ``--share 2,4,8`` the smallest and the largest model's
groups also step 2, 4 and 8 at once, one process each, and the projection's ``open`` rows are read again by the
sharing rule of :mod:`assocmem.memorisation.decisive_sharing` (``--share-modes processes,streams``: also with the
copies on CUDA streams of one process). benchmarks/gpu_check.sh runs it on the GPU machine.

    python benchmarks/bench_decisive_wall.py --precision bf16 --graphs off,on --check-steps 2000 --share 2,4,8 \
        --share-modes processes,streams --out wall.json
    python benchmarks/bench_decisive_wall.py --models D0 --precision fp32 --steps 100 --check-steps 24000 \\
        --out docs/results/memorisation_decisive_wall_cpu.json      # the CPU record
    python benchmarks/bench_decisive_wall.py --dry-run               # one model, a few steps, on any device
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch

from assocmem.config import load_config, load_schema
from assocmem.io import write_json
from assocmem.memorisation import decisive
from assocmem.memorisation import decisive_sharing as ds
from assocmem.memorisation import decisive_wall as dw
from assocmem.schemas import config_schema_path
from assocmem.train.graphed import WARMUP_STEPS

PUBLISH_EVERY_S = 20.0


def column_experiment(config: Path = decisive.CONFIG) -> dict[str, Any]:
    """The column's validated experiment (schema defaults filled), with the config's global seed."""
    loaded = load_config(config, load_schema(config_schema_path()))
    (exp,) = loaded["experiments"].values()
    return {**exp, "seed": loaded["seed"]}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="benchmarks/bench_decisive_wall.py",
                                description=__doc__.split("\n")[0])
    p.add_argument("--config", type=Path, default=decisive.CONFIG)
    p.add_argument("--precision", default="fp32,bf16", help="comma-separated: fp32, bf16")
    p.add_argument("--graphs", default="off", help="comma-separated: off, on (the step in one CUDA graph: CUDA only)")
    p.add_argument("--models", default="", help="comma-separated model names (default: every model)")
    p.add_argument("--steps", type=int, default=30, help="timed turns of the loop a group")
    p.add_argument("--warmup", type=int, default=5, help="steps before the timed ones (a CUDA graph's capture: 4)")
    p.add_argument("--device", default="auto", help="auto (CUDA when torch sees one), cuda or cpu")
    p.add_argument("--check-steps", type=int, default=0,
                   help="train the smallest group this many steps for real, in each arm")
    p.add_argument("--share", default="", help="comma-separated levels: groups stepping at once, one process each "
                   "(default: none)")
    p.add_argument("--share-models", default="",
                   help="comma-separated models whose groups share (default: the smallest and the largest measured)")
    p.add_argument("--share-window", type=float, default=3.0, help="seconds of stepping timed at each level")
    p.add_argument("--share-modes", default="processes",
                   help="comma-separated: processes (one process a group, as the workflow runs them), streams (one "
                   "process, a CUDA stream a group: no runner does it yet)")
    p.add_argument("--out", type=Path, help="the record (JSON)")
    p.add_argument("--dry-run", action="store_true",
                   help="model D0 in bf16, 2 steps, a check of 2, two groups sharing for 0.5 s in each mode: checks it "
                   "runs")
    return p


def arms_of(args: argparse.Namespace, device: torch.device) -> list[dw.Arm]:
    """The (precision, CUDA graphs) pairs the command line asks for; a one-line error for any other."""
    precisions, graphs = args.precision.split(","), args.graphs.split(",")
    if unknown := sorted(set(precisions) - set(dw.PRECISION_DTYPES)):
        raise SystemExit(f"--precision: {', '.join(unknown)}; one of {', '.join(dw.PRECISION_DTYPES)}")
    if unknown := sorted(set(graphs) - {"off", "on"}):
        raise SystemExit(f"--graphs: {', '.join(unknown)}; one of off, on")
    if "on" in graphs and device.type != "cuda":
        raise SystemExit(f"--graphs on: CUDA graphs need a CUDA device, not {device}")
    if "on" in graphs and args.warmup < WARMUP_STEPS + 1:
        raise SystemExit(f"--warmup {args.warmup}: a CUDA graph is captured after {WARMUP_STEPS} eager steps; "
                         f"at least {WARMUP_STEPS + 1}")
    return [(p, g == "on") for p in precisions for g in graphs]


def share_levels(text: str) -> list[int]:
    """--share's levels; a one-line error for anything but whole numbers of at least 2."""
    try:
        levels = [int(level) for level in text.split(",") if level]
    except ValueError:
        raise SystemExit(f"--share {text}: comma-separated whole numbers of at least 2") from None
    if any(level < 2 for level in levels):
        raise SystemExit(f"--share {text}: comma-separated whole numbers of at least 2")
    return levels


def share_modes(text: str) -> list[str]:
    """--share-modes' modes, the workflow's way (processes) first: a time cap cuts the other; a one-line error for
    any other."""
    modes = {m for m in text.split(",") if m}
    if not modes or modes - set(ds.MODES):
        raise SystemExit(f"--share-modes {text}: comma-separated, of {', '.join(ds.MODES)}")
    return [m for m in ds.MODES if m in modes]


def sharing_order(arms: list[dw.Arm], modes: list[str]) -> list[tuple[dw.Arm, str]]:
    """The (arm, mode) pairs in the order they share: an arm that replays CUDA graphs (the faster step, the likelier
    to fit) before the others, and in each arm the workflow's way (processes) first, so a time cap cuts the rest."""
    return [(arm, mode) for arm in sorted(arms, key=lambda a: not a[1]) for mode in modes]


def sharing_models(args: argparse.Namespace, exp: dict[str, Any]) -> list[str]:
    """The models --share-models names (none: the smallest and the largest measured, once measured)."""
    chosen = [m for m in args.share_models.split(",") if m]
    if unknown := sorted(set(chosen) - set(exp["models"])):
        raise SystemExit(f"--share-models: {', '.join(unknown)} not in {args.config}")
    return chosen


def smallest_and_largest(costs: list[dw.GroupCost]) -> list[str]:
    sizes = sorted({(c.n_params, c.model) for c in costs})
    return list(dict.fromkeys([sizes[0][1], sizes[-1][1]]))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parser().parse_args(argv)
    if args.dry_run:
        args.models, args.precision, args.graphs = "D0", "bf16", "off"
        args.steps, args.warmup, args.check_steps = 2, 1, 2
        args.share, args.share_models, args.share_window, args.share_modes = "2", "", 0.5, "processes,streams"
    exp = column_experiment(args.config)
    models = args.models.split(",") if args.models else list(exp["models"])
    if unknown := sorted(set(models) - set(exp["models"])):
        raise SystemExit(f"--models: {', '.join(unknown)} not in {args.config}")
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          "cpu" if args.device == "auto" else args.device)
    arms = arms_of(args, device)
    levels, share_models, modes = share_levels(args.share), sharing_models(args, exp), share_modes(args.share_modes)
    with tempfile.TemporaryDirectory(prefix="decisive_wall_") as scratch:
        work = Path(scratch)
        stores = dw.write_stores(exp, work / "data")
        rates = dw.product_rates(device, list(dict.fromkeys(p for p, _ in arms)))
        checks: list[dict[str, Any]] = []
        # each stage's record as soon as it is measured, the costs' every PUBLISH_EVERY_S while they are measured:
        # a time cap keeps what came before (a record costs about a second: its projection)
        costs = dw.measure(exp, stores, arms, device.type, models, args.steps, args.warmup, work,
                           on_group=Every(PUBLISH_EVERY_S, lambda so_far: write_record(
                               args, so_far, checks, exp, rates, device, [], "costs")))
        publish = partial(write_record, args, costs, checks, exp, rates, device)
        publish([], "costs")
        for arm in arms if args.check_steps else []:
            smallest = min((c for c in costs if (c.precision, c.cuda_graphs) == arm),
                           key=lambda c: (c.n_params, c.n_facts))
            checks.append(dw.check_run(exp, smallest, stores[smallest.n_facts], device.type, args.check_steps,
                                       work / "check" / dw.arm_name(arm)))
            publish([], "checks")
        n_facts, share_models = max(stores), share_models or smallest_and_largest(costs)
        shared: list[ds.SharedTurns] = []
        for arm, mode in sharing_order(arms, modes) if levels else []:
            for model in share_models:
                shared += ds.measure_sharing(exp, stores[n_facts], model, n_facts, arm, device.type, levels,
                                             args.share_window, args.warmup, work / "share", mode)
                publish(shared, "sharing")
        rec = publish(shared, "complete")
    print(dw.summary(rec))
    if shared:
        print(ds.summary(rec))
    return rec


class Every:
    """Calls ``action`` with its argument at most once every ``seconds`` (the first call at once)."""

    def __init__(self, seconds: float, action: Callable[[Any], Any]) -> None:
        self.seconds, self.action, self.last = seconds, action, -math.inf

    def __call__(self, value: Any) -> None:
        if time.perf_counter() - self.last >= self.seconds:
            self.action(value)
            self.last = time.perf_counter()


def write_record(args: argparse.Namespace, costs: list[dw.GroupCost], checks: list[dict[str, Any]],
                 exp: dict[str, Any], rates: dict[str, float], device: torch.device, shared: list[ds.SharedTurns],
                 stage: str) -> dict[str, Any]:
    """The record as measured so far (``stage``: costs, checks, sharing or complete), written to --out where given.
    The projection is read again by the sharing rule only once every shape asked for has shared (complete)."""
    rec = dw.record(costs, checks, exp, rates, device, args.config, args.steps, args.warmup)
    rec["stage"] = stage
    if shared:
        rec["sharing"] = ds.record(shared, args.share_window)
        if stage == "complete":
            ds.read_projection(rec["projection"], shared)
    if args.out:
        write_json(args.out, rec)
    return rec


if __name__ == "__main__":
    main()
