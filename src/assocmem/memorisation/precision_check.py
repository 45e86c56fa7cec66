"""Does bf16 store as many facts a parameter as fp32? (issue 41: the decisive column cannot run in ten minutes in
fp32 on one H200, ``decisive_floor``; in bf16 it might, but its power was simulated from fp32 runs.)

The cells of a memorisation grid within one N step of its storage boundary (``budget_check.near_boundary``) are
trained twice at the grid's own budget, once in fp32 and once in bf16 autocast, with the same seeds: a run and its
twin start from the same weights and see the same batches, so they differ only by the precision of the products.

    python -m assocmem.memorisation.precision_check config docs/results/memorisation.json \\
        --config config/memorisation.yaml --precision fp32 --out config/memorisation_fp32.yaml
    (the same with --precision bf16 --out config/memorisation_bf16.yaml)
    snakemake --cores all --configfile config/memorisation_<precision>.yaml   # each, then record it (record-results)
    python -m assocmem.memorisation.precision_check compare docs/results/memorisation_fp32.json \\
        docs/results/memorisation_bf16.json --reference docs/results/memorisation.json

The rule, stated before the runs: **bf16 stores differently** iff the exact two-sided sign test on the pairs whose
outcomes differ (stored in one precision only) rejects at 5%, or the 95% t interval of the mean log ratio of steps
(bf16 / fp32) over the pairs that both stopped on reaching ``train.stop_at_recall`` excludes 0. The interval's ends
are the resolution: the largest slow-down (or speed-up) to storage the design leaves open; beside them, the ratio
the interval detects with 80% power and whether the sign test can reject at all with the discordant pairs there are.
Also: the recall difference of pairs that both ran out of budget, a sensitivity table (the median ratio, other
recall thresholds, without the smallest D or N), and with ``--reference`` (the grid whose cells the runs re-run) the
per-D boundaries and the overhead fit's b of that grid with the cells in each precision (``budget_check.compare``)
and the same run-by-run comparison of today's fp32 runs against the grid's own (a change of code, host and rounding
only, for scale). Without it, ``compare`` pairs any two records of the same design, e.g. the two runs of
config/memorisation_precision_2k.yaml (2,048 facts, one precision each by ``--set``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml
from scipy import stats

from assocmem.errors import AssocmemError
from assocmem.io import write_json
from assocmem.memorisation import budget_check as bc
from assocmem.memorisation.cells import stored_at

PRECISIONS = ("fp32", "bf16")
PAIR_KEYS = ["n_params", "n_facts", "seed"]
REPLICATION = "replication"  # which pair of records a run comes from (0: the first)
LEVEL = 0.95


def precision_config(config: dict[str, Any], cells: pd.DataFrame, precision: str) -> dict[str, Any]:
    """``config`` restricted to the cells' models and fractions, trained in ``precision`` at its own budget."""
    if precision not in PRECISIONS:
        raise AssocmemError(f"precision check: precision '{precision}' is not one of {', '.join(PRECISIONS)}")

    def set_precision(train: dict[str, Any]) -> None:
        train["precision"] = precision

    return bc.variant_config(config, cells, f"_{precision}", set_precision, check="precision check")


def _interval(values: np.ndarray) -> dict[str, float]:
    """Mean and the two-sided t interval at ``LEVEL`` (nan ends below two values)."""
    n, mean = len(values), float(np.mean(values)) if len(values) else float("nan")
    if n < 2:
        return {"n": n, "mean": mean, "low": float("nan"), "high": float("nan")}
    half = float(stats.t.ppf(0.5 + LEVEL / 2, n - 1) * np.std(values, ddof=1) / np.sqrt(n))
    return {"n": n, "mean": mean, "low": mean - half, "high": mean + half}


def detectable_ratio(log_ratio: np.ndarray, power: float = 0.8) -> float:
    """The step ratio (> 1) that the t interval excludes 1 for with probability ``power`` at these pairs' number and
    spread (nan below two pairs): the design's resolution, from its own runs."""
    n = len(log_ratio)
    if n < 2:
        return float("nan")
    shift = stats.t.ppf(0.5 + LEVEL / 2, n - 1) + stats.t.ppf(power, n - 1)
    return float(np.exp(shift * np.std(log_ratio, ddof=1) / np.sqrt(n)))


def pair_runs(first: pd.DataFrame, second: pd.DataFrame) -> pd.DataFrame:
    """The runs of ``second`` beside their twins in ``first`` (same N, D and seed, and the same replication where
    both have one: records of the design under another global seed); columns suffixed _a and _b."""
    keys = PAIR_KEYS + [REPLICATION] * (REPLICATION in first and REPLICATION in second)
    pairs = first.merge(second, on=keys, suffixes=("_a", "_b"))
    if pairs.empty:
        raise AssocmemError("precision check: no run of the second grid has a twin (same N, D and seed) in the first")
    return pairs


