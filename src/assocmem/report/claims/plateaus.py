"""Where plateaus land on data of different entropy (issue 38): each full-data run's held-out CE against its own
data's exact floor H and against 1, for every experiment with an exact floor (config/entropy.yaml puts the
grammar's data beside variants at H near 0.5 and 1.5, :mod:`assocmem.qf.variant`). Description beside the loss-floor
verdict: a plateau that follows H from dataset to dataset is the data's entropy, one that stays at 1 is a bound."""

from __future__ import annotations

import math
from typing import Any

from assocmem.report import convergence
from assocmem.report.artifacts import Experiment, Run
from assocmem.report.evidence import Evidence, floors

HEADER = ["dataset", "run", "exact floor H", "best CE ± SE", "CE − H", "CE − 1", "status"]
Z = 1.96


def _dataset(exp: Experiment) -> str:
    variant = exp.floor["train"].get("variant")
    if not variant:
        return f"{exp.name} (the grammar's data)"
    return (f"{exp.name} ({variant['synonyms']} spelling(s) per word, output written {variant['output_copies']} "
            "time(s))")


def _status(evidence: Evidence, exp: Experiment, run: Run, ce: float, se: float) -> str:
    """The run's status as the loss-floor verdict counts it: its convergence status, or at its data's floor (rule 4
    of :mod:`assocmem.report.convergence`, against the floor of a model that memorised the training pool)."""
    status = evidence.status(run)
    if not math.isfinite(se) or status.margin is None:
        return status.status
    cap = convergence.floor_cap(ce, se, floors(exp)[1], Z)
    if convergence.reaches_the_floor(status.usable, status.status, status.remaining_fall, status.margin, cap):
        return convergence.at_the_floor_status(cap)
    return status.status


def plateau_table(evidence: Evidence, experiments: list[Experiment],
                  level: Any) -> tuple[dict[str, Any], dict[str, Any], str]:
    """(table, numbers, one sentence) over the full-data trained runs of ``experiments``; ``level(run)`` gives a
    run's held-out CE and its SE (the loss-floor claim's)."""
    rows, numbers, parts = [], {}, []
    for exp in experiments:
        floor = float(exp.floor["train"]["floor_nats_per_token"])
        runs: list[Run] = [run for run in exp.trained_runs
                           if run.fraction == max(r.fraction for r in exp.trained_runs)]
        for run in runs:
            measured = level(run)
            ce, se = float(measured["test_ce"]), float(measured.get("test_ce_se", float("nan")))
            status = _status(evidence, exp, run, ce, se)
            key = f"{exp.name}:{run.label}"
            numbers.update({f"{key}.floor": floor, f"{key}.ce": ce, f"{key}.ce_se": se,
                            f"{key}.ce_minus_floor": ce - floor, f"{key}.ce_minus_one": ce - 1})
            rows.append([_dataset(exp), run.label, f"{floor:.4f}", f"{ce:.4f} ± {se:.4f}", f"{ce - floor:+.4f}",
                         f"{ce - 1:+.4f}", status])
            parts.append(f"{exp.name} {run.label}: CE − H = {ce - floor:+.4f} ± {Z * se:.4f}, CE − 1 = "
                         f"{ce - 1:+.4f} ± {Z * se:.4f} ({status})")
    table = {"title": "Where plateaus land: each full-data run's held-out CE against its own data's exact floor H "
                      "and against 1", "header": HEADER, "rows": rows}
    sentence = ("" if len(experiments) < 2 else
                " Data of other entropy (the table; description, the verdict rests on the first dataset): "
                + "; ".join(parts) + ".")
    return table, numbers, sentence
