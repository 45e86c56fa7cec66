"""A memorisation design that decides, stated before it runs (issue 38, item 4): config/memorisation_decisive.yaml,
a column of 8,192 and 16,384 facts on 15 model sizes from about 27,000 to 9.4M parameters (1.5× steps) × 8 seeds,
analysed together with the 96 recorded runs of config/memorisation.yaml (128-1,024 facts). The small-D runs pin
the overhead N0; the new column puts the boundary where the laws are far apart (at 16,384 facts the overhead
truths fitted to the record put it near 64,000 parameters for b = 1 and near 0.9M for b = 2).

``compute`` simulates its power against the three truths of :mod:`assocmem.memorisation.power_alternatives`
(each fitted to the recorded grid), read by the fit that will read the column, the two-budget fit
(:mod:`assocmem.memorisation.boundary_budget`; the one-budget overhead fit's power beside it, ``one_budget``), at
200 grids a truth (the config's ``sweep.power_sims``; 50 left a 90% coverage rule within a binomial standard error
of most rows). The two-budget interval is read at a critical value calibrated at this design, not χ²₁'s 3.84
(whose interval covered 89.0% under the budget-limited truth at b = 1, one point short of the rule): the smallest
value under which the profile gap at the truth stays in 95% of the grids of every truth, read from 200 grids a
truth drawn at CALIBRATION_SEED (:func:`assocmem.memorisation.power_alternatives.calibrated_threshold`), then
judged on the SEED grids, which it never saw (the χ² reading of the same grids beside it, ``chi2``). The column's
config states that value (``sweep.interval_threshold``) before it runs. The grids' gaps are kept in GAPS. A
replication (``--replication``) repeats the calibration and the judgement at two other seeds (REPLICATION_SEEDS),
written beside the record (REPLICATION, REPLICATION_GAPS): not a second chance at the decision (the stated seeds'
record decides), the spread of the decision over the simulation's own sampling. An exploration (``--explore K``)
simulates the design at K seeds a cell on EXPLORATION_SEEDS, 100 grids a truth: how the number of seeds was chosen,
kept as a record of its own (:func:`exploration_paths`), never the seeds a stated design is judged on. It also
estimates the column's cost: steps per run from the exposure budget (a run below the boundary trains its
whole budget, one above it the share of its budget that the recorded stored runs used), CPU seconds per step from
the record's own per-run times (linear in N, one thread; extrapolated ~45× beyond the largest recorded model, so a
rough guide), GPU seconds per step from /work/shared/gpu/README.md (5.76 ms for a small model's eager step on an
H200; 16 processes at once give 5.0× the throughput). Written, not run:

    python -m assocmem.memorisation.decisive   # docs/results/memorisation_decisive_power.json and _gaps.csv
    python -m assocmem.memorisation.decisive --replication   # ..._replication.json and _gaps_replication.csv
    python -m assocmem.memorisation.decisive --explore 8   # ..._exploration_8seeds.json and its gaps
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from assocmem.checkout import record_commit
from assocmem.io import read_json, write_csv, write_json
from assocmem.memorisation import boundary as mb
from assocmem.memorisation import boundary_budget as bb
from assocmem.memorisation import boundary_power as bp
from assocmem.memorisation import power_alternatives as pa
from assocmem.memorisation.cells import stored_at

ROOT = Path(__file__).resolve().parents[3]
SOURCE = ROOT / "docs" / "results" / "memorisation.json"
RECORD = ROOT / "docs" / "results" / "memorisation_decisive_power.json"
GAPS = ROOT / "docs" / "results" / "memorisation_decisive_gaps.csv"
REPLICATION = ROOT / "docs" / "results" / "memorisation_decisive_power_replication.json"
REPLICATION_GAPS = ROOT / "docs" / "results" / "memorisation_decisive_gaps_replication.csv"
CONFIG = ROOT / "config" / "memorisation_decisive.yaml"
# the 15 model sizes of config/memorisation_decisive.yaml (2 layers, 4 heads, d_model 32 ... 624; vocabulary 37)
N_PARAMS = (26976, 41400, 58896, 103104, 159600, 228384, 354600, 508464, 756624, 1135944, 1692504, 2606616,
            4025736, 6134184, 9391824)
N_FACTS = (8192, 16384)
# 8, not 5: at 5 seeds a cell the calibrated interval told 2 from 1.35 under a pure power law at b = 2 in 81.0% of
# the stated grids and 79.0% of the replication's (records at f0086e9 and aaa6344): on the rule's 80% line, no
# margin. 3 seeds gave 64.5% (c950160). 8 chosen on the exploration at EXPLORATION_SEEDS (`--explore 8`, its own
# record), before the stated seeds ran
SEEDS = 8
EXPOSURES = 1000
BATCH = 64
SIMULATIONS = 200  # config/memorisation_decisive.yaml's sweep.power_sims
# fresh seeds: 38-43 were read by the 3- and 5-seed records and variants, 44 and 45 while choosing 8 seeds
SEED = 46  # the grids the design is judged on
CALIBRATION_SEED = 47  # the grids the critical value is read from: never the ones it is judged on
STATED_SEEDS = (SEED, CALIBRATION_SEED)  # (judged, calibration) of the record that decides
REPLICATION_SEEDS = (48, 49)  # (judged, calibration) of the replication, fixed before it ran
EXPLORATION_SEEDS = (44, 45)  # (judged, calibration) of the explorations the number of seeds was chosen on
EXPLORATION_SIMULATIONS = 100
GPU_STEP_S = 5.76e-3  # /work/shared/gpu/README.md: the default's L4 step, eager, one H200
GPU_CONCURRENCY_GAIN = 5.0  # 16 processes at once: 866 against 174 replica-steps/s
# the fit that reads the column: the two-budget model, not blind to a boundary the exposure budget moved, its
# interval at the critical value calibrated at this design (χ²₁'s covered 89.0% under the budget truth at b = 1)
ANALYSIS = "two_budget_calibrated"
_TRAIN_LINE = re.compile(r"assocmem: train (M\d)(?:\.s\d)?/(\S+): .* after (\d+) steps in ([\d.]+) s")


def recorded_runs() -> pd.DataFrame:
    memo = read_json(SOURCE)["memorisation"]
    return stored_at(pd.DataFrame(memo["runs"]), memo["threshold"])


def design(recorded: pd.DataFrame, seeds_per_cell: int = SEEDS) -> pd.DataFrame:
    """The recorded runs' design and the new column."""
    column = pd.DataFrame([(n, d, s) for n in N_PARAMS for d in N_FACTS for s in range(seeds_per_cell)],
                          columns=["n_params", "n_facts", "seed"])
    return pd.concat([recorded[["n_params", "n_facts", "seed"]], column], ignore_index=True)