def paired(first: pd.DataFrame, second: pd.DataFrame,
           estimate: Callable[[np.ndarray], dict[str, float]] | None = None) -> dict[str, Any]:
    """Outcomes, steps and recalls of each run against its twin, and the rule's decision; ``estimate``: the log step
    ratios' centre and interval (the mean's t interval unless given)."""
    pairs = pair_runs(first, second)
    only_a = int((pairs["stored_a"] & ~pairs["stored_b"]).sum())
    only_b = int((~pairs["stored_a"] & pairs["stored_b"]).sum())
    sign_p = float(stats.binomtest(only_a, only_a + only_b, 0.5).pvalue) if only_a + only_b else 1.0  # exact
    both_stopped = pairs[(pairs["stop_rule_a"] == "recall") & (pairs["stop_rule_b"] == "recall")]
    log_ratio = np.log(both_stopped["steps_b"].to_numpy(float) / both_stopped["steps_a"].to_numpy(float))
    steps = (estimate or _interval)(log_ratio)
    budget = pairs[(pairs["stop_rule_a"] == "budget") & (pairs["stop_rule_b"] == "budget")]
    recall = _interval(budget["recall_b"].to_numpy(float) - budget["recall_a"].to_numpy(float))
    steps_differ = bool(steps["n"] >= 2 and not steps["low"] <= 0.0 <= steps["high"])
    discordant = only_a + only_b
    return {"pairs": len(pairs), "stored_both": int((pairs["stored_a"] & pairs["stored_b"]).sum()),
            "stored_neither": int((~pairs["stored_a"] & ~pairs["stored_b"]).sum()),
            "stored_first_only": only_a, "stored_second_only": only_b, "sign_test_p": sign_p,
            "log_step_ratio": steps, "step_ratio": {k: float(np.exp(steps[k])) for k in ("mean", "low", "high")},
            "step_ratio_median": float(np.exp(np.median(log_ratio))) if len(log_ratio) else float("nan"),
            "detectable_step_ratio": detectable_ratio(log_ratio),
            "sign_test_can_reject": bool(discordant and 2 * 0.5**discordant < 1 - LEVEL),
            "recall_difference_budget_limited": recall,
            "differs": bool(sign_p < 1 - LEVEL or steps_differ)}


def _median_interval(values: np.ndarray) -> dict[str, float]:
    """The median and its distribution-free interval (order statistics, binomial at ``LEVEL``)."""
    x, n = np.sort(values), len(values)
    k = int(stats.binom.ppf((1 - LEVEL) / 2, n, 0.5)) if n else 0
    if k < 1:
        return {"n": n, "mean": float(np.median(x)) if n else float("nan"), "low": float("nan"), "high": float("nan")}
    return {"n": n, "mean": float(np.median(x)), "low": float(x[k - 1]), "high": float(x[n - k])}


def _sensitivity_row(choice: str, first: pd.DataFrame, second: pd.DataFrame, median: bool = False) -> dict[str, Any]:
    result = paired(first, second, _median_interval if median else None)
    ratio = {k: float(np.exp(result["log_step_ratio"][k])) for k in ("mean", "low", "high")}
    return {"choice": choice, "pairs": result["pairs"], "stored_fp32_only": result["stored_first_only"],
            "stored_bf16_only": result["stored_second_only"], "sign_test_p": result["sign_test_p"],
            "step_ratio": ratio["mean"], "low": ratio["low"], "high": ratio["high"],
            "step_pairs": result["log_step_ratio"]["n"]}


def sensitivity(fp32: pd.DataFrame, bf16: pd.DataFrame) -> list[dict[str, Any]]:
    """The comparison under other choices: the threshold for "stored", the estimator of the step ratio, and
    without the smallest number of facts (the fastest runs, whose steps the evaluation interval rounds most) or the
    smallest model (the nearest the boundary), where the grid has more than one."""
    rows = [_sensitivity_row("primary: stored at the grid's threshold, mean log ratio (t interval)", fp32, bf16),
            _sensitivity_row("median ratio (order-statistic interval)", fp32, bf16, median=True)]
    for threshold in (0.8, 0.95):
        rows.append(_sensitivity_row(f"stored at recall >= {threshold}", stored_at(fp32, threshold),
                                     stored_at(bf16, threshold)))
    for column, name in (("n_facts", "D"), ("n_params", "N")):
        smallest = fp32[column].min()
        if fp32[column].nunique() > 1:
            rows.append(_sensitivity_row(f"without {name} = {smallest}", fp32[fp32[column] > smallest],
                                         bf16[bf16[column] > smallest]))
    return rows


RULE = ("bf16 stores differently iff the exact two-sided sign test on the pairs stored in one precision only "
        "rejects at 5%, or the 95% t interval of the mean log step ratio (bf16 / fp32, pairs that both stopped on "
        "recall) excludes 0 (stated in assocmem.memorisation.precision_check before the runs)")


