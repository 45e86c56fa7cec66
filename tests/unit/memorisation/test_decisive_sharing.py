"""The decisive column with groups sharing one device (assocmem.memorisation.decisive_sharing): the schedule bounds
against simulated greedy schedules, the sharing rule's three readings, the slowdowns per arm, the projection read
again, the measurement by worker processes on a tiny grid, and the command's staged record."""

from __future__ import annotations

import json
import queue
import sys
from types import SimpleNamespace

import pytest
import torch
from helpers import ROOT
from hypothesis import given
from hypothesis import strategies as st

from assocmem.errors import AssocmemError
from assocmem.memorisation import decisive
from assocmem.memorisation import decisive_sharing as ds
from assocmem.memorisation import decisive_wall as dw

sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_decisive_wall as bench  # noqa: E402 (the command, beside the benchmarks)


def greedy_makespan(durations: list[float], lanes: int) -> float:
    """The makespan of a list schedule: each job, in the order given, on the lane that frees first."""
    free = [0.0] * lanes
    for duration in durations:
        lane = free.index(min(free))
        free[lane] += duration
    return max(free)


@given(st.lists(st.tuples(st.floats(1, 1000), st.floats(0, 1)), min_size=1, max_size=40),
       st.integers(1, 8), st.floats(1, 4), st.floats(0, 3))
def test_no_greedy_schedule_outlasts_the_upper_bound_or_beats_the_lower(jobs, lanes, s_lo, spread):
    """Each job slowed by some factor between the level's smallest and largest slowdown, in any order."""
    s_hi = s_lo + spread
    walls = [wall for wall, _ in jobs]
    durations = [wall * (s_lo + u * spread) for wall, u in jobs]
    makespan = greedy_makespan(durations, lanes)
    assert makespan <= ds.makespan_bounds(walls, lanes, s_hi) * (1 + 1e-9)
    assert makespan >= ds.lower_bound(walls, lanes / s_lo) * (1 - 1e-9)


@pytest.mark.parametrize(("walls", "slow", "rule"), [
    ([60.0] * 20, {1: (1, 1), 4: (1.0, 1.1), 8: (1.2, 1.5)}, "fits with 4 at once"),  # (300 + 45) x 1.1 = 380 s
    ([300.0] * 10, {1: (1, 1), 2: (1.1, 1.2), 4: (1.5, 2.0), 8: (3, 4)}, "does not fit up to 8 at once"),  # >= 1125 s
    ([60.0] * 20, {1: (1, 1), 8: (2.5, 6)}, "open")])  # 375 s <= makespan <= 1215 s
def test_the_sharing_rule_reads_fits_does_not_fit_and_open(walls, slow, rule):
    reading = ds.sharing_verdict(walls, slow, goal_s=600)
    assert reading["rule"] == rule
    assert reading["best_gain"] == max(level / lo for level, (lo, _) in slow.items())
    assert reading["lower_s"] <= min(reading["upper_s"].values())


def turns(model: str, copies: int, turn_s: float, arm: dw.Arm = ("bf16", True), n_params: int = 1,
          mode: str = "processes", halves: tuple[float, float] | None = None) -> ds.SharedTurns:
    return ds.SharedTurns(model, n_params, 16384, arm[0], arm[1], copies, turn_s, 100, mode, halves or (turn_s,) * 2)


def test_a_levels_slowdowns_are_the_smallest_and_largest_over_the_shapes_of_its_arm():
    shared = [turns("D0", 1, 1e-3), turns("D0", 4, 2e-3), turns("D14", 1, 4e-3), turns("D14", 4, 12e-3),
              turns("D0", 1, 1.0, ("bf16", False)), turns("D0", 4, 1.0, ("bf16", False))]
    assert ds.slowdowns(shared, ("bf16", True)) == {1: (1.0, 1.0), 4: (2.0, 3.0)}
    assert ds.slowdowns(shared, ("bf16", False)) == {1: (1.0, 1.0), 4: (1.0, 1.0)}
    assert ds.slowdowns(shared, ("fp32", False)) == {}


def every_group(step_s: float) -> list[dw.GroupCost]:
    return [dw.GroupCost(f"D{i}", n, d, 8, "bf16", True, step_s, 0.0, 0.0)
            for i, n in enumerate(decisive.N_PARAMS) for d in decisive.N_FACTS]


