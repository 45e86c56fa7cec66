"""The decisive memorisation column's wall time on this machine, from its own trainer's measured costs (issue 41:
"the decisive memorisation column in ≤ 10 minutes on one GPU").

:mod:`assocmem.memorisation.decisive_floor` bounds the column from below by its FLOPs at the device's peak product
rate; this module measures what the trainer that would run it costs. For each (model, subset) group of
config/memorisation_decisive.yaml, the 8 seeds that the workflow trains as one stacked job (``stack_replicas``,
:mod:`assocmem.train.stacked`) are built as that job builds them (``build_job`` on the column's own facts, generated
here), and timed: a turn of the stacked trainer's loop (``StackedTraining.loop_step``: the batched optimizer
step and every replica's bookkeeping), one evaluation round (every replica's ``_log_row``: its CE sets and the recall
of all its training facts) and one group checkpoint. A group's wall is then

    steps × turn + evaluations × evaluation round + checkpoints × checkpoint

with each group's steps those of the column's cost model per overhead truth
(:func:`assocmem.memorisation.decisive.column_steps`, rounded up to the evaluation a run stops at; a stacked group
steps until its last replica stops, a stopped replica still riding in the batched products). ``--check-steps N``
tests that model where it is measured: it trains the smallest group for N steps for real (``StackedTraining.run``,
files and all) and sets its wall beside the model's, the difference being the job's fixed costs (its start,
its files) and the model's error. ``--graphs on`` times the step in one CUDA graph (``train.cuda_graphs``).

Three verdicts per truth and arm (precision, graphs), decided by these rules, stated before any GPU run:
- ``fits``: the groups one after another (one process, the serial sum) finish within the goal;
- ``cannot fit``: the longest group alone, or the FLOP floor at the measured product rate, exceeds the goal: no
  schedule of these jobs on this device meets it;
- ``open``: neither; it could fit only if groups sharing the device (the workflow runs several GPU jobs at once)
  gained at least serial / goal in throughput, which this module does not measure.

The command that measures (it needs the column's validated config, a room above this one) is
benchmarks/bench_decisive_wall.py.
"""

from __future__ import annotations

import datetime
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.optim import Optimizer

from assocmem.autotune.measure import cpu_model_and_flags
from assocmem.checkout import record_commit
from assocmem.facts.generate import FactsSpec, write_facts
from assocmem.facts.tokenize import tokenize_facts_dir
from assocmem.layout import replicate_seed
from assocmem.memorisation import decisive, decisive_floor
from assocmem.memorisation import power_alternatives as pa
from assocmem.model import DecoderLM
from assocmem.progress import bar
from assocmem.subsets import make_subset
from assocmem.train import RunState, TrainJob, build_job
from assocmem.train.stacked import StackedTraining

GOAL_S = decisive_floor.GOAL_S
PRECISION_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
Arm = tuple[str, bool]  # (train.precision, train.cuda_graphs)
# The verdict is read again with every group's wall scaled by these factors: the model's own error, as the check runs
# measured it (a real wall 0.97-1.13x the model's on the CPU), with a margin. A verdict that differs under them rests
# on the model's accuracy, and the record shows it.
MODEL_ERROR_SCALES = (0.8, 1.25)
NEVER = 10**12  # an evaluation interval no timed loop reaches: evaluations are timed apart


def arm_name(arm: Arm) -> str:
    return f"{arm[0]}{' graphs' if arm[1] else ''}".replace(" ", "_")


@dataclass(frozen=True)
class GroupCost:
    """What one stacked group of the column costs on this machine, measured."""

    model: str
    n_params: int
    n_facts: int
    replicas: int
    precision: str
    cuda_graphs: bool  # whether the step ran in one CUDA graph (train.cuda_graphs; a no-op off CUDA)
    step_s: float  # one turn of the loop: the stacked optimizer step of every replica and their bookkeeping
    evaluation_s: float  # one evaluation of every replica (CE sets and recall of every training fact)
    checkpoint_s: float  # one group checkpoint


def write_stores(exp: dict[str, Any], work: Path) -> dict[int, Path]:
    """The facts of a validated experiment ``exp`` (with its global ``seed``) as the workflow stores them, one
    store view per subset: facts -> store directory."""
    spec = FactsSpec.from_config(exp["dataset"]["facts"], seed=exp["seed"])
    write_facts(spec, work / "facts")
    tokenize_facts_dir(work / "facts", spec, work / "tokens")
    stores = {}
    for fraction in exp["subsets"]["fractions"]:
        view = work / "tokens" if fraction == 1.0 else work / f"subset_{fraction}"
        if fraction != 1.0:
            make_subset(work / "tokens", fraction, by=exp["subsets"]["by"], out_dir=view)
        stores[round(spec.count * fraction)] = view
    return stores


