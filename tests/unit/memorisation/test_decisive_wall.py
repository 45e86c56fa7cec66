"""The decisive column's wall by its trainer's measured costs (assocmem.memorisation.decisive_wall): the group cost
model's arithmetic, the rule's three verdicts, the projection against the cost model's own steps, and the
measurement and the check run on a tiny grid of the same layout."""

from __future__ import annotations

import json
import math
import sys

import pytest
import torch
from helpers import ROOT
from hypothesis import given
from hypothesis import strategies as st

from assocmem.memorisation import decisive, decisive_floor
from assocmem.memorisation import decisive_wall as dw
from assocmem.memorisation import power_alternatives as pa

sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_decisive_wall as bench  # noqa: E402 (the command, beside the benchmarks)


@pytest.fixture(scope="module")
def column():
    return bench.column_experiment()


def cost(n_params: int, n_facts: int, step_s: float = 1e-3, evaluation_s: float = 0.1, checkpoint_s: float = 0.5,
         precision: str = "bf16") -> dw.GroupCost:
    return dw.GroupCost("M", n_params, n_facts, 8, precision, False, step_s, evaluation_s, checkpoint_s)


@given(st.floats(1, 300_000), st.sampled_from([500, 2000]), st.integers(1000, 300_000))
def test_a_run_stops_at_the_first_evaluation_at_or_after_its_steps_or_at_its_budget(steps, interval, budget):
    stop = dw.stop_step(steps, interval, budget)
    assert stop == budget or stop % interval == 0
    assert min(steps, budget) <= stop <= budget
    assert stop < steps + interval


def test_a_groups_wall_counts_its_steps_evaluations_and_checkpoints():
    c = cost(1, 1, step_s=0.002, evaluation_s=0.3, checkpoint_s=1.5)
    # 46,000 steps: 23 evaluations (every 2,000), checkpoints at 20,000 and 40,000
    assert dw.group_wall(c, 46_000, 2000, 20_000) == pytest.approx(46_000 * 0.002 + 23 * 0.3 + 2 * 1.5)
    # a group that stops on a checkpoint's step writes none there: it has finished
    assert dw.group_wall(c, 40_000, 2000, 20_000) == pytest.approx(40_000 * 0.002 + 20 * 0.3 + 1 * 1.5)


@pytest.mark.parametrize(("serial", "longest", "floor", "expected"), [
    (590, 300, 100, "fits"), (600, 600, 600, "fits"), (900, 601, 100, "cannot fit"), (900, 100, 700, "cannot fit"),
    (900, 500, 500, "open")])
def test_the_rule_fits_one_after_another_cannot_fit_on_the_longest_or_the_floor_else_open(serial, longest, floor,
                                                                                          expected):
    assert dw.verdict(serial, longest, floor, goal_s=600) == expected


def every_group(step_s=1e-3, evaluation_s=0.1, checkpoint_s=0.5) -> list[dw.GroupCost]:
    return [cost(n, d, step_s * (1 + n / 1e6), evaluation_s * d / 8192, checkpoint_s)
            for n in decisive.N_PARAMS for d in decisive.N_FACTS]


