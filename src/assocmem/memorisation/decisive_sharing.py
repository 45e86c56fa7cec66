"""The decisive memorisation column with groups sharing one device (issue 41: "the decisive memorisation column in
≤ 10 minutes on one GPU"): what :mod:`assocmem.memorisation.decisive_wall`'s verdict ``open`` leaves unmeasured.

``open`` says: one group after another takes longer than the goal, but no group alone and no FLOP floor does, so the
column could fit only if groups stepping at once (the workflow runs GPU jobs side by side unless
``--resources gpu=1`` limits them) gained enough throughput. This module measures that gain as the workflow would
get it: ``copies`` processes, each one group (8 stacked seeds, built as its job builds them) in its own process,
step at once for a window of wall time, each counting the turns of its own loop (``StackedTraining.loop_step``,
the device synchronised at the end of each half of the window; each half's turn is kept, and every reading below
is repeated from each half alone: the verdict's sensitivity to the window). Levels 1 (alone, the same method) to the
largest asked run in one set of worker processes, the workers above a level waiting idle, so every level has the
same start-up; at level m each stepping copy uses 1/m of the host's cores (alone: all of them, as the wall's own
measurement). A level's slowdown is
the mean turn of its groups over the turn alone; its throughput gain is level / slowdown.

A second mode, ``streams``, measures what the workflow cannot do yet: the copies in **one** process, each group
on its own CUDA stream, stepped turn by turn in a round (off CUDA the same round without streams). Processes on one
GPU share it by time slices (without NVIDIA's MPS, kernels of two processes do not run at once), so a step captured
in a CUDA graph, which keeps the device busy with small kernels rather than idle between launches, may gain little
from them; kernels on two streams of one process can run at once. No runner trains groups so; a ``fits`` reading on
streams says what one taking the groups greedily into m streams would reach, and is recorded apart from the
workflow's (``verdict_with_streams``).

Two bounds then read the column at each measured level ``m``, from the groups' walls one at a time (``walls``):

- **upper** (any greedy order of the jobs, as Snakemake's scheduler runs them): with at most m groups at once and
  every group slowed by at most s_hi(m), the largest slowdown measured at m (over the shapes measured), Graham's
  list-scheduling bound gives a makespan ≤ (sum(walls) / m + max(walls) × (1 − 1/m)) × s_hi(m);
- **lower** (any schedule with at most the largest measured level at once): the longest group takes at least its
  wall, and the column at least sum(walls) / G, G the largest throughput gain measured (with each level's smallest
  slowdown over the shapes).

The rule, stated before any GPU run of this measurement: the column **fits with sharing** where some level's upper
bound is within the goal; it does **not fit up to m copies** (m the largest measured) where the lower bound exceeds
the goal; it stays **open** between. Assumed, and named in the record: a group's slowdown with fewer groups at once
is no larger than with m (the tail of a schedule), groups of other shapes slow each other as the measured shapes'
copies do (the smallest and the largest model are measured, bracketing the column), and the gain between two measured
levels is no larger than the larger of theirs. Verdicts ``fits`` and ``cannot fit`` of the wall's own rule stand as
they are; the sharing rule reads only the rows it leaves ``open``.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing as mp
import os
import queue
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from assocmem.errors import AssocmemError
from assocmem.memorisation.decisive_wall import (
    GOAL_S,
    MODEL_ERROR_SCALES,
    NEVER,
    Arm,
    arm_name,
    group_jobs,
    n_parameters,
    ready_group,
    synchronize,
)

MODES = ("processes", "streams")
ASSUMPTIONS = (
    "a group's slowdown with fewer groups at once is no larger than with the level's number",
    "groups of other shapes slow each other as the measured shapes' copies do",
    "the throughput gain between two measured levels is no larger than the larger of theirs",
)
TIMEOUT_S = 600.0  # the longest wait for a worker's report: its start (torch, CUDA, the group's jobs) or a window


@dataclass(frozen=True)
class SharedTurns:
    """A group's turn while ``copies`` groups of its shape step at once, one process each (``mode`` processes) or
    on one stream each of one process (streams)."""

    model: str
    n_params: int
    n_facts: int
    precision: str
    cuda_graphs: bool
    copies: int
    turn_s: float  # the mean over the copies of their turns' wall time in the window
    turns: int  # turns the copies stepped in the window, in all
    mode: str = "processes"
    halves_s: tuple[float, float] = (math.nan, math.nan)  # the mean turn in each half of the window


def measure_sharing(exp: dict[str, Any], store: Path, model: str, n_facts: int, arm: Arm, device: str,
                    levels: list[int], window_s: float, warmup: int, work: Path,
                    mode: str = "processes") -> list[SharedTurns]:
    """The group (``model``, ``n_facts``: facts in ``store``) in ``arm`` at each level of sharing (1 and
    ``levels``): by worker processes (one per copy at the largest level) that start once, or (``mode`` streams) by
    one worker process holding every copy."""
    if mode not in MODES:
        raise AssocmemError(f"sharing mode {mode!r}: one of {', '.join(MODES)}")
    levels = sorted({1, *levels})
    copies = levels[-1]
    context = mp.get_context("spawn")  # a fresh interpreter per worker, as each workflow job is (CUDA needs it)
    barrier, results = context.Barrier(copies), context.Queue()
    run = work / f"{mode}_{arm_name(arm)}_{model}_{n_facts}"
    # not daemonic: a daemonic process may not start its own (torch.compile's workers); the finally below ends them
    if mode == "streams":
        workers = [context.Process(target=_stream_worker, args=(exp, store, model, arm, device, levels, window_s,
                                                                warmup, run, copies, results))]
    else:
        workers = [context.Process(target=_worker, args=(exp, store, model, arm, device, levels, window_s, warmup,
                                                         run / f"copy{i}", i, copies, barrier, results))
                   for i in range(copies)]
    for worker in workers:
        worker.start()
    try:
        rows = [_receive(results, workers, f"{model}/{n_facts}") for _ in range(sum(levels))]
    finally:
        for worker in workers:
            worker.join(timeout=30)
            if worker.is_alive():
                worker.terminate()
    n_params = rows[0][5]
    return [SharedTurns(model, n_params, n_facts, arm[0], arm[1], level, _mean(r[2] for r in at),
                        sum(r[3] for r in at), mode, (_mean(r[4][0] for r in at), _mean(r[4][1] for r in at)))
            for level in levels for at in [[r for r in rows if r[0] == level]]]


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def _receive(results, workers: list, group: str) -> tuple[int, int, float, int, tuple[float, float], int]:
    """One worker's (level, copy, turn seconds, turns, the turn in each half of the window, parameters a replica); a
    worker's failure, or its death, as a one-line error."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        try:
            row = results.get(timeout=1.0)
            break
        except queue.Empty:
            if dead := [i for i, w in enumerate(workers) if w.exitcode not in (None, 0)]:
                raise AssocmemError(f"sharing measurement of {group}: copy {dead[0]} died (exit code "
                                    f"{workers[dead[0]].exitcode})") from None
            if time.monotonic() > deadline:
                raise AssocmemError(f"sharing measurement of {group}: no worker reported within {TIMEOUT_S:.0f} s"
                                    ) from None
    if row[0] == "error":
        raise AssocmemError(f"sharing measurement of {group}: copy {row[1]} failed: {row[2]}")
    return row