def group_jobs(exp: dict[str, Any], model: str, store: Path, arm: Arm, device: str, work: Path,
               **train_overrides: Any) -> list[TrainJob]:
    """The seeds of one (model, subset) cell as its stacked job builds them (one run directory each), in ``arm``:
    (precision, whether to run the step in a CUDA graph)."""
    spec = dict(exp["models"][model])
    precision, graphs = arm
    train = {**exp["train"], **spec.pop("train", {}), "precision": precision, "cuda_graphs": graphs,
             "device": device, "gemm": "native", **train_overrides}
    return [build_job(train, spec, replicate_seed(exp["seed"], k), store, work / f"{model}.s{k}")
            for k in range(exp["sweep"]["seeds"])]


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (a no-op off CUDA): a timing ends when the work does."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(action, device: torch.device, repeats: int = 1) -> float:
    synchronize(device)
    start = time.perf_counter()
    for i in range(repeats):
        action(i)
    synchronize(device)
    return (time.perf_counter() - start) / repeats


def ready_group(jobs: list[TrainJob], warmup: int) -> tuple[StackedTraining, Optimizer, torch.Tensor, list[bool]]:
    """``jobs`` as one stack, prepared and stepped ``warmup`` turns of its loop (a CUDA graph's capture among them):
    the trainer, its optimizer, pending training NLL and active replicas, ready for timed turns from ``warmup``."""
    training = StackedTraining(jobs)
    optimizer, _, pending = training.prepare()
    active = [True] * len(jobs)
    for step in range(warmup):
        training.loop_step(optimizer, step, active, pending, time.perf_counter())
    return training, optimizer, pending, active


def evaluation_round(training: StackedTraining, stacked: bool = True) -> None:
    """One evaluation of every replica through the trainer's calls: in one stacked pass as the trainer does it
    (where the sets stack), or each replica alone (``stacked`` False: its fallback)."""
    replicas = list(range(len(training.jobs)))
    measured = training.evaluations(replicas) if stacked else dict.fromkeys(replicas)
    for i in replicas:
        training.log_evaluation(i, RunState(1, [], 0.0, 1), 1.0, measured[i])


def measure_group(jobs: list[TrainJob], steps: int, warmup: int) -> tuple[float, float, float, bool]:
    """(step, evaluation round, checkpoint) seconds of ``jobs`` as one stack, by the trainer's own calls (a step: a
    turn of its loop, the stacked step and every replica's bookkeeping), and whether the timed steps replayed a CUDA
    graph (``warmup`` covers the eager steps before its capture). ``jobs`` evaluate never in the loop
    (:func:`measure` builds them so); the evaluation round is timed apart."""
    training, optimizer, pending, active = ready_group(jobs, warmup)
    device, clock = training.device, time.perf_counter()
    step_s = _timed(lambda i: training.loop_step(optimizer, warmup + i, active, pending, clock), device, steps)
    evaluation_round(training)  # a first evaluation may upload the evaluation sets: once a run
    evaluation_s = _timed(lambda _: evaluation_round(training), device)
    checkpoint_s = _timed(lambda _: training._save(warmup + steps, optimizer, pending), device)
    training.checkpoint.unlink(missing_ok=True)
    graphed = training._graphed is not None and training._graphed.graph is not None
    return step_s, evaluation_s, checkpoint_s, graphed


def measure(exp: dict[str, Any], stores: dict[int, Path], arms: list[Arm], device: str, models: list[str],
            steps: int, warmup: int, work: Path,
            on_group: Callable[[list[GroupCost]], None] | None = None) -> list[GroupCost]:
    """Every (model, subset) group's costs in every arm (``stores``: facts -> store, :func:`write_stores`);
    ``work`` holds the runs' scratch files. Arms that replay CUDA graphs (the faster step, the likelier to fit) go
    first, so a time cap cuts the others; ``on_group`` is given the costs so far after each group."""
    groups = [(m, d, arm) for arm in sorted(arms, key=lambda a: not a[1]) for m in models for d in sorted(stores)]
    costs = []
    progress = bar(total=len(groups), desc="decisive groups", unit="group")
    for model, n_facts, arm in groups:
        jobs = group_jobs(exp, model, stores[n_facts], arm, device, work / "runs" / f"{arm_name(arm)}_{n_facts}",
                          eval_interval=NEVER)
        step_s, evaluation_s, checkpoint_s, graphs = measure_group(jobs, steps, warmup)
        costs.append(GroupCost(model, n_parameters(jobs[0]), n_facts, len(jobs), arm[0], graphs, step_s,
                               evaluation_s, checkpoint_s))
        if on_group is not None:
            on_group(costs)
        progress.update()
    progress.close()
    return costs