def cpu_step_model() -> tuple[float, float]:
    """(seconds per step at N = 0, seconds per step per parameter): a line through the record's per-run times."""
    rec = read_json(SOURCE)
    sizes = {run["label"]: run["n_params"] for run in rec["memorisation"]["runs"]}
    points = [(sizes[m.group(1)], float(m.group(4)) / int(m.group(3)))
              for line in rec["stage_lines"] if (m := _TRAIN_LINE.match(line))]
    n, seconds = np.array(points).T
    slope, intercept = np.polyfit(n, seconds, 1)
    return float(intercept), float(slope)


def _stored_share(recorded: pd.DataFrame) -> float:
    stored = recorded[recorded["stored"]]
    return float(np.median(stored["steps"] / stored["max_steps"]))


def column_steps(recorded: pd.DataFrame, truth_set: dict[str, Any], seeds_per_cell: int = SEEDS
                 ) -> Iterator[tuple[dict[str, Any], pd.DataFrame, np.ndarray, np.ndarray, np.ndarray]]:
    """Per overhead truth: (truth, the new column's runs, each run's log boundary, whether the run is below it, its
    steps). A run below the boundary trains its whole exposure budget, one above it the share of its budget that the
    recorded stored runs used."""
    share = _stored_share(recorded)
    column = design(recorded, seeds_per_cell).iloc[len(recorded):]
    budget = EXPOSURES * column["n_facts"].to_numpy(float) / BATCH
    for truth in (t for t in truth_set["rows"] if t["family"] == "overhead"):
        log_nb = pa._seen_boundary(truth, np.log(column["n_facts"].to_numpy(float)), truth_set["log_d_ref"])
        below = np.log(column["n_params"].to_numpy(float)) < log_nb
        yield truth, column, log_nb, below, np.where(below, budget, share * budget)


def cost(recorded: pd.DataFrame, truth_set: dict[str, Any], seeds_per_cell: int = SEEDS) -> dict[str, Any]:
    """Steps, CPU hours (2 cores: two runs at a time) and GPU hours of the new column, per overhead truth."""
    intercept, slope = cpu_step_model()
    rows = []
    for truth, column, log_nb, below, steps in column_steps(recorded, truth_set, seeds_per_cell):
        cpu_s = steps * (intercept + slope * column["n_params"].to_numpy(float))
        rows.append({"law": truth["law"], "b": truth["b"], "n_b_16384": float(np.exp(log_nb.max())),
                     "runs_below_boundary": int(below.sum()), "steps": float(steps.sum()),
                     "cpu_hours_2_cores": float(cpu_s.sum() / 2 / 3600),
                     "gpu_hours_one_process": float(steps.sum() * GPU_STEP_S / 3600),
                     "gpu_hours_16_processes": float(steps.sum() * GPU_STEP_S / GPU_CONCURRENCY_GAIN / 3600)})
    return {"cpu_step_s_intercept": intercept, "cpu_step_s_per_param": slope,
            "stored_share_of_budget": _stored_share(recorded),
            "budget_steps": {str(d): EXPOSURES * d / BATCH for d in N_FACTS}, "gpu_step_s": GPU_STEP_S,
            "gpu_concurrency_gain": GPU_CONCURRENCY_GAIN, "by_truth": rows}