def test_the_projection_is_read_again_where_its_rule_leaves_it_open():
    column = bench.column_experiment()
    rows = dw.project(every_group(4e-4), column, {"bf16": 1e18})  # one after another 845-1498 s, each group 102 s
    assert {row["verdict"] for row in rows} == {"open"}
    shared = [turns("D0", 1, 1e-3), turns("D0", 8, 1.2e-3), turns("D14", 1, 1e-3), turns("D14", 8, 1.5e-3)]
    ds.read_projection(rows, shared)
    for row in rows:
        walls = [g["wall_s"] for g in row["by_group"]]
        assert row["verdict_with_sharing"] == ds.sharing_verdict(walls, {1: (1, 1), 8: (1.2, 1.5)})["rule"]
        assert row["sharing"]["slowdowns"] == {"1": [1.0, 1.0], "8": [1.2, 1.5]}
        assert set(row["verdict_with_sharing_if_walls_scaled"]) == {str(f) for f in dw.MODEL_ERROR_SCALES}
    assert {row["verdict_with_sharing"] for row in rows} == {"fits with 8 at once"}
    fast = dw.project(every_group(1e-7), column, {"bf16": 1e18})
    ds.read_projection(fast, shared)  # a verdict of the wall's own rule stands
    assert all(row["verdict_with_sharing"] == row["verdict"] == "fits" and "sharing" not in row for row in fast)
    unshared = dw.project(every_group(4e-4), column, {"bf16": 1e18})
    ds.read_projection(unshared, [turns("D0", 1, 1e-3, ("fp32", False)), turns("D0", 8, 1e-3, ("fp32", False))])
    assert {row["verdict_with_sharing"] for row in unshared} == {"open"}  # no level of this arm was measured


def test_copies_of_a_group_step_at_once_in_their_own_processes(tiny):
    exp, stores, work = tiny
    store = stores[40]
    shared = ds.measure_sharing(exp, store, "D0", 40, ("fp32", False), "cpu", [2], 0.3, 1, work / "share")
    assert [(s.copies, s.model, s.n_facts, s.precision) for s in shared] == [(k, "D0", 40, "fp32") for k in (1, 2)]
    assert all(s.turns > 0 and s.turn_s > 0 and min(s.halves_s) > 0 for s in shared)
    assert min(shared[0].halves_s) <= shared[0].turn_s <= max(shared[0].halves_s)  # alone: the halves' mean
    assert shared[0].n_params == dw.n_parameters(dw.group_jobs(exp, "D0", store, ("fp32", False), "cpu", work / "j")[0])
    assert not list((work / "share").rglob("*.pt"))  # a window writes no checkpoint or model


def test_a_failing_copy_is_reported_in_one_line(tiny):
    exp, stores, work = tiny
    with pytest.raises(AssocmemError, match=r"sharing measurement of X9/40: copy \d failed: KeyError"):
        ds.measure_sharing(exp, stores[40], "X9", 40, ("fp32", False), "cpu", [2], 0.3, 1, work / "fail")


def test_a_copy_that_dies_is_reported_in_one_line():
    with pytest.raises(AssocmemError, match=r"sharing measurement of D0/32: copy 1 died \(exit code -9\)"):
        ds._receive(queue.Queue(), [SimpleNamespace(exitcode=None), SimpleNamespace(exitcode=-9)], "D0/32")


@pytest.mark.parametrize("text", ["1,2", "2,x", "0"])
def test_sharing_levels_are_whole_numbers_of_at_least_two(text):
    with pytest.raises(SystemExit, match=f"--share {text}: comma-separated whole numbers of at least 2"):
        bench.share_levels(text)
    assert bench.share_levels("2,4,8") == [2, 4, 8] and bench.share_levels("") == []


