"""The benchmarks' records behind the docs: the decisive column's CPU wall and sharing records are their own
arithmetic, and benchmarks/README.md and docs/results.md quote them, the stacked evaluation's and the device rows'
records as they are."""

from __future__ import annotations

import json
import math

import pytest
from helpers import ROOT
from test_results_record import _close, _load, _section


def test_the_decisive_walls_cpu_record_is_its_own_arithmetic_and_the_docs_quote_it() -> None:
    """docs/results/memorisation_decisive_wall_cpu.json (issue 41): today's projection of the record's measured
    group costs gives its projection (the rule's verdicts included), its check's model is the record's costs at the
    check's steps, and docs/results.md and benchmarks/README.md quote the costs and the check."""
    from assocmem.config import load_config, load_schema
    from assocmem.memorisation import decisive_wall as dw
    from assocmem.schemas import config_schema_path

    rec = _load("memorisation_decisive_wall_cpu.json")
    costs = [dw.GroupCost(**c) for c in rec["costs"]]
    (exp,) = load_config(ROOT / rec["config"], load_schema(config_schema_path()))["experiments"].values()
    today = json.loads(json.dumps(dw.project(costs, exp, rec["rates_flops"])))
    assert _close(today, rec["projection"])
    (check,) = rec["checks"]
    cost = next(c for c in costs if f"{c.model}/{c.n_facts}" == check["group"])
    assert check["modelled_s"] == pytest.approx(dw.group_wall(cost, check["steps"], 2000, 20_000))
    section = _section("The memorisation grid").replace("\n  ", " ")
    bench = (ROOT / "benchmarks" / "README.md").read_text().replace("\n", " ")
    by_facts = {c.n_facts: c for c in costs}
    quoted = [f"a turn of 8 replicas {1e3 * by_facts[8192].step_s:.1f} ms at 8,192 facts and "
              f"{1e3 * by_facts[16384].step_s:.1f} ms at 16,384, an evaluation round "
              f"{by_facts[8192].evaluation_s:.2f} s and {by_facts[16384].evaluation_s:.2f} s",
              f"took {check['wall_s']:.1f} s against {check['modelled_s']:.1f} s modelled "
              f"(×{check['wall_over_modelled']:.2f})", f"at commit {rec['commit']}"]
    for text in quoted:
        assert text in section, text
    assert f"{check['wall_s']:.1f} s against {check['modelled_s']:.1f} s projected " \
           f"(×{check['wall_over_modelled']:.2f}" in bench
    assert f"commit {rec['commit']}, fp32, model D0: a turn of 8 replicas {1e3 * by_facts[8192].step_s:.1f} ms" in bench
    longest = rec["projection"][0]["longest_group_s"] / 60
    assert f"alone, 256,000 steps under every truth, takes {longest:.0f} minutes" in section
    assert {row["verdict"] for row in rec["projection"]} == {"cannot fit"}
    assert {v for row in rec["projection"] for v in row["verdict_if_walls_scaled"].values()} == {"cannot fit"}
    assert f"takes {longest:.0f} minutes: cannot fit, at either scale" in section
    turns = [sum(g["steps"] for g in row["by_group"]) for row in rec["projection"]]
    assert f"the column is {min(turns):,}–{max(turns):,} turns (b = 1 to 2" in section
    assert f"need a turn of {600e3 / min(turns):.2f}–{600e3 / max(turns):.2f} ms" in section
    assert f"gain ×{min(turns) * 1e-3 / 600:.1f}–{max(turns) * 1e-3 / 600:.1f} in throughput" in section


def test_the_decisive_sharing_cpu_record_is_its_own_arithmetic_and_benchmarks_readme_quotes_it() -> None:
    """docs/results/memorisation_decisive_sharing_cpu.json (issue 41): its slowdowns are its turns' ratios, the
    wall's rule leaves no row open on the CPU (so none is read again), and benchmarks/README.md quotes its turns."""
    from assocmem.memorisation import decisive_sharing as ds

    rec = _load("memorisation_decisive_sharing_cpu.json")
    shared = [ds.SharedTurns(**t) for t in rec["sharing"]["turns"]]
    turn = {(s.mode, s.copies): s.turn_s for s in shared}
    for mode in ("processes", "streams"):
        assert ds.slowdowns(shared, ("fp32", False), mode) == {
            1: (1.0, 1.0), 2: (turn[mode, 2] / turn[mode, 1],) * 2}
    assert rec["stage"] == "complete" and rec["sharing"]["assumptions"] == list(ds.ASSUMPTIONS)
    assert rec["sharing"]["modes"] == ["processes", "streams"]
    assert all(row["verdict_with_sharing"] == row["verdict_with_streams"] == row["verdict"] == "cannot fit"
               for row in rec["projection"])
    bench = (ROOT / "benchmarks" / "README.md").read_text().replace("\n", " ")
    assert (f"commit {rec['commit']} (`--models D0 --precision fp32 --share 2 --share-window 4 --share-modes "
            "processes,streams`" in bench)
    processes, streams = [(turn[m, 1], turn[m, 2]) for m in ("processes", "streams")]
    assert (f"stepped {1e3 * processes[1]:.1f} ms a turn each against {1e3 * processes[0]:.1f} ms alone: a throughput "
            f"gain of ×{2 * processes[0] / processes[1]:.2f} on two cores" in bench)
    assert (f"in one process, in rounds, {1e3 * streams[1]:.1f} ms against {1e3 * streams[0]:.1f} ms: "
            f"×{2 * streams[0] / streams[1]:.2f}" in bench)
    spread = max(shared, key=lambda s: abs(s.halves_s[0] - s.halves_s[1]) / min(s.halves_s))
    assert (f"The halves of each window differed by at most "
            f"{100 * abs(spread.halves_s[0] - spread.halves_s[1]) / min(spread.halves_s):.1f}% "
            f"({1e3 * min(spread.halves_s):.1f} and {1e3 * max(spread.halves_s):.1f} ms alone)" in bench)
    assert spread.copies == 1


