"""Power of the radius test's deciding design (issue 38, items 1 and 6), simulated from known truths.

The design (config/radius_gpt2.yaml): pretrained GPT-2 small, medium and large (n = 768, 1024, 1280), each on
R = 3 independent chunk samples. Per design this module draws the 3 x R per-replicate levels (the NN-distance
statistic of each run) from a truth with a run-to-run coefficient of variation ``cv`` (Gaussian, so the truth is the
levels' mean), and applies the claim's own code to them: :func:`~assocmem.report.nn_statistics.replicate_interval`
and :func:`~assocmem.report.nn_statistics.width_growth` for the intervals, and the decision rules of
:mod:`assocmem.report.radius_rules` (``band_outcome`` per width, ``growth_outcome``, ``radius_verdict``). The
verdict simulated is the one the level and growth outcomes give, for one statistic in one unit; the row also needs
the outcomes over the nested samples, for the mean and the median, with and without the gain, which this simulation
takes to agree.

The run-to-run CV of GPT-2's NN distances over independent 80K-chunk samples is not known here (nothing of
GPT-2 has run on this machine), so it is a grid. What the project's records show is written beside it: the spread
of the default run's levels across its runs of one width (trained toy models of different depth, so more than
run-to-run variation) and the query-bootstrap CV of each run (query resampling only, a lower bound).

    python -m assocmem.report.radius_power --out docs/results/radius_power.json
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from assocmem.checkout import COMMIT_HELP, record_commit
from assocmem.io import read_json, write_json
from assocmem.report import radius_rules as rules
from assocmem.report.header import cpu_model
from assocmem.report.nn_statistics import CONFIDENCE, replicate_interval, width_growth
from assocmem.theory import radius as ra

ROOT = Path(__file__).resolve().parents[3]
DEFAULT_RECORD = ROOT / "docs" / "results" / "default.json"
WIDTHS = (768, 1024, 1280)  # config/radius_gpt2.yaml: gpt2, gpt2-medium, gpt2-large
REPLICATES = 3
CVS = (0.005, 0.02, 0.05, 0.10)
DESIGNS = 1000
SEED = 38
DETECTS = 0.80  # share of designs whose verdict is the truth's
CALIBRATED = 0.90  # share of designs whose 95% intervals cover the truth
OUTCOMES = (rules.AGREES, rules.DISAGREES, rules.UNDECIDED)
VERDICTS = ("reproduced", "refuted", "not-testable")
_LEVEL_KEY = re.compile(r"^([^.]+)\.(mean|median)\.level$")


@dataclass(frozen=True)
class Truth:
    """level(n) = scale * 2r*(1024) * (n / 1024)^exponent + overhead; the paper's is scale 1, exponent 1/2."""

    name: str
    scale: float = 1.0
    exponent: float = 0.5
    overhead: float = 0.0

    def levels(self, widths: np.ndarray) -> np.ndarray:
        base = 2 * ra.radius_star(1024)
        return self.scale * base * (np.asarray(widths, dtype=np.float64) / 1024) ** self.exponent + self.overhead


TRUTHS = (
    Truth("paper: 2r*(n)"),
    Truth("1.15 x 2r*(n), inside the tolerance", scale=1.15),
    Truth("the paper's Fig. 2: 20/15.49 = 1.29 x 2r*(n), on the tolerance's edge", scale=rules.PAPER_RATIO),
    Truth("1.5 x 2r*(n)", scale=1.5),
    Truth("0.7 x 2r*(n)", scale=0.7),
    Truth("overhead: 2r*(n) + 5", overhead=5.0),
    Truth("no growth: 2r*(1024) at every n (s = 0)", exponent=0.0),
    Truth("linear growth: 2r*(1024) n/1024 (s = 1)", exponent=1.0),
)


def effective_exponent(truth: Truth, widths: np.ndarray) -> float:
    """The least-squares log-log slope of the noise-free levels over the design's widths (the truth the growth
    interval should cover; the truth's exponent where it is a pure power law)."""
    return float(np.polyfit(np.log(widths), np.log(truth.levels(widths)), 1)[0])


def _on_edge(ratio: float, tolerance: float) -> bool:
    return bool(np.isclose(ratio, tolerance, rtol=1e-9) or np.isclose(ratio, 1 / tolerance, rtol=1e-9))


def expected(truth: Truth, widths: np.ndarray, tolerance: float = rules.PAPER_RATIO) -> dict[str, Any]:
    """What the rules give without noise: per width the level outcome (undecided for a truth on the band's edge),
    the growth outcome, and the verdict."""
    ratios = truth.levels(widths) / (2 * ra.radius_star(widths))
    band = (1 / tolerance, tolerance)
    level = [rules.UNDECIDED if _on_edge(r, tolerance) else rules.band_outcome(r, r, band) for r in ratios]
    slope = effective_exponent(truth, widths)
    growth = rules.AGREES if np.isclose(slope, 0.5, atol=1e-9) else rules.DISAGREES
    return {"level": dict(zip(map(str, widths), level, strict=True)), "growth": growth, "exponent": slope,
            "ratio_to_2r_star": dict(zip(map(str, widths), ratios.tolist(), strict=True)),
            "verdict": rules.radius_verdict([*level, growth])}