def test_the_projection_sums_each_groups_wall_at_the_cost_models_steps(column):
    costs = every_group()
    rows = dw.project(costs, column, {"bf16": 1e15})
    recorded = decisive.recorded_runs()
    truths = list(decisive.column_steps(recorded, pa.truths(recorded)))
    assert [(r["law"], r["b"]) for r in rows] == [(t["law"], t["b"]) for t, *_ in truths]
    for row, (_, runs, _, _, steps) in zip(rows, truths, strict=True):
        assert row["complete"] and row["groups"] == row["groups_measured"] == 30
        expected = 0.0  # recomputed from the runs: every seed of a cell has the cell's steps
        for c in costs:
            cell = (runs["n_params"] == c.n_params).to_numpy() & (runs["n_facts"] == c.n_facts).to_numpy()
            assert cell.sum() == decisive.SEEDS
            budget = 1000 * c.n_facts / 64
            stop = min(math.ceil(steps[cell].max() / 2000) * 2000, budget)
            expected += stop * c.step_s + math.ceil(stop / 2000) * c.evaluation_s + (stop - 1) // 20_000 * 0.5
        assert row["serial_s"] == pytest.approx(expected)
        assert row["longest_group_s"] == max(g["wall_s"] for g in row["by_group"])
        assert row["longest_group_steps"] <= 256_000
        assert row["throughput_gain_needed"] == pytest.approx(row["serial_s"] / 600)
        floor = decisive_floor.floor({"bf16": 1e15})
        assert row["floor_s"] in [f["floor_s"]["bf16"] for f in floor]


def test_the_projection_decides_by_the_rule(column):
    fast = dw.project(every_group(step_s=1e-6, evaluation_s=1e-4, checkpoint_s=0.0), column, {"bf16": 1e18})
    assert {row["verdict"] for row in fast} == {"fits"}
    # a smallest model's group trains its whole budget (256,000 steps) under every truth: at 3 ms a step, 12.8 min
    slow = dw.project(every_group(step_s=3e-3), column, {"bf16": 1e18})
    assert {row["verdict"] for row in slow} == {"cannot fit"}
    assert all(row["longest_group_s"] > 600 for row in slow)
    middling = dw.project(every_group(step_s=2e-4, evaluation_s=0.0, checkpoint_s=0.0), column, {"bf16": 1e18})
    assert all(row["serial_s"] > 600 >= row["longest_group_s"] for row in middling)
    assert {row["verdict"] for row in middling} == {"open"}


def test_the_verdict_is_read_again_with_the_walls_scaled_by_the_models_error(column):
    rows = dw.project(every_group(step_s=1e-4, evaluation_s=0.0, checkpoint_s=0.0), column, {"bf16": 1e18})
    for row in rows:
        assert set(row["verdict_if_walls_scaled"]) == {str(f) for f in dw.MODEL_ERROR_SCALES}
        for factor, rule in row["verdict_if_walls_scaled"].items():
            f = float(factor)
            assert rule == dw.verdict(f * row["serial_s"], f * row["longest_group_s"], row["floor_s"])
    # near the goal the verdict rests on the model: one after another in 475-685 s, so some truth fits as measured
    # and is open at 1.25x
    assert any(r["verdict"] == "fits" and r["verdict_if_walls_scaled"]["1.25"] == "open" for r in rows)


def test_a_projection_of_some_groups_only_reads_cannot_fit_or_incomplete(column):
    some = [c for c in every_group(step_s=1e-6, evaluation_s=0.0, checkpoint_s=0.0) if c.n_params < 100_000]
    rows = dw.project(some, column, {"bf16": 1e18})
    assert all(not r["complete"] and r["groups_measured"] == 6 for r in rows)
    assert {r["verdict"] for r in rows} == {"incomplete"}  # its sums are lower bounds: they cannot say it fits
    slow = [c for c in every_group(step_s=3e-3) if c.n_params < 100_000]
    assert {r["verdict"] for r in dw.project(slow, column, {"bf16": 1e18})} == {"cannot fit"}


def test_each_arm_is_projected_from_its_own_costs(column):
    graphed = [dw.GroupCost("M", c.n_params, c.n_facts, 8, "bf16", True, 1e-6, 1e-6, 0.0) for c in every_group()]
    rows = dw.project(every_group(step_s=1e-2) + graphed, column, {"bf16": 1e18})
    assert [(r["precision"], r["cuda_graphs"]) for r in rows] == [("bf16", False)] * 3 + [("bf16", True)] * 3
    assert all(r["serial_s"] > 100 * g["serial_s"] for r, g in zip(rows[:3], rows[3:], strict=True))