def _worker(exp, store, model, arm, device, levels, window_s, warmup, work, index, copies, barrier, results) -> None:
    """One copy: its group built and warmed up, then at each level a window of turns where ``index`` < level
    (idle otherwise), the copies meeting at the barrier before and after each window."""
    try:
        jobs = group_jobs(exp, model, store, arm, device, work, eval_interval=NEVER)
        group, steps = ready_group(jobs, warmup), [warmup]
        for level in levels:
            barrier.wait(timeout=TIMEOUT_S)
            if index < level:
                torch.set_num_threads(max(1, (os.cpu_count() or 1) // level))  # the host's cores, shared
                results.put((level, index, *_halved_window([group], [None], steps, window_s),
                             n_parameters(jobs[0])))
            barrier.wait(timeout=TIMEOUT_S)
    except Exception as error:  # reported to the parent in one line; the other copies' barrier is released
        barrier.abort()
        results.put(("error", index, f"{type(error).__name__}: {error}"))


def _stream_worker(exp, store, model, arm, device, levels, window_s, warmup, work, copies, results) -> None:
    """Every copy in this one process, each built, warmed up and stepped on its own CUDA stream (none off CUDA): at
    each level the first ``level`` copies step in rounds, one turn each a round, for a window of wall time."""
    try:
        streams = [torch.cuda.Stream() if device == "cuda" else None for _ in range(copies)]
        groups = []
        for i, stream in enumerate(streams):
            jobs = group_jobs(exp, model, store, arm, device, work / f"copy{i}", eval_interval=NEVER)
            with _on(stream):
                groups.append(ready_group(jobs, warmup))
        steps, n_params = [warmup] * copies, n_parameters(jobs[0])
        for level in levels:
            measured = _halved_window(groups[:level], streams[:level], steps, window_s)
            for i in range(level):
                results.put((level, i, *measured, n_params))
    except Exception as error:  # reported to the parent in one line
        results.put(("error", 0, f"{type(error).__name__}: {error}"))


def _on(stream: torch.cuda.Stream | None):
    return torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()


def step_round(groups: list, streams: list, steps: list[int], clock: float) -> None:
    """One turn of each of ``groups`` (:func:`ready_group`'s tuples), each on its stream (None: the current one),
    group i from ``steps[i]``, which it advances. The groups share nothing but the host thread and the device."""
    for i, ((training, optimizer, pending, active), stream) in enumerate(zip(groups, streams, strict=True)):
        with _on(stream):
            training.loop_step(optimizer, steps[i], active, pending, clock)
        steps[i] += 1


def _round_window(groups: list, streams: list, steps: list[int], window_s: float) -> tuple[int, float]:
    """Rounds of :func:`step_round` for ``window_s`` seconds of wall time: (rounds, seconds to the last one's end,
    every stream's work done)."""
    device = groups[0][0].device
    synchronize(device)
    start = time.perf_counter()
    rounds = 0
    while time.perf_counter() - start < window_s:
        step_round(groups, streams, steps, start)
        rounds += 1
    synchronize(device)
    return rounds, time.perf_counter() - start


def _halved_window(groups: list, streams: list, steps: list[int], window_s: float
                   ) -> tuple[float, int, tuple[float, float]]:
    """A window of ``window_s`` seconds as two halves, each timed to its work's end: (turn seconds over the window,
    turns a group, the turn in each half). The halves show how much a reading depends on the window's length."""
    halves = [_round_window(groups, streams, steps, window_s / 2) for _ in range(2)]
    turns, seconds = sum(t for t, _ in halves), sum(s for _, s in halves)
    return seconds / turns, turns, (halves[0][1] / halves[0][0], halves[1][1] / halves[1][0])


def slowdowns(shared: list[SharedTurns], arm: Arm, mode: str = "processes",
              half: int | None = None) -> dict[int, tuple[float, float]]:
    """Per level of sharing: the smallest and the largest slowdown of a group over the shapes measured in ``arm``
    and ``mode`` (its turn at that level over its turn alone, measured so), over the whole windows or over one
    ``half`` (0, 1) of each."""
    mine = [s for s in shared if (s.precision, s.cuda_graphs) == arm and s.mode == mode]

    def turn(s: SharedTurns) -> float:
        return s.turn_s if half is None else s.halves_s[half]

    alone = {(s.model, s.n_facts): turn(s) for s in mine if s.copies == 1}
    by_level: dict[int, list[float]] = {}
    for s in mine:
        by_level.setdefault(s.copies, []).append(turn(s) / alone[(s.model, s.n_facts)])
    return {level: (min(v), max(v)) for level, v in sorted(by_level.items())}


def makespan_bounds(walls: list[float], level: int, slowdown: float) -> float:
    """Graham's bound on a greedy schedule of ``walls`` with at most ``level`` at once, each slowed by at most
    ``slowdown``: no schedule the workflow's scheduler picks takes longer."""
    return (sum(walls) / level + max(walls) * (1 - 1 / level)) * slowdown


def lower_bound(walls: list[float], gain: float) -> float:
    """No schedule with a throughput gain of at most ``gain`` takes less: the longest group alone, or all of them at
    that gain."""
    return max(max(walls), sum(walls) / gain)


def sharing_verdict(walls: list[float], slow: dict[int, tuple[float, float]], goal_s: float = GOAL_S) -> dict:
    """The sharing rule (module docstring) on one column's group walls, at the measured levels."""
    upper = {level: makespan_bounds(walls, level, hi) for level, (_, hi) in slow.items()}
    gain = max(level / lo for level, (lo, _) in slow.items())
    lower = lower_bound(walls, gain)
    fitting = [level for level, bound in upper.items() if bound <= goal_s]
    top = max(slow)
    rule = (f"fits with {min(fitting)} at once" if fitting else
            f"does not fit up to {top} at once" if lower > goal_s else "open")
    return {"rule": rule, "upper_s": {str(k): v for k, v in upper.items()}, "lower_s": lower, "best_gain": gain}


# the projection row's keys for each mode's reading: (reading, verdict, verdict with the walls scaled); the verdict
# read from each half of the windows alone is under the verdict's key + "_by_half"
READING_KEYS = {"processes": ("sharing", "verdict_with_sharing", "verdict_with_sharing_if_walls_scaled"),
                "streams": ("sharing_streams", "verdict_with_streams", "verdict_with_streams_if_walls_scaled")}
HALVES = ("first", "second")


def read_projection(projection: list[dict[str, Any]], shared: list[SharedTurns]) -> None:
    """Add to each row of decisive_wall's projection that its rule leaves ``open`` each measured mode's reading by
    the sharing rule, as measured, with the walls scaled by the model's error and from each half of the windows
    alone (where measured); the other rows keep their verdict."""
    for mode in dict.fromkeys(s.mode for s in shared):
        reading_key, verdict_key, scaled_key = READING_KEYS[mode]
        halved = all(not math.isnan(s.halves_s[0]) for s in shared if s.mode == mode)
        for row in projection:
            slow = slowdowns(shared, (row["precision"], row["cuda_graphs"]), mode)
            if row["verdict"] != "open" or len(slow) < 2:
                row[verdict_key] = row["verdict"]
                continue
            walls = [w["wall_s"] for w in row["by_group"]]
            reading = sharing_verdict(walls, slow)
            row[reading_key] = {**reading, "slowdowns": {str(k): list(v) for k, v in slow.items()}}
            row[verdict_key] = reading["rule"]
            row[scaled_key] = {str(f): sharing_verdict([f * w for w in walls], slow)["rule"]
                               for f in MODEL_ERROR_SCALES}
            if halved:
                row[verdict_key + "_by_half"] = {
                    name: sharing_verdict(walls, slowdowns(shared, (row["precision"], row["cuda_graphs"]), mode,
                                                           half))["rule"] for half, name in enumerate(HALVES)}


STREAMS_NOTE = ("streams: the copies in one process, one CUDA stream each; no runner trains groups so, and "
                "verdict_with_streams is what one taking them greedily into that many streams would reach")


def record(shared: list[SharedTurns], window_s: float) -> dict[str, Any]:
    modes = list(dict.fromkeys(s.mode for s in shared))
    return {"window_s": window_s, "host_cores": os.cpu_count(), "assumptions": list(ASSUMPTIONS), "modes": modes,
            **({"streams_note": STREAMS_NOTE} if "streams" in modes else {}), "turns": [asdict(s) for s in shared]}


def summary(rec: dict[str, Any]) -> str:
    lines = [f"  groups sharing the device ({rec['sharing']['window_s']:g} s windows):"]
    for s in rec["sharing"]["turns"]:
        halves = s.get("halves_s", (math.nan, math.nan))
        lines.append(f"    {s.get('mode', 'processes')} {arm_name((s['precision'], s['cuda_graphs']))} "
                     f"{s['model']}/{s['n_facts']} x{s['copies']}: turn {1e3 * s['turn_s']:.2f} ms "
                     f"({s['turns']} turns; halves {1e3 * halves[0]:.2f}, {1e3 * halves[1]:.2f} ms)")
    for mode, (reading_key, verdict_key, _) in READING_KEYS.items():
        for row in rec["projection"]:
            if reading_key in row:
                lines.append(_reading_line(mode, row, verdict_key))
    return "\n".join(lines)


def _reading_line(mode: str, row: dict[str, Any], verdict_key: str) -> str:
    reading_key, _, scaled_key = READING_KEYS[mode]
    reading = row[reading_key]
    upper = ", ".join(f"{v / 60:.1f} min with {m}" for m, v in reading["upper_s"].items())
    walls = ", ".join(f"x{f}: {v}" for f, v in row[scaled_key].items())
    halves = ", ".join(f"{k} half: {v}" for k, v in row.get(verdict_key + "_by_half", {}).items())
    return (f"    {mode} {arm_name((row['precision'], row['cuda_graphs']))} {row['law']} b={row['b']:.2f}: "
            f"{row[verdict_key]} (best gain x{reading['best_gain']:.1f}, needed x{row['throughput_gain_needed']:.1f}; "
            f"at least {reading['lower_s'] / 60:.1f} min, at most {upper}; walls {walls}"
            + (f"; windows' {halves}" if halves else "") + ")")