def n_parameters(job: TrainJob) -> int:
    with torch.device("meta"):  # shapes only
        return DecoderLM(job.model_config).num_parameters()


def stop_step(steps: float, eval_interval: int, budget: float) -> int:
    """The step a run of the cost model's ``steps`` stops at: the first evaluation at or after them, or its budget
    (a run stops only at an evaluation, and at the latest where its budget ends)."""
    return int(min(math.ceil(steps / eval_interval) * eval_interval, budget))


def group_wall(cost: GroupCost, steps: int, eval_interval: int, checkpoint_interval: int) -> float:
    """Seconds of a group that steps until ``steps``: its steps, its evaluations (every eval_interval and at the
    end) and its checkpoints (every checkpoint_interval while it runs)."""
    evaluations = math.ceil(steps / eval_interval)
    checkpoints = (steps - 1) // checkpoint_interval
    return steps * cost.step_s + evaluations * cost.evaluation_s + checkpoints * cost.checkpoint_s


def verdict(serial_s: float, longest_s: float, floor_s: float, goal_s: float = GOAL_S) -> str:
    """The module's rule: fits one group after another; cannot fit on this device whatever the schedule; open."""
    if serial_s <= goal_s:
        return "fits"
    if max(longest_s, floor_s) > goal_s:
        return "cannot fit"
    return "open"


def project(costs: list[GroupCost], exp: dict[str, Any], rates: dict[str, float]) -> list[dict[str, Any]]:
    """Per arm (precision, CUDA graphs) and overhead truth: the column's wall by the measured costs (``rates``:
    product FLOP/s by precision, for the floor). Groups not measured are left out, and the row says so
    (``complete``): its sums are then lower bounds, so only ``cannot fit`` can be read from it."""
    recorded = decisive.recorded_runs()
    train = exp["train"]
    floors = decisive_floor.floor(rates)
    by_group = {(c.n_params, c.n_facts, (c.precision, c.cuda_graphs)): c for c in costs}
    truths = list(zip(decisive.column_steps(recorded, pa.truths(recorded)), floors, strict=True))
    rows = []
    for arm in dict.fromkeys((c.precision, c.cuda_graphs) for c in costs):
        precision = arm[0]
        for (truth, column, _, _, steps), floor_row in truths:
            walls = _group_walls(column, steps, by_group, arm, train)
            measured = [w for w in walls if w["wall_s"] is not None]
            serial = sum(w["wall_s"] for w in measured)
            longest = max(measured, key=lambda w: w["wall_s"])
            complete = len(measured) == len(walls)
            floor_s = floor_row["floor_s"][precision]
            rule = _read(verdict(serial, longest["wall_s"], floor_s), complete)
            rows.append({"precision": precision, "cuda_graphs": arm[1], "law": truth["law"], "b": truth["b"],
                         "groups": len(walls), "groups_measured": len(measured), "complete": complete,
                         "serial_s": serial,
                         "longest_group_s": longest["wall_s"], "longest_group": longest["group"],
                         "longest_group_steps": longest["steps"], "floor_s": floor_s,
                         "evaluation_share": sum(w["evaluation_s"] for w in measured) / serial,
                         "throughput_gain_needed": serial / GOAL_S,
                         "verdict": rule,
                         "verdict_if_walls_scaled": {
                             str(f): _read(verdict(f * serial, f * longest["wall_s"], floor_s), complete)
                             for f in MODEL_ERROR_SCALES},
                         "by_group": walls})
    return rows


def _read(rule: str, complete: bool) -> str:
    """The rule's verdict as a measurement of some groups only can give it: sums of them are lower bounds."""
    return rule if complete or rule == "cannot fit" else "incomplete"