def simulate_design(truth: Truth, cv: float, rng: np.random.Generator, widths: np.ndarray, replicates: int,
                    tolerance: float = rules.PAPER_RATIO) -> dict[str, Any]:
    """One simulated design: each width's level outcome and whether its interval covers the truth; the growth
    outcome, its interval and coverage; the verdict."""
    truth_levels = truth.levels(widths)
    draws = truth_levels[:, None] * (1 + cv * rng.standard_normal((widths.size, replicates)))
    level, covered = [], []
    for n_dim, true_level, row in zip(widths, truth_levels, draws, strict=True):
        _, low, high = replicate_interval(row)
        two_r = 2 * ra.radius_star(int(n_dim))
        level.append(rules.band_outcome(low / two_r, high / two_r, (1 / tolerance, tolerance)))
        covered.append(low <= true_level <= high)
    growth = width_growth(np.repeat(widths, replicates), draws.ravel())
    low, high = growth["slope_lo"], growth["slope_hi"]
    outcome = rules.growth_outcome(low, high)
    return {"level": level, "level_covered": covered, "growth": outcome, "slope_lo": low, "slope_hi": high,
            "slope_covered": low <= effective_exponent(truth, widths) <= high,
            "verdict": rules.radius_verdict([*level, outcome])}


def _shares(values: list[str], names: tuple[str, ...]) -> dict[str, float]:
    return {name: values.count(name) / len(values) for name in names}


def cell(truth: Truth, cv: float, designs: int, rng: np.random.Generator, widths: tuple[int, ...] = WIDTHS,
         replicates: int = REPLICATES, tolerance: float = rules.PAPER_RATIO) -> dict[str, Any]:
    """One truth at one CV over ``designs`` simulated designs: coverage, each outcome's shares, the verdict's."""
    width_array = np.asarray(widths, dtype=np.int64)
    sims = [simulate_design(truth, cv, rng, width_array, replicates, tolerance) for _ in range(designs)]
    want = expected(truth, width_array, tolerance)
    level = {str(n): {"coverage": float(np.mean([s["level_covered"][i] for s in sims])),
                      **_shares([s["level"][i] for s in sims], OUTCOMES)} for i, n in enumerate(widths)}
    half = np.array([(s["slope_hi"] - s["slope_lo"]) / 2 for s in sims])
    growth = {"coverage": float(np.mean([s["slope_covered"] for s in sims])),
              **_shares([s["growth"] for s in sims], OUTCOMES),
              "excludes_zero": float(np.mean([s["slope_lo"] > 0 for s in sims])),
              "excludes_half": float(np.mean([not s["slope_lo"] <= 0.5 <= s["slope_hi"] for s in sims])),
              "median_half_width": float(np.median(half))}
    verdicts = _shares([s["verdict"] for s in sims], VERDICTS)
    coverage = min([growth["coverage"], *(v["coverage"] for v in level.values())])
    detection = verdicts[want["verdict"]]
    return {"truth": truth.name, "cv": cv, "designs": designs, "expected": want, "level": level, "growth": growth,
            "verdict": verdicts, "detection": detection, "detects": detection >= DETECTS,
            "min_coverage": coverage, "calibrated": coverage >= CALIBRATED}


def cell_rng(seed: int, truth_index: int, cv_index: int) -> np.random.Generator:
    """Each cell its own stream, so one cell of a record can be recomputed alone."""
    return np.random.default_rng([seed, truth_index, cv_index])


def power_table(designs: int = DESIGNS, seed: int = SEED, truths: tuple[Truth, ...] = TRUTHS,
                cvs: tuple[float, ...] = CVS, widths: tuple[int, ...] = WIDTHS,
                replicates: int = REPLICATES) -> list[dict[str, Any]]:
    return [cell(truth, cv, designs, cell_rng(seed, i, j), widths, replicates)
            for i, truth in enumerate(truths) for j, cv in enumerate(cvs)]


def summary(table: list[dict[str, Any]]) -> dict[str, Any]:
    """Per CV: does the design decide (every truth's verdict in >= 80% of designs, every interval covering in
    >= 90%)? And the largest CV of the grid at which it does."""
    by_cv: dict[str, Any] = {}
    for cv in sorted({row["cv"] for row in table}):
        rows = [row for row in table if row["cv"] == cv]
        by_cv[str(cv)] = {"decides": all(row["detects"] and row["calibrated"] for row in rows),
                          "undetected": [row["truth"] for row in rows if not row["detects"]],
                          "uncalibrated": [row["truth"] for row in rows if not row["calibrated"]]}
    deciding = [float(cv) for cv, result in by_cv.items() if result["decides"]]
    return {"by_cv": by_cv, "decides_up_to_cv": max(deciding) if deciding else None}