def _simulate(seed: int, n_sim: int, seeds_per_cell: int) -> dict[str, Any]:
    recorded = recorded_runs()
    return pa.design_power(design(recorded, seeds_per_cell), pa.truths(recorded), n_sim=n_sim, seed=seed,
                           two_budget=True, keep_gaps=True)


def simulate_both(n_sim: int, seeds: tuple[int, int] = STATED_SEEDS, workers: int = 2,
                  seeds_per_cell: int = SEEDS) -> tuple[dict[str, Any], dict[str, Any]]:
    """(judged, calibration): the design's grids at ``seeds`` (judged, calibration), in parallel processes (each
    seed its own random stream, so the same numbers as one after the other)."""
    if seeds[0] == seeds[1]:
        raise ValueError(f"decisive: the judged and calibration seeds must differ, got {seeds[0]} twice")
    with ProcessPoolExecutor(max_workers=workers) as pool:
        judged, calibration = pool.map(_simulate, seeds, (n_sim, n_sim), (seeds_per_cell, seeds_per_cell))
    return judged, calibration


def critical_value_sensitivity(judged: dict[str, Any], calibration_power: dict[str, Any],
                               stated: dict[str, Any]) -> list[dict[str, Any]]:
    """The decision read at other critical values, all on the judged grids: χ²'s, the value calibrated to the rule's
    90% floor instead of the nominal 95%, the stated one (``stated``: :func:`pa.calibrated_threshold` of
    ``calibration_power``) and the ends of its sampling interval. Not a choice among them (the stated one decides):
    what would change the decision."""
    floor = pa.calibrated_threshold(calibration_power, level=pa.MIN_COVERAGE)
    choices = [("chi-square, 95%", pa.bo.THRESHOLD), ("calibrated to 90% coverage", floor["threshold"]),
               ("calibrated to 95% coverage (stated)", stated["threshold"]),
               ("its 90% sampling interval, low end", stated["threshold_interval"][0]),
               ("its 90% sampling interval, high end", stated["threshold_interval"][1])]
    rows = []
    for choice, value in choices:
        if not np.isfinite(value):
            rows.append({"choice": choice, "threshold": value, "can_decide": False, "reason": "unbounded"})
            continue
        power = pa.at_threshold(judged, value, model="at")
        rows.append({"choice": choice, "threshold": value,
                     "min_coverage": min(row["at"]["coverage"] for row in power["rows"]),
                     "weakest_paper_exclusion": min(row["at"]["excludes"][other] for row in power["rows"]
                                                    for true, other in bp.PAPER_PAIRS if row["law"] == true),
                     **dict(zip(("can_decide", "reason"), pa.can_decide(power, bp.PAPER_PAIRS, model="at"),
                                strict=True))})
    return rows


def gap_table(power: dict[str, Any], grids: str) -> pd.DataFrame:
    """One row per simulated grid: its truth, the two-budget fit's b̂ and profile gaps at the truth and each law."""
    frames = []
    for row in power["rows"]:
        gaps = pd.DataFrame(row["two_budget_gaps"], columns=["b_hat", "gap_at_truth", *(f"gap_at_{law}"
                                                                                       for law in mb.LAWS)])
        frames.append(gaps.assign(grids=grids, seed=power["seed"], family=row["family"], law=row["law"],
                                  grid=range(len(gaps))))
    table = pd.concat(frames, ignore_index=True)
    return table[["grids", "seed", "family", "law", "grid", *table.columns[:5]]]


def _without_gaps(power: dict[str, Any]) -> dict[str, Any]:
    return {**power, "rows": [{k: v for k, v in row.items() if k != "two_budget_gaps"} for row in power["rows"]]}