def _group_walls(column, steps: np.ndarray, by_group: dict, arm: Arm, train: dict[str, Any]) -> list[dict]:
    """Each (model size, facts) group of the column: the step its last replica stops at and its wall."""
    column = column.assign(steps=steps)
    walls = []
    for (n_params, n_facts), runs in column.groupby(["n_params", "n_facts"], sort=True):
        budget = math.ceil(train["max_epochs"] * n_facts / train["batch_size"])
        last = max(stop_step(s, train["eval_interval"], budget) for s in runs["steps"])
        cost = by_group.get((int(n_params), int(n_facts), arm))
        wall = None if cost is None else group_wall(cost, last, train["eval_interval"], train["checkpoint_interval"])
        evaluations = math.ceil(last / train["eval_interval"]) * (cost.evaluation_s if cost else 0.0)
        walls.append({"group": f"{cost.model if cost else int(n_params)}/{int(n_facts)}", "n_params": int(n_params),
                      "n_facts": int(n_facts), "replicas": len(runs), "steps": last, "wall_s": wall,
                      "evaluation_s": evaluations})
    return walls


def check_run(exp: dict[str, Any], cost: GroupCost, store: Path, device: str, steps: int, work: Path
              ) -> dict[str, Any]:
    """Train ``cost``'s group for ``steps`` steps for real, files and all, and set its wall beside the model's."""
    jobs = group_jobs(exp, cost.model, store, (cost.precision, cost.cuda_graphs), device, work, max_steps=steps)
    start = time.perf_counter()
    summaries = StackedTraining(jobs).run()
    wall = time.perf_counter() - start
    reached = max(summary["steps"] for summary in summaries)
    modelled = group_wall(cost, reached, jobs[0].settings.eval_interval, jobs[0].settings.checkpoint_interval)
    return {"group": f"{cost.model}/{cost.n_facts}", "precision": cost.precision, "cuda_graphs": cost.cuda_graphs,
            "steps": reached,
            "wall_s": wall, "modelled_s": modelled, "wall_over_modelled": wall / modelled,
            "fixed_s": wall - modelled}


def product_rates(device: torch.device, precisions: list[str]) -> dict[str, float]:
    """Matrix-product FLOP/s at each precision on ``device``, measured now (fp32 with TF32 off on CUDA)."""
    from assocmem.gemm import measure_peak_flops

    return {p: measure_peak_flops(device, 1.0, PRECISION_DTYPES[p]) for p in precisions}


def summary(rec: dict[str, Any]) -> str:
    lines = [f"decisive column on {rec['device_name']} ({rec['host_cpu']}), {rec['steps_timed']} timed steps a "
             f"group; goal {rec['goal_s'] / 60:.0f} min"]
    for row in rec["projection"]:
        lines.append(f"  {arm_name((row['precision'], row['cuda_graphs']))} {row['law']} b={row['b']:.2f}: one "
                     f"group after another {row['serial_s'] / 60:.1f} min, longest group {row['longest_group']} "
                     f"{row['longest_group_s'] / 60:.1f} min ({row['longest_group_steps']} steps), floor "
                     f"{row['floor_s'] / 60:.1f} min, evaluations {100 * row['evaluation_share']:.0f}%: "
                     f"{row['verdict']} ({row['groups_measured']} / {row['groups']} groups; walls "
                     + ", ".join(f"x{f}: {v}" for f, v in row["verdict_if_walls_scaled"].items()) + ")")
    for c in rec["checks"]:
        lines.append(f"  check {c['group']} {arm_name((c['precision'], c['cuda_graphs']))}, {c['steps']} steps for "
                     f"real: {c['wall_s']:.1f} s against {c['modelled_s']:.1f} s modelled "
                     f"(x{c['wall_over_modelled']:.2f}; wall - model {c['fixed_s']:.1f} s)")
    return "\n".join(lines)


def record(costs: list[GroupCost], checks: list[dict[str, Any]], exp: dict[str, Any], rates: dict[str, float],
           device: torch.device, config: Path, steps: int, warmup: int) -> dict[str, Any]:
    """The record of a measurement: the machine, the costs, the projection by the rule and the checks."""
    config = config.resolve()
    shown = config.relative_to(decisive.ROOT) if config.is_relative_to(decisive.ROOT) else config
    return {"commit": record_commit(), "date": datetime.date.today().isoformat(), "config": str(shown),
            "host_cpu": cpu_model_and_flags()[0], "torch": torch.__version__,
            "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "goal_s": GOAL_S, "steps_timed": steps, "warmup_steps": warmup, "rates_flops": rates,
            "costs": [asdict(c) for c in costs], "projection": project(costs, exp, rates), "checks": checks}