def _first(runs: pd.DataFrame) -> pd.DataFrame:
    return runs[runs[REPLICATION] == 0] if REPLICATION in runs else runs


def compare(fp32: pd.DataFrame, bf16: pd.DataFrame, reference: pd.DataFrame | None = None, *,
            intervals: bool = True) -> dict[str, Any]:
    """bf16 against fp32 run by run (the rule's decision, over every replication) and its sensitivity, and each
    replication's own comparison; with a ``reference`` grid whose cells the first replication re-runs, also that
    grid's boundary with those cells in each precision, and those fp32 runs against the reference's (a change of
    code, host and rounding only)."""
    result = {"paired": paired(fp32, bf16), "rule": RULE, "sensitivity": sensitivity(fp32, bf16)}
    if REPLICATION in fp32 and fp32[REPLICATION].nunique() > 1:
        result["by_replication"] = [paired(fp32[fp32[REPLICATION] == i], bf16[bf16[REPLICATION] == i])
                                    for i in sorted(fp32[REPLICATION].unique())]
    if reference is not None:
        with_fp32, _ = bc.replace_cells(reference, _first(fp32))
        result |= {"boundary": bc.compare(with_fp32, _first(bf16), intervals=intervals, labels=PRECISIONS),
                   "fp32_against_reference": paired(reference, _first(fp32).drop(columns=REPLICATION,
                                                                                  errors="ignore"))}
    return result


def read_twins(records: list[tuple[Path, Path]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The fp32 and bf16 runs of each pair of records, numbered as replications in the order given."""
    fp32, bf16 = [], []
    for i, (first, second) in enumerate(records):
        fp32.append(bc.read_runs(first)[0].assign(**{REPLICATION: i}))
        bf16.append(bc.read_runs(second)[0].assign(**{REPLICATION: i}))
    return pd.concat(fp32, ignore_index=True), pd.concat(bf16, ignore_index=True)


def summary_line(result: dict[str, Any]) -> str:
    p = result["paired"]
    b = result["boundary"]["b"] if "boundary" in result else {}
    ratio = p["step_ratio"]
    return (f"bf16 {'stores differently' if p['differs'] else 'stores as fp32 does'} by the rule: {p['pairs']} pairs, "
            f"stored in fp32 only {p['stored_first_only']}, in bf16 only {p['stored_second_only']} (sign test p "
            f"{p['sign_test_p']:.2f}); steps bf16/fp32 {ratio['mean']:.3f} [{ratio['low']:.3f}, {ratio['high']:.3f}] "
            f"over {p['log_step_ratio']['n']} pairs (detects {p['detectable_step_ratio']:.3f}x with 80% power); "
            f"the sign test {'can' if p['sign_test_can_reject'] else 'cannot'} reject"
            + "".join(f"; overhead b {k} {v['b']:.2f} [{v['low']:.2f}, {v['high']:.2f}]" for k, v in b.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = bc.config_parser(sub, "write the config of the cells near the boundary in one precision")
    p.add_argument("--precision", choices=PRECISIONS, required=True)
    p = sub.add_parser("compare", help="compare the bf16 runs with their fp32 twins")
    p.add_argument("fp32", type=Path)
    p.add_argument("bf16", type=Path)
    p.add_argument("--reference", type=Path, help="the whole grid's record whose cells the runs re-run (its boundary "
                                                  "in each precision; its runs against today's fp32)")
    p.add_argument("--replication", nargs=2, action="append", type=Path, default=[], metavar=("FP32", "BF16"),
                   help="another pair of records of the same design under another global seed (repeatable)")
    p.add_argument("--out", type=Path)
    p.add_argument("--commit", help="the commit of the code that made the two records (written into --out)")
    p.add_argument("--date", help="the date of the runs (written into --out)")
    args = parser.parse_args(argv)
    if args.command == "config":
        cells = bc.near_boundary(bc.read_runs(args.record)[0])
        config = precision_config(yaml.safe_load(args.config.read_text()), cells, args.precision)
        args.out.write_text(yaml.safe_dump(config, sort_keys=False))
        print(f"{len(cells)} cells within one N step of the boundary, {args.precision} -> {args.out}")
        return 0
    fp32, bf16 = read_twins([(args.fp32, args.bf16), *map(tuple, args.replication)])
    result = compare(fp32, bf16, bc.read_runs(args.reference)[0] if args.reference else None)
    if args.out:
        command = "python -m assocmem.memorisation.precision_check " + " ".join(map(str, argv or sys.argv[1:]))
        paths = {"reference": args.reference and str(args.reference), "fp32": str(args.fp32), "bf16": str(args.bf16),
                 "replications": [[str(a), str(b)] for a, b in args.replication]}
        write_json(args.out, {"schema": "assocmem-precision-check-v1", "command": command, "commit": args.commit,
                              "date": args.date, **paths, **result})
    print(summary_line(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
