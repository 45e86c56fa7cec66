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
are the resolution: the largest slow-down (or speed-up) to storage the design leaves open. Beside it: the per-D
boundaries and the overhead fit's b of the grid with the near cells in each precision (``budget_check.compare``),
the recall difference of pairs that both ran out of budget, and ``--reference``: the same comparison of today's fp32
runs against the grid's record (runs of other code on another host: a change of rounding alone, for scale).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml
from scipy import stats

from assocmem.errors import AssocmemError
from assocmem.io import write_json
from assocmem.memorisation import budget_check as bc

PRECISIONS = ("fp32", "bf16")
PAIR_KEYS = ["n_params", "n_facts", "seed"]
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


def pair_runs(first: pd.DataFrame, second: pd.DataFrame) -> pd.DataFrame:
    """The runs of ``second`` beside their twins in ``first`` (same N, D and seed); columns suffixed _a and _b."""
    pairs = first.merge(second, on=PAIR_KEYS, suffixes=("_a", "_b"))
    if pairs.empty:
        raise AssocmemError("precision check: no run of the second grid has a twin (same N, D and seed) in the first")
    return pairs


def paired(first: pd.DataFrame, second: pd.DataFrame) -> dict[str, Any]:
    """Outcomes, steps and recalls of each run against its twin, and the rule's decision."""
    pairs = pair_runs(first, second)
    only_a = int((pairs["stored_a"] & ~pairs["stored_b"]).sum())
    only_b = int((~pairs["stored_a"] & pairs["stored_b"]).sum())
    sign_p = float(stats.binomtest(only_a, only_a + only_b, 0.5).pvalue) if only_a + only_b else 1.0
    both_stopped = pairs[(pairs["stop_rule_a"] == "recall") & (pairs["stop_rule_b"] == "recall")]
    log_ratio = np.log(both_stopped["steps_b"].to_numpy(float) / both_stopped["steps_a"].to_numpy(float))
    steps = _interval(log_ratio)
    budget = pairs[(pairs["stop_rule_a"] == "budget") & (pairs["stop_rule_b"] == "budget")]
    recall = _interval(budget["recall_b"].to_numpy(float) - budget["recall_a"].to_numpy(float))
    steps_differ = bool(steps["n"] >= 2 and not steps["low"] <= 0.0 <= steps["high"])
    return {"pairs": len(pairs), "stored_both": int((pairs["stored_a"] & pairs["stored_b"]).sum()),
            "stored_neither": int((~pairs["stored_a"] & ~pairs["stored_b"]).sum()),
            "stored_first_only": only_a, "stored_second_only": only_b, "sign_test_p": sign_p,
            "log_step_ratio": steps, "step_ratio": {k: float(np.exp(steps[k])) for k in ("mean", "low", "high")},
            "step_ratio_median": float(np.exp(np.median(log_ratio))) if len(log_ratio) else float("nan"),
            "recall_difference_budget_limited": recall,
            "differs": bool(sign_p < 1 - LEVEL or steps_differ)}


RULE = ("bf16 stores differently iff the exact two-sided sign test on the pairs stored in one precision only "
        "rejects at 5%, or the 95% t interval of the mean log step ratio (bf16 / fp32, pairs that both stopped on "
        "recall) excludes 0 (stated in assocmem.memorisation.precision_check before the runs)")


def compare(reference: pd.DataFrame, fp32: pd.DataFrame, bf16: pd.DataFrame, *, intervals: bool = True
            ) -> dict[str, Any]:
    """bf16 against fp32 run by run (the rule's decision), the grid's boundary with the near cells in each precision,
    and today's fp32 runs against the ``reference`` grid's (a change of code, host and rounding only)."""
    with_fp32, _ = bc.replace_cells(reference, fp32)
    return {"paired": paired(fp32, bf16), "rule": RULE,
            "boundary": bc.compare(with_fp32, bf16, intervals=intervals, labels=PRECISIONS),
            "fp32_against_reference": paired(reference, fp32)}


def summary_line(result: dict[str, Any]) -> str:
    p, b = result["paired"], result["boundary"]["b"]
    ratio = p["step_ratio"]
    return (f"bf16 {'stores differently' if p['differs'] else 'stores as fp32 does'} by the rule: {p['pairs']} pairs, "
            f"stored in fp32 only {p['stored_first_only']}, in bf16 only {p['stored_second_only']} (sign test p "
            f"{p['sign_test_p']:.2f}); steps bf16/fp32 {ratio['mean']:.3f} [{ratio['low']:.3f}, {ratio['high']:.3f}] "
            f"over {p['log_step_ratio']['n']} pairs; overhead b "
            + ", ".join(f"{k} {v['b']:.2f} [{v['low']:.2f}, {v['high']:.2f}]" for k, v in b.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("config", help="write the config of the cells near the boundary in one precision")
    p.add_argument("record", type=Path)
    p.add_argument("--config", type=Path, required=True)
    p.add_argument("--precision", choices=PRECISIONS, required=True)
    p.add_argument("--out", type=Path, required=True)
    p = sub.add_parser("compare", help="compare the bf16 runs with their fp32 twins")
    p.add_argument("fp32", type=Path)
    p.add_argument("bf16", type=Path)
    p.add_argument("--reference", type=Path, required=True, help="the whole grid's record (its other cells)")
    p.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.command == "config":
        cells = bc.near_boundary(bc.read_runs(args.record)[0])
        config = precision_config(yaml.safe_load(args.config.read_text()), cells, args.precision)
        args.out.write_text(yaml.safe_dump(config, sort_keys=False))
        print(f"{len(cells)} cells within one N step of the boundary, {args.precision} -> {args.out}")
        return 0
    result = compare(*(bc.read_runs(path)[0] for path in (args.reference, args.fp32, args.bf16)))
    if args.out:
        write_json(args.out, {"schema": "assocmem-precision-check-v1", "reference": str(args.reference),
                              "fp32": str(args.fp32), "bf16": str(args.bf16), **result})
    print(summary_line(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