def test_each_precision_is_projected_from_its_own_costs(column):
    fp32 = [dw.GroupCost("M", c.n_params, c.n_facts, 8, "fp32", False, 1e-2, 0.1, 0.5) for c in every_group()]
    both = every_group(step_s=1e-6, evaluation_s=1e-6, checkpoint_s=0.0) + fp32
    rows = dw.project(both, column, {"bf16": 1e18, "fp32": 1e18})
    by_precision = {p: [r for r in rows if r["precision"] == p] for p in ("bf16", "fp32")}
    assert len(by_precision["bf16"]) == len(by_precision["fp32"]) == 3
    assert all(f["serial_s"] > 100 * b["serial_s"] for b, f in zip(*by_precision.values(), strict=True))


def test_the_stores_hold_the_columns_facts_per_subset(tiny):
    _, stores, _ = tiny
    assert sorted(stores) == [20, 40]


def test_every_group_is_measured_by_the_stacked_trainers_own_calls(tiny):
    exp, stores, work = tiny
    costs = dw.measure(exp, stores, [("fp32", False), ("bf16", False)], "cpu", ["D0", "D1"], steps=2, warmup=1,
                       work=work / "m")
    assert [(c.model, c.n_facts, c.precision) for c in costs] == [
        (m, d, p) for p in ("fp32", "bf16") for m in ("D0", "D1") for d in (20, 40)]
    assert not any(c.cuda_graphs for c in costs)  # none off CUDA
    assert all(c.replicas == 2 and c.step_s > 0 and c.evaluation_s > 0 and c.checkpoint_s > 0 for c in costs)
    d0, d1 = (dw.group_jobs(exp, m, stores[40], ("fp32", False), "cpu", work / "n")[0] for m in ("D0", "D1"))
    assert costs[0].n_params == dw.n_parameters(d0) < costs[2].n_params == dw.n_parameters(d1)
    assert not list((work / "m").rglob("stacked_checkpoint.pt"))  # the timed checkpoint is not left behind


def test_a_groups_jobs_are_its_seeds_at_the_precision_and_device_asked(tiny):
    exp, stores, work = tiny
    jobs = dw.group_jobs(exp, "D1", stores[20], ("bf16", True), "cpu", work / "g")
    assert [job.seed for job in jobs] == [3, 1003]
    assert {(job.settings.precision, job.settings.cuda_graphs) for job in jobs} == {("bf16", True)}
    assert jobs[0].settings.max_steps == math.ceil(100 * 20 / 8)  # the step budget of 100 exposures a fact


def test_the_check_run_trains_the_group_for_real_and_sets_its_wall_beside_the_model(tiny):
    exp, stores, work = tiny
    (c,) = dw.measure(exp, stores, [("fp32", False)], "cpu", ["D0"], steps=2, warmup=1, work=work / "c")[:1]
    check = dw.check_run(exp, c, stores[c.n_facts], "cpu", 9, work / "check")
    assert check["group"] == "D0/20" and check["steps"] <= 9
    assert check["modelled_s"] == pytest.approx(dw.group_wall(c, check["steps"], 4, 6))
    assert check["fixed_s"] == pytest.approx(check["wall_s"] - check["modelled_s"])
    for k in (0, 1):
        summary = json.loads((work / "check" / f"D0.s{k}" / "summary.json").read_text())
        assert summary["precision"] == "fp32" and summary["steps"] <= 9


def test_the_command_records_and_prints_the_projection(tmp_path, monkeypatch, column):
    monkeypatch.setattr(dw, "write_stores", lambda exp, work: {8192: work, 16384: work})
    monkeypatch.setattr(dw, "measure", lambda *a, **k: every_group(step_s=3e-3))
    monkeypatch.setattr(dw, "product_rates", lambda device, precisions: {"bf16": 1e15})
    rec = bench.main(["--precision", "bf16", "--out", str(tmp_path / "wall.json"), "--device", "cpu"])
    assert json.loads((tmp_path / "wall.json").read_text())["projection"][0]["verdict"] == "cannot fit"
    assert rec["checks"] == [] and len(rec["costs"]) == 30 and rec["device_name"] == "cpu"