def test_the_command_shares_the_smallest_and_largest_groups_and_writes_each_stage(tmp_path, monkeypatch):
    out = tmp_path / "wall.json"
    calls = []

    def fake_sharing(exp, store, model, n_facts, arm, device, levels, window_s, warmup, work, mode):
        partial = json.loads(out.read_text())  # what came before is kept if this stage is cut
        assert partial["stage"] == ("costs" if not calls else "sharing")
        assert all("verdict_with_sharing" not in row for row in partial["projection"])  # not read from some shapes
        calls.append((model, n_facts, arm, levels, mode))
        n_params = {c.model: c.n_params for c in every_group(0.0)}[model]
        return [turns(model, level, 1e-3 * level ** 0.5, arm, n_params, mode) for level in (1, *levels)]

    monkeypatch.setattr(dw, "write_stores", lambda exp, work: {8192: work, 16384: work})
    monkeypatch.setattr(dw, "measure", lambda *a, **k: every_group(4e-4))
    monkeypatch.setattr(dw, "product_rates", lambda device, precisions: {"bf16": 1e18})
    monkeypatch.setattr(ds, "measure_sharing", fake_sharing)
    monkeypatch.setattr(bench, "arms_of", lambda args, device: [("bf16", True)])
    rec = bench.main(["--precision", "bf16", "--share", "2,4", "--out", str(out), "--device", "cpu",
                      "--share-modes", "streams,processes"])
    assert calls == [(model, 16384, ("bf16", True), [2, 4], mode)  # the workflow's way first, whatever the order
                     for mode in ("processes", "streams") for model in ("D0", "D14")]
    assert json.loads(out.read_text())["stage"] == rec["stage"] == "complete"
    assert [s["copies"] for s in rec["sharing"]["turns"]] == [1, 2, 4] * 4
    assert rec["sharing"]["modes"] == ["processes", "streams"] and "no runner" in rec["sharing"]["streams_note"]
    assert all(row["verdict_with_streams"] != "open" or "sharing_streams" in row for row in rec["projection"])
    assert rec["sharing"]["assumptions"] == list(ds.ASSUMPTIONS)
    assert all(row["verdict_with_sharing"] != "open" or "sharing" in row for row in rec["projection"])
    printed = ds.summary(rec)  # each level's bound: the sensitivity of the reading to the level
    shared_row = next(row for row in rec["projection"] if "sharing" in row)
    assert f"at least {shared_row['sharing']['lower_s'] / 60:.1f} min" in printed
    assert all(f"{v / 60:.1f} min with {m}" in printed for m, v in shared_row["sharing"]["upper_s"].items())
    with pytest.raises(SystemExit, match="--share-models: X9 not in"):
        bench.main(["--share", "2", "--share-models", "D0,X9"])
    assert "streams bf16" in printed and "processes bf16" in printed


def test_the_graphed_arm_shares_first_and_each_arm_its_processes_before_its_streams():
    arms = [("bf16", False), ("bf16", True), ("fp32", False)]
    assert bench.sharing_order(arms, ["processes", "streams"]) == [
        (("bf16", True), "processes"), (("bf16", True), "streams"), (("bf16", False), "processes"),
        (("bf16", False), "streams"), (("fp32", False), "processes"), (("fp32", False), "streams")]


@pytest.mark.parametrize("text", ["", "threads", "processes,mps"])
def test_sharing_modes_are_processes_or_streams(text):
    with pytest.raises(SystemExit, match="--share-modes .*: comma-separated, of processes, streams"):
        bench.share_modes(text)
    assert bench.share_modes("streams,processes,streams") == ["processes", "streams"]


def test_each_mode_is_read_from_its_own_turns():
    column = bench.column_experiment()
    rows = dw.project(every_group(4e-4), column, {"bf16": 1e18})  # open: one after another 845-1498 s
    shared = [turns("D0", 1, 1e-3), turns("D0", 8, 8e-3),  # processes: no gain at 8
              turns("D0", 1, 1e-3, mode="streams"), turns("D0", 8, 1.2e-3, mode="streams")]
    ds.read_projection(rows, shared)
    for row in rows:
        walls = [g["wall_s"] for g in row["by_group"]]
        assert row["verdict_with_sharing"] == ds.sharing_verdict(walls, {1: (1, 1), 8: (8, 8)})["rule"]
        assert row["verdict_with_streams"] == ds.sharing_verdict(walls, {1: (1, 1), 8: (1.2, 1.2)})["rule"]
        assert row["sharing_streams"]["slowdowns"] == {"1": [1.0, 1.0], "8": [1.2, 1.2]}
        assert set(row["verdict_with_streams_if_walls_scaled"]) == {str(f) for f in dw.MODEL_ERROR_SCALES}
    assert {row["verdict_with_sharing"] for row in rows} == {"does not fit up to 8 at once"}
    assert {row["verdict_with_streams"] for row in rows} == {"fits with 8 at once"}
    assert ds.slowdowns(shared, ("bf16", True), "streams") == {1: (1.0, 1.0), 8: (1.2, 1.2)}
    assert all(row["verdict_with_streams_by_half"] == dict.fromkeys(ds.HALVES, "fits with 8 at once")
               for row in rows)
    with pytest.raises(AssocmemError, match="sharing mode 'mps': one of processes, streams"):
        ds.measure_sharing(column, None, "D0", 1, ("bf16", True), "cpu", [2], 0.1, 1, None, "mps")