def compute(n_sim: int = SIMULATIONS, seeds: tuple[int, int] = STATED_SEEDS,
            seeds_per_cell: int = SEEDS) -> tuple[dict[str, Any], pd.DataFrame]:
    """The record and its per-grid gaps (judged and calibration grids) at ``seeds`` (judged, calibration), the
    column at ``seeds_per_cell`` seeds a cell."""
    recorded = recorded_runs()
    truth_set = pa.truths(recorded)
    started = time.monotonic()
    judged, calibration_power = simulate_both(n_sim, seeds, seeds_per_cell=seeds_per_cell)
    calibration = pa.calibrated_threshold(calibration_power)
    power = pa.at_threshold(judged, calibration["threshold"])
    gaps = pd.concat([gap_table(judged, "judged"), gap_table(calibration_power, "calibration")], ignore_index=True)
    record = {"config": "config/memorisation_decisive.yaml", "with_recorded_runs": len(recorded),
              "n_params": list(N_PARAMS), "n_facts": list(N_FACTS), "seeds": seeds_per_cell,
              "new_runs": len(N_PARAMS) * len(N_FACTS) * seeds_per_cell, "n_sim": n_sim, "seed": seeds[0],
              "calibration_seed": seeds[1], "replication": seeds == REPLICATION_SEEDS,
              "exploration": seeds == EXPLORATION_SEEDS,
              "simulation_s": round(time.monotonic() - started, 1),
              "analysis": ANALYSIS, **decision(power, ANALYSIS), "calibration": calibration,
              "chi2": decision(power, "two_budget"), "one_budget": decision(power, "overhead"),
              "critical_value_sensitivity": critical_value_sensitivity(judged, calibration_power, calibration),
              "power": _without_gaps(power), "calibration_power": _without_gaps(calibration_power),
              "cost": cost(recorded, truth_set, seeds_per_cell), "record_fit": record_fit(recorded)}
    return record, gaps


def decision(power: dict[str, Any], model: str) -> dict[str, Any]:
    """Whether ``model``'s interval decides the paper's 2 against 1 and 1.35, and every law against every other."""
    decide, reason = pa.can_decide(power, bp.PAPER_PAIRS, model=model)
    every, every_reason = pa.can_decide(power, model=model)
    return {"can_decide": decide, "reason": reason, "tells_every_law_apart": every, "every_law_reason": every_reason}


def record_fit(recorded: pd.DataFrame) -> dict[str, Any]:
    """The two-budget fit of the recorded runs alone, at χ²₁'s critical value: the one calibrated here is this
    design's (the record with the column), not the recorded grid's (whose own power record calibrates χ²'s)."""
    return bb.two_budget_record(bb.fit_two_budget(recorded))


def exploration_paths(seeds_per_cell: int) -> tuple[Path, Path]:
    """(record, gaps) of the exploration at ``seeds_per_cell`` seeds a cell, beside the stated record."""
    return (RECORD.with_name(f"memorisation_decisive_power_exploration_{seeds_per_cell}seeds.json"),
            GAPS.with_name(f"memorisation_decisive_gaps_exploration_{seeds_per_cell}seeds.csv"))


def main(argv: list[str] | None = None) -> Path:
    """Write the record (or, with ``--replication``, the replication; with ``--explore K``, the exploration at K
    seeds a cell) and its gaps; returns the record's path."""
    parser = argparse.ArgumentParser(prog="python -m assocmem.memorisation.decisive",
                                     description=__doc__.split("\n")[0])
    role = parser.add_mutually_exclusive_group()
    role.add_argument("--replication", action="store_true",
                      help=f"calibrate and judge at seeds {REPLICATION_SEEDS[1]} and {REPLICATION_SEEDS[0]} instead")
    role.add_argument("--explore", type=int, metavar="K",
                      help=f"the design at K seeds a cell, at seeds {EXPLORATION_SEEDS[1]} and {EXPLORATION_SEEDS[0]}, "
                           f"{EXPLORATION_SIMULATIONS} grids a truth")
    args = parser.parse_args(argv)
    if args.explore is not None:
        if args.explore < 1:
            parser.error(f"--explore: seeds a cell must be at least 1, got {args.explore}")
        path, gaps = exploration_paths(args.explore)
        record, gap_rows = compute(EXPLORATION_SIMULATIONS, EXPLORATION_SEEDS, args.explore)
    else:
        seeds, path, gaps = ((REPLICATION_SEEDS, REPLICATION, REPLICATION_GAPS) if args.replication
                             else (STATED_SEEDS, RECORD, GAPS))
        record, gap_rows = compute(seeds=seeds)
    write_csv(gaps, gap_rows)
    write_json(path, {"commit": record_commit(), "date": datetime.date.today().isoformat(), **record,
                      "gaps": str(gaps.relative_to(ROOT))})
    return path


if __name__ == "__main__":
    result = json.loads(main().read_text())
    print(f"decisive design: {'decides' if result['can_decide'] else 'does not decide'}: {result['reason']}")