def recorded_cv(record: dict[str, Any]) -> dict[str, Any]:
    """From a run's record: each run's level (its primary set) and its query-bootstrap CV, and per statistic the CV
    of the levels across the runs (all of one width in the default: different models, not replicate samples)."""
    numbers = record["numbers"]["radius"]
    runs: dict[str, dict[str, Any]] = {}
    for key, value in numbers.items():
        if (match := _LEVEL_KEY.match(key)) and f"{key}_lo" in numbers:
            run, statistic = match.groups()
            spread = (numbers[f"{key}_hi"] - numbers[f"{key}_lo"]) / (2 * 1.959964)
            runs.setdefault(run, {})[statistic] = {"level": value, "query_cv": spread / value}
    across = {}
    for statistic in ("mean", "median"):
        levels = np.array([values[statistic]["level"] for values in runs.values() if statistic in values])
        if levels.size >= 2:
            across[statistic] = float(levels.std(ddof=1) / levels.mean())
    return {"commit": record.get("commit"), "runs": runs, "cv_across_runs": across}


ROW_DESIGNS = 200  # the report's own check: enough to tell 80% from 50%, cheap beside the bootstrap
ROW_TRUTHS = {"paper": TRUTHS[0], "overhead": next(t for t in TRUTHS if t.overhead),
              "no_growth": next(t for t in TRUTHS if t.exponent == 0)}


def row_power(widths: list[int], replicates: int, replicate_levels: list[np.ndarray],
              seed: int) -> tuple[dict[str, Any], str]:
    """For the radius row on pretrained models: the largest run-to-run CV of one model's replicate levels, and the
    share of designs like the one that ran (its widths, its fewest replicates) that give each of three truths its
    verdict at that CV. Description beside the verdict, not a rule of it."""
    cvs = [float(np.std(v, ddof=1) / np.mean(v)) for v in replicate_levels if len(v) >= 2 and np.mean(v) > 0]
    if not cvs or len(widths) < 2 or replicates < 2:
        return {}, ""
    cv, rng = max(cvs), np.random.default_rng(seed)
    detection = {key: cell(truth, cv, ROW_DESIGNS, rng, tuple(widths), replicates)["detection"]
                 for key, truth in ROW_TRUTHS.items()}
    numbers = {"design_power.run_to_run_cv": cv, "design_power.designs": ROW_DESIGNS,
               **{f"design_power.{key}": share for key, share in detection.items()}}
    line = (f"the design's power at the largest run-to-run CV of a model's replicates, {cv:.3f} (simulated, "
            f"{ROW_DESIGNS} designs of {len(widths)} widths × {replicates} replicates, the same rules): a true "
            f"$2r^*(n)$ is reproduced in {detection['paper']:.0%}, $2r^*(n)+5$ refuted in "
            f"{detection['overhead']:.0%}, a level constant in $n$ refuted in {detection['no_growth']:.0%} "
            "(`python -m assocmem.report.radius_power` tabulates the full grid)")
    return numbers, line


def record(designs: int = DESIGNS, seed: int = SEED, commit: str = "", command: str = "") -> dict[str, Any]:
    started = time.monotonic()
    table = power_table(designs, seed)
    return {"schema": "assocmem-radius-power-v1", "command": command, "commit": commit,
            "date": datetime.date.today().isoformat(), "host": f"{cpu_model()} ({os.cpu_count()} logical CPUs)",
            "simulation_s": round(time.monotonic() - started, 1),
            "inputs": {"config": "config/radius_gpt2.yaml", "widths": list(WIDTHS), "replicates": REPLICATES,
                       "cvs": list(CVS), "designs": designs, "seed": seed, "tolerance": rules.PAPER_RATIO,
                       "confidence": CONFIDENCE, "detects_at": DETECTS, "calibrated_at": CALIBRATED,
                       "noise": "level x (1 + cv z), z standard normal, independent per replicate",
                       "truths": [asdict(truth) for truth in TRUTHS],
                       "recorded_cv": {"source": "docs/results/default.json",
                                       **recorded_cv(read_json(DEFAULT_RECORD))}},
            "table": table, "summary": summary(table)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--commit", default=None, help=COMMIT_HELP)
    parser.add_argument("--designs", type=int, default=DESIGNS)
    args = parser.parse_args(argv)
    commit = args.commit or record_commit()
    command = f"python -m assocmem.report.radius_power --out {args.out}"
    result = record(args.designs, SEED, commit, command + (f" --designs {args.designs}"
                                                           if args.designs != DESIGNS else ""))
    write_json(args.out, result)
    print(f"radius design: decides up to CV {result['summary']['decides_up_to_cv']} of {list(CVS)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