def test_copies_on_streams_step_in_rounds_in_one_process(tiny):
    exp, stores, work = tiny
    shared = ds.measure_sharing(exp, stores[40], "D0", 40, ("fp32", False), "cpu", [2], 0.3, 1, work / "streams",
                                "streams")
    assert [(s.copies, s.mode) for s in shared] == [(1, "streams"), (2, "streams")]
    assert all(s.turns > 0 and s.turn_s > 0 and min(s.halves_s) > 0 for s in shared)
    assert min(shared[0].halves_s) <= shared[0].turn_s <= max(shared[0].halves_s)
    assert shared[1].turns % 2 == 0  # two copies, the same number of rounds each
    assert not list((work / "streams").rglob("*.pt"))


def test_groups_stepped_in_rounds_train_as_each_alone(tiny):
    """What a runner of groups on streams needs: stepping groups of two shapes turn by turn in one process changes
    none of their weights (bit for bit on the CPU)."""
    exp, stores, work = tiny

    def groups(tag):
        return [dw.ready_group(dw.group_jobs(exp, model, stores[40], ("fp32", False), "cpu", work / tag / model,
                                             eval_interval=dw.NEVER), 1) for model in ("D0", "D1")]

    together, steps = groups("together"), [1, 1]
    for _ in range(6):
        ds.step_round(together, [None, None], steps, 0.0)
    assert steps == [7, 7]
    for (training, optimizer, pending, active), mixed in zip(groups("alone"), together, strict=True):
        for step in range(1, 7):
            training.loop_step(optimizer, step, active, pending, 0.0)
        for (name, alone), (_, other) in zip(training.stack.named_stacked(), mixed[0].stack.named_stacked(),
                                             strict=True):
            assert torch.equal(alone, other), name
        assert torch.equal(pending, mixed[2])


def test_each_half_of_the_windows_is_read_alone_where_measured():
    """The sensitivity of a reading to the window: the first half's turns say fits, the second's do not."""
    column = bench.column_experiment()
    rows = dw.project(every_group(4e-4), column, {"bf16": 1e18})
    shared = [turns("D0", 1, 1e-3), turns("D0", 8, 4.6e-3, halves=(1.2e-3, 8e-3))]
    ds.read_projection(rows, shared)
    walls = [g["wall_s"] for g in rows[0]["by_group"]]
    for row in rows:
        assert row["verdict_with_sharing_by_half"] == {
            "first": ds.sharing_verdict(walls, {1: (1, 1), 8: (1.2, 1.2)})["rule"],
            "second": ds.sharing_verdict(walls, {1: (1, 1), 8: (8, 8)})["rule"]}
    assert {row["verdict_with_sharing_by_half"]["first"] for row in rows} == {"fits with 8 at once"}
    assert {row["verdict_with_sharing_by_half"]["second"] for row in rows} == {"does not fit up to 8 at once"}
    rec = {"sharing": ds.record(shared, 2.0), "projection": rows}
    assert "windows' first half: fits with 8 at once, second half: does not fit up to 8 at once" in ds.summary(rec)
    assert "halves 1.20, 8.00 ms" in ds.summary(rec)
    unhalved = dw.project(every_group(4e-4), column, {"bf16": 1e18})  # a record from before the halves
    ds.read_projection(unhalved, [ds.SharedTurns("D0", 1, 16384, "bf16", True, k, t, 100) for k, t in
                                  ((1, 1e-3), (8, 4.6e-3))])
    assert all("verdict_with_sharing_by_half" not in row and row["verdict_with_sharing"] for row in unhalved)