def test_graphed_arms_are_measured_first_and_each_group_is_reported_as_it_ends(tiny, monkeypatch):
    exp, stores, work = tiny
    monkeypatch.setattr(dw, "measure_group", lambda jobs, steps, warmup: (1.0, 1.0, 1.0, jobs[0].settings.cuda_graphs))
    seen = []
    costs = dw.measure(exp, stores, [("fp32", False), ("fp32", True)], "cpu", ["D0"], steps=2, warmup=1,
                       work=work / "order", on_group=lambda so_far: seen.append(list(so_far)))
    assert [(c.cuda_graphs, c.n_facts) for c in costs] == [(True, 20), (True, 40), (False, 20), (False, 40)]
    assert seen == [costs[:k] for k in range(1, 5)]


def test_a_cap_during_the_costs_keeps_the_groups_measured_so_far(tmp_path, monkeypatch):
    """gpu_check.sh stops the command at its part's cap: the record written while the costs were measured stays."""
    measured = every_group(step_s=3e-3)

    def capped(*args, on_group, **kwargs):
        on_group(measured[:7])
        raise KeyboardInterrupt  # as the cap's signal would end it

    monkeypatch.setattr(dw, "write_stores", lambda exp, work: {8192: work, 16384: work})
    monkeypatch.setattr(dw, "measure", capped)
    monkeypatch.setattr(dw, "product_rates", lambda device, precisions: {"bf16": 1e15})
    with pytest.raises(KeyboardInterrupt):
        bench.main(["--precision", "bf16", "--out", str(tmp_path / "wall.json"), "--device", "cpu"])
    rec = json.loads((tmp_path / "wall.json").read_text())
    assert rec["stage"] == "costs" and len(rec["costs"]) == 7
    assert {row["verdict"] for row in rec["projection"]} <= {"incomplete", "cannot fit"}


def test_every_calls_at_once_then_not_again_within_its_interval(monkeypatch):
    clock = iter([0.0, 0.0, 5.0, 21.0, 21.0, 30.0])
    monkeypatch.setattr(bench.time, "perf_counter", lambda: next(clock))
    calls = []
    every = bench.Every(20.0, calls.append)
    for value in "abcd":
        every(value)
    assert calls == ["a", "c"]


@pytest.mark.parametrize(("argv", "device", "message"), [
    (["--graphs", "on"], "cpu", "--graphs on: CUDA graphs need a CUDA device, not cpu"),
    (["--graphs", "maybe"], "cuda", "--graphs: maybe; one of off, on"),
    (["--graphs", "off,on", "--warmup", "3"], "cuda", "--warmup 3: a CUDA graph is captured after 3 eager steps"),
    (["--precision", "fp16"], "cpu", "--precision: fp16; one of fp32, bf16")])
def test_the_arms_asked_for_are_checked_in_one_line(argv, device, message):
    with pytest.raises(SystemExit, match=message):
        bench.arms_of(bench.parser().parse_args(argv), torch.device(device))
    ok = bench.parser().parse_args(["--precision", "fp32,bf16", "--graphs", "off,on"])
    assert bench.arms_of(ok, torch.device("cuda")) == [("fp32", False), ("fp32", True), ("bf16", False), ("bf16", True)]


@pytest.mark.parametrize(("flag", "value", "message"), [("--models", "D0,X9", "X9 not in"),
                                                        ("--precision", "fp16", "fp16; one of fp32, bf16")])
def test_unknown_models_and_precisions_are_refused_in_one_line(flag, value, message, capsys):
    with pytest.raises(SystemExit, match=message):
        bench.main([flag, value])