def test_benchmarks_readme_quotes_the_stacked_evaluation_records() -> None:
    """benchmarks/records/stacked-eval-2026-11-29-cpu/ (issue 41): the README's ranges are the three runs'."""
    folder = ROOT / "benchmarks" / "records" / "stacked-eval-2026-11-29-cpu"
    runs = [json.loads(path.read_text())["rows"][0] for path in sorted(folder.glob("run*.json"))]
    assert len(runs) == 3 and {r["model"] for r in runs} == {"D0"} and {r["n_facts"] for r in runs} == {16384}
    bench = (ROOT / "benchmarks" / "README.md").read_text().replace("\n", " ")

    def span(key: str, digits: int = 2) -> str:
        values = [r[key] for r in runs]
        return f"{min(values):.{digits}f}–{max(values):.{digits}f}"

    assert (f"stacked {span('stacked_s')} s, alone {span('alone_s')} s, **{span('ratio_stacked_over_alone')}×**"
            in bench)


def test_benchmarks_readme_quotes_the_device_rows_records() -> None:
    """benchmarks/records/device-rows-2026-11-30-cpu/ (issue 41): the README's ranges are the three runs'."""
    folder = ROOT / "benchmarks" / "records" / "device-rows-2026-11-30-cpu"
    runs = [json.loads(path.read_text()) for path in sorted(folder.glob("run*.json"))]
    assert len(runs) == 3 and {(r["model"], r["n_facts"], r["replicas"]) for r in runs} == {("D0", 16384, 8)}
    bench = (ROOT / "benchmarks" / "README.md").read_text().replace("\n", " ")

    def span(key: str, fmt: str) -> str:
        """The runs' range as printed, one value where they print alike."""
        low, high = (f"{v:{fmt}}" for v in (min(r[key] for r in runs), max(r[key] for r in runs)))
        return low if low == high else f"{low}–{high}"

    assert (f"host batches {span('host_us', '.0f')} µs a turn, device rows {span('rows_us', '.0f')} µs, "
            f"**{span('ratio_rows_over_host', '.3f')}×**" in bench)
    assert (f"the whole turn on the host {span('turn_host_us', '.0f')} µs with host batches and "
            f"{span('turn_rows_us', '.0f')} µs with device rows, **{span('ratio_turn_rows_over_turn_host', '.2f')}×**"
            in bench)
    for r in runs:
        assert math.isclose(r["ratio_rows_over_host"], r["rows_us"] / r["host_us"], rel_tol=1e-12)
        assert math.isclose(r["ratio_turn_rows_over_turn_host"], r["turn_rows_us"] / r["turn_host_us"],
                            rel_tol=1e-12)
    assert "commit 8c1426a, three runs (records `benchmarks/records/device-rows-2026-11-30-cpu/`)" in bench
    results = (ROOT / "docs" / "results.md").read_text().replace("\n  ", " ")
    assert (f"its host share of a turn, which no GPU can shorten, measured {span('turn_rows_us', '.0f')} µs against "
            f"{span('turn_host_us', '.0f')} µs on the 2-core Zen 4 host" in results)
    wall = _load("memorisation_decisive_wall_cpu.json")
    turns = [sum(g["steps"] for g in row["by_group"]) for row in wall["projection"]]

    def host_s(key: str) -> str:
        values = [r[key] for r in runs]
        return f"{min(turns) * min(values) * 1e-6:,.0f}–{max(turns) * max(values) * 1e-6:,.0f} s"

    assert (f"the column's {min(turns):,}–{max(turns):,} turns (its CPU record's projection) takes "
            f"{host_s('turn_rows_us')} of this host's time with device rows, against {host_s('turn_host_us')} with "
            "host batches" in bench)
    assert {json.loads((folder / f"run{i}.json").read_text())["cpu"] for i in (1, 2, 3)} == {runs[0]["cpu"]}
