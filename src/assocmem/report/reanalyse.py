"""Today's analysis on the runs of a recorded grid (issue 38, items 1-2): no training, only the analysis stage
(:func:`assocmem.memorisation.analysis.analyse` for a memorisation grid, :func:`assocmem.sweep.analysis.analyse`
for a scaling sweep) and the claim's verdict, applied to the runs a record of ``docs/results/`` holds. Written as
a record of its own, beside the run's:

    python -m assocmem.report.reanalyse docs/results/memorisation.json \\
        --config config/memorisation.yaml --out docs/results/memorisation_reanalysis.json --commit <sha>
    python -m assocmem.report.reanalyse docs/results/scaling.json \\
        --config config/scaling.yaml --out docs/results/scaling_reanalysis.json --commit <sha>

The run's record keeps its own verdict (the code that ran it); this record says what today's analysis makes of the
same runs. ``--with`` adds the runs of further records of the same kind of facts (bits per fact, threshold) to one
joint analysis: config/memorisation_decisive.yaml's column is designed to be analysed with the recorded grid.
``tests/unit/docs/`` checks that today's code refits it and that docs/results.md quotes it.
"""

from __future__ import annotations

import argparse
import datetime
import time
from pathlib import Path
from typing import Any

import pandas as pd

from assocmem.checkout import COMMIT_HELP, record_commit
from assocmem.errors import AssocmemError
from assocmem.io import read_json, write_json
from assocmem.memorisation.analysis import analyse
from assocmem.report.claims.memorisation import memorisation_verdict

KEEP = ("threshold", "stop_at_recall", "bits_per_fact", "n_runs", "seeds", "n_params", "n_facts", "n_span", "d_span",
        "n_span_covers_d_squared", "laws", "fit", "can_decide", "power_reason", "overhead_fit", "alternatives",
        "alternatives_can_decide", "alternatives_reason", "alternatives_tell_every_law_apart",
        "alternatives_every_law_reason", "sensitivity", "per_d", "two_budget_fit", "two_budget_reason", "primary_model")
RUN_COLUMNS = ("model", "seed", "label", "subset", "fraction", "n_params", "n_facts", "recall", "steps", "max_steps",
               "stop_rule", "recall_half_budget")


def _sweep_and_seed(config: Path) -> tuple[dict[str, Any], int]:
    from assocmem.config import load_config, load_schema
    from assocmem.schemas import config_schema_path

    loaded = load_config(config, load_schema(config_schema_path()))  # the schema's defaults, as the run had them
    experiments = loaded["experiments"]
    if len(experiments) != 1:
        raise AssocmemError(f"{config}: expected one experiment, found {', '.join(experiments)}")
    return next(iter(experiments.values()))["sweep"], int(loaded["seed"])


def _memorisation(record_file: Path) -> dict[str, Any]:
    memo = read_json(record_file).get("memorisation")
    if memo is None or "runs" not in memo:
        raise AssocmemError(f"{record_file}: no memorisation runs to re-analyse (not a memorisation grid's record)")
    return memo


def reanalyse(record_file: Path, config: Path, *, commit: str, extra: tuple[Path, ...] = ()) -> dict[str, Any]:
    rec = read_json(record_file)
    memo = _memorisation(record_file)
    sweep, seed = _sweep_and_seed(config)
    frames = [pd.DataFrame(memo["runs"])[list(RUN_COLUMNS)]]
    for other in extra:
        more = _memorisation(other)
        for key in ("bits_per_fact", "threshold", "stop_at_recall"):
            if more[key] != memo[key]:
                raise AssocmemError(f"{other}: {key} {more[key]} differs from {record_file}'s {memo[key]}: not one "
                                    "analysis")
        frames.append(pd.DataFrame(more["runs"])[list(RUN_COLUMNS)])
    runs = pd.concat(frames, ignore_index=True)
    started = time.monotonic()
    analysis = analyse(runs, {"information": {"bits_per_fact": memo["bits_per_fact"]}}, memo["threshold"],
                       memo["stop_at_recall"], power_sims=int(sweep["power_sims"]), seed=seed,
                       interval_threshold=sweep.get("interval_threshold"))
    verdict, reason = memorisation_verdict(analysis)
    return {"schema": "assocmem-reanalysis-v1", "source": str(record_file), "source_commit": rec["commit"],
            "source_verdict": rec["verdicts"]["memorisation"], "commit": commit,
            "date": datetime.date.today().isoformat(),
            "command": f"python -m assocmem.report.reanalyse {record_file} --config {config}"
                       + "".join(f" --with {other}" for other in extra), "with": [str(other) for other in extra],
            "analysis_s": round(time.monotonic() - started, 1), "verdict": verdict, "reason": reason,
            "analysis": {key: analysis[key] for key in KEEP if key in analysis}}


SCALING_KEEP = ("fit", "tolerance", "in_grid", "n_range", "d_range", "grid_reach", "power", "power_misfit",
                "power_budget", "can_detect", "can_detect_with_misfit", "can_detect_with_budget", "power_reason",
                "detectable_range", "laws", "sensitivity")


def reanalyse_scaling(record_file: Path, config: Path, *, commit: str) -> dict[str, Any]:
    """Today's scaling-sweep analysis (:func:`assocmem.sweep.analysis.analyse`: the boundary fit and its power under
    the fitted model, the misfit the grid shows and a budget-limited truth) on the cells a scaling record holds."""
    from assocmem.report.claims.scaling import sweep_verdict
    from assocmem.sweep.analysis import analyse as analyse_sweep

    rec = read_json(record_file)
    cells = (rec.get("sweep") or {}).get("cells")
    if not cells:
        raise AssocmemError(f"{record_file}: no sweep cells to re-analyse (not a scaling sweep's record)")
    sweep, seed = _sweep_and_seed(config)
    started = time.monotonic()
    analysis = analyse_sweep(pd.DataFrame(cells), sweep, seed=seed)
    parametric = analysis["parametric_boundary"]
    verdict, reason = sweep_verdict(parametric)
    return {"schema": "assocmem-reanalysis-v1", "kind": "scaling", "source": str(record_file),
            "source_commit": rec["commit"], "source_verdict": rec["verdicts"]["scaling"], "commit": commit,
            "date": datetime.date.today().isoformat(),
            "command": f"python -m assocmem.report.reanalyse {record_file} --config {config}", "with": [],
            "analysis_s": round(time.monotonic() - started, 1), "verdict": verdict, "reason": reason,
            "analysis": {key: parametric[key] for key in SCALING_KEEP if key in parametric}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("record", type=Path)
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--commit", default=None, help=COMMIT_HELP)
    parser.add_argument("--with", dest="extra", type=Path, nargs="*", default=[],
                        help="further records whose runs join the analysis")
    args = parser.parse_args(argv)
    args.commit = args.commit or record_commit()
    if "memorisation" in read_json(args.record):
        result, kind = reanalyse(args.record, args.config, commit=args.commit, extra=tuple(args.extra)), "memorisation"
    else:
        if args.extra:
            raise AssocmemError("--with joins memorisation grids only")
        result, kind = reanalyse_scaling(args.record, args.config, commit=args.commit), "scaling"
    write_json(args.out, result)
    print(f"{kind} re-analysis: {result['verdict']}: {result['reason']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
