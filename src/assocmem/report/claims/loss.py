"""Loss and scaling: the N = O(D^2) argument of Sec. 5, the loss floor near 1, and over-fitting on small subsets."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from assocmem import scaling as sweep_analysis
from assocmem.errors import AssocmemError
from assocmem.report.claims.base import check_row, require_columns
from assocmem.theory import params as pr
from assocmem.theory import radius as ra

# ---------------------------------------------------------------- data claims

def _ols_slope(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Least-squares slope of y on x and its standard error (n - 2 degrees of freedom)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    centred = x - x.mean()
    sxx = float(centred @ centred)
    slope = float(centred @ (y - y.mean()) / sxx)
    residual = y - y.mean() - slope * centred
    se = float(np.sqrt(residual @ residual / (len(x) - 2) / sxx)) if len(x) > 2 else float("nan")
    return slope, se


def _usable(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Rows whose run may carry a claim (column 'usable', default all) and labels of the excluded ones."""
    if "usable" not in frame.columns:
        return frame, []
    keep = frame["usable"].astype(bool).to_numpy()
    label = "run" if "run" in frame.columns else ("subset" if "subset" in frame.columns else "model")
    status = frame["status"] if "status" in frame.columns else pd.Series("not converged", index=frame.index)
    excluded = sorted({f"{name} ({state})" for name, state, usable in zip(frame[label], status, keep, strict=True)
                       if not usable})
    return frame[keep], excluded


def scaling(runs: pd.DataFrame) -> dict[str, Any]:
    """runs: model, n_params, n_train_tokens, best_val_loss (optional usable/status: runs marked not converged
    are dropped first). D* = argmin over D of best_val_loss per N.

    Verdict: fit log N = a + b log D* on groups whose D* is not at the edge of their D grid (>= 3 needed);
    reproduced iff |b - 2| <= 2 se and |b - 1| > 2 se, refuted iff |b - 2| > 2 se, else not-testable."""
    require_columns(runs, ["model", "n_params", "n_train_tokens", "best_val_loss"], "scaling runs")
    runs, excluded = _usable(runs)
    numbers: dict[str, Any] = {"runs_excluded_not_converged": len(excluded)}
    points = []
    for n_params, group in runs.groupby("n_params"):
        group = group.sort_values(["best_val_loss", "n_train_tokens"])
        d_star = float(group["n_train_tokens"].iloc[0])
        edge = d_star in (group["n_train_tokens"].min(), group["n_train_tokens"].max())
        key = f"N{n_params:.6g}"
        numbers.update({f"{key}.d_star": d_star, f"{key}.dstar_at_grid_edge": edge,
                        f"{key}.n_over_dstar_sq": pr.n_over_d_squared(n_params, d_star)})
        if not edge and group["n_train_tokens"].nunique() >= 3:
            points.append((float(n_params), d_star))
    paper = np.array([[row["n_params"], row["d_star"]] for row in pr.PAPER_TABLE3])
    numbers["arxiv_v2_table3_loglog_slope"] = np.polyfit(np.log(paper[:, 1]), np.log(paper[:, 0]), 1)[0]
    numbers["usable_groups"] = len(points)
    numbers["printed_argument_log_d_for_unit_Z_n1024"] = ra.printed_log_patterns_for_unit_partition(1024)
    numbers["correct_argument_log_d_for_unit_Z_n1024"] = ra.log_patterns_for_unit_partition(1024)
    verdict, evidence = "not-testable", "Fewer than 3 model sizes with an interior D*."
    if len(points) >= 3 and len({p[1] for p in points}) >= 2:
        slope, se = _ols_slope(np.log([p[1] for p in points]), np.log([p[0] for p in points]))
        ratios = [pr.n_over_d_squared(n, d) for n, d in points]
        numbers.update({"loglog_slope": slope, "loglog_slope_se": se,
                        "ratio_cv": float(np.std(ratios) / np.mean(ratios))})
        if np.isfinite(se) and abs(slope - 2) <= 2 * se and abs(slope - 1) > 2 * se:
            verdict = "reproduced"
        elif np.isfinite(se) and abs(slope - 2) > 2 * se:
            verdict = "refuted"
        evidence = (f"log N vs log D* slope {slope:.3f} (se {se:.3f}); N = O(D^2) predicts 2, Chinchilla-style "
                    "compute optimality predicts 1. (arXiv v2, not the supplied text, adds a Table 3 whose three "
                    f"points give slope {numbers['arxiv_v2_table3_loglog_slope']:.3f}.)")
    if excluded:
        evidence += " Runs not used (not converged): " + ", ".join(excluded) + "."
    evidence += (" Derivation: the Sec. 5 argument follows from Z_t ~ d V_n(r*) ~ d / sqrt(n pi) = 1 (n ~ d^2/pi); "
                 "with the correct integral Z_t = d I_n(r*) ~ 1.13 d e^{-n/(2 pi e)} / sqrt(n pi), so "
                 "Z_t = 1 needs log d ~ n/(2 pi e) + log(n pi)/2 (63.9 at n = 1024), i.e. n = Theta(log d): "
                 "the same argument gives N = O(log D), not N = O(D^2).")
    return check_row(
        "scaling", "Sec. 5: for Z_t to reach Z_t = 1, we need N = O(D^2); Sec. 6.2: the model size is about the "
        "order O(D^2) when trained on 90M tokens.",
        "Per model size, D* = data size with the lowest best validation loss among converged runs; log-log fit of "
        "N against D*.",
        numbers, verdict, evidence, "data",
        ours_tex=(r"The argument needs $Z_t\approx d\,V_n(r^*)$; with the correct integral $Z_t=d\,\pi^{n/2}"
                  r"P(n/2,r^{*2})\approx 1.13\,d\,e^{-n/(2\pi e)}/\sqrt{n\pi}$, so $Z_t=1$ needs "
                  r"$n=\Theta(\log d)$, i.e. $N=O(\log D)$, not $N=O(D^2)$. Empirically: slope of $\log N$ on "
                  r"$\log D^*$ (numbers)."),
        limits=("Needs at least three model sizes whose best data size lies inside a data grid of three or more "
                "sizes, all converged; the default config trains two sizes on two subsets, so the row is "
                f"usually not testable. The scaling sweep tests it: {SWEEP_COMMAND} (about 45 min on 2 CPU "
                "cores). No sweep is part of the default run: the default's own models already take about 9 of "
                "its 10 minutes on 2 cores, and a 3 x 3 grid (S1/S3/S5 of config/scaling.yaml on its 1%/10%/100% "
                "subsets, one seed) took 1,121 CPU-seconds there, about 9 more minutes. The fit assumes the loss "
                "minimum over D is well resolved by the grid."))


SWEEP_COMMAND = "`snakemake --cores all --configfile config/scaling.yaml`"
_DERIVATION = (" Derivation: the Sec. 5 argument follows from Z_t ~ d V_n(r*) ~ d / sqrt(n pi) = 1 (n ~ d^2/pi); "
               "with the correct integral Z_t = d I_n(r*) ~ 1.13 d e^{-n/(2 pi e)} / sqrt(n pi), so Z_t = 1 needs "
               "log d ~ n/(2 pi e) + log(n pi)/2 (63.9 at n = 1024), i.e. n = Theta(log d): the same argument "
               "gives N = O(log D), not N = O(D^2).")


def boundary_verdict(low: float, high: float, paper: float = 2.0, alternative: float = 1.0) -> tuple[str, str]:
    """The rule for the sweep's boundary exponent b, from its confidence interval [low, high]: refuted iff the
    interval excludes the paper's 2; reproduced iff it contains 2 and excludes the alternative 1 (N growing like
    D, as compute-optimal scaling has it); otherwise the sweep cannot tell them apart."""
    if not (np.isfinite(low) and np.isfinite(high)):
        return "not-testable", "the boundary slope has no finite interval (fewer than two data sizes resolved)"
    if high < paper or low > paper:
        side = "below" if high < paper else "above"
        return "refuted", f"its whole confidence interval [{low:.2f}, {high:.2f}] lies {side} the paper's {paper:g}"
    if not low <= alternative <= high:
        return "reproduced", (f"its confidence interval [{low:.2f}, {high:.2f}] contains {paper:g} and excludes "
                              f"{alternative:g}")
    return "not-testable", (f"its confidence interval [{low:.2f}, {high:.2f}] contains both {paper:g} and "
                            f"{alternative:g}: more or larger cells are needed to tell them apart")


def _budget_robust(verdict: str, reason: str, analysis: dict[str, Any]) -> tuple[str, str]:
    """The boundary verdict stands only if it is the same at both ends of the range the budget-limited cells
    leave the slope (scaling.analyse's bracket): a verdict that one more training budget could flip rests on
    runs that had not converged."""
    if not analysis["budget_limited_cells"]:
        return verdict, reason
    ends = {side: boundary_verdict(*analysis["boundary_slope_bracket_ci"][side])[0] for side in ("low", "high")}
    bracket = analysis["boundary_slope_bracket"]
    span = f"[{bracket['low']:.2f}, {bracket['high']:.2f}]"
    if set(ends.values()) == {verdict}:
        return verdict, (f"{reason}; the same holds at both ends of the range {span} the "
                         f"{len(analysis['budget_limited_cells'])} budget-limited cell(s) leave b")
    return "not-testable", (f"{reason}, but the {len(analysis['budget_limited_cells'])} cell(s) that reached their "
                            f"step budget leave b anywhere in {span}, where the verdict would be "
                            f"{ends['low']} / {ends['high']}: longer training of those cells would decide")


def scaling_sweep(analysis: dict[str, Any], floor: float | None) -> dict[str, Any]:
    """The N = O(D^2) claim decided by a scaling sweep (:func:`assocmem.scaling.analyse` plus the report's
    bookkeeping: n_cells, spans, sensitivity, noise)."""
    low, high = analysis["boundary_slope_ci"]
    slope = analysis["boundary"]["slope"]
    points = pd.DataFrame(analysis["boundary_points"])
    censored = int(points["at_grid_edge"].sum())
    verdict, reason = boundary_verdict(low, high)
    verdict, reason = _budget_robust(verdict, reason, analysis)
    if 2 * censored > len(points):  # the slope is then only a lower bound of the grid's own making
        verdict = "not-testable"
        reason = (f"at {censored} of {len(points)} data sizes even the largest model is still gaining, so the "
                  "boundary lies beyond the grid: add larger models")
    numbers: dict[str, Any] = {
        "boundary_slope": slope, "boundary_slope_ci_low": low, "boundary_slope_ci_high": high,
        "paper_slope": 2.0, "tolerance_nats_min": sweep_analysis.value_range(analysis["tolerance"])[0],
        "tolerance_nats_max": sweep_analysis.value_range(analysis["tolerance"])[1],
        "noise_nats_min": sweep_analysis.value_range(analysis["noise"])[0],
        "noise_nats_max": sweep_analysis.value_range(analysis["noise"])[1],
        "slope_at_half_tolerance": analysis["sensitivity"]["x0.5"],
        "slope_at_twice_tolerance": analysis["sensitivity"]["x2"], "cells": analysis["n_cells"],
        "runs": analysis["n_runs"], "n_params_span": analysis["n_params_span"],
        "n_tokens_span": analysis["n_tokens_span"], "boundary_points_at_largest_N": censored,
        "E": analysis["parametric"]["E"], "E_ci_low": analysis["E_ci"][0], "E_ci_high": analysis["E_ci"][1],
        "max_rise_over_N": max(row["rise"] for row in analysis["inverted_u"]),
        "max_rise_ci_low": analysis["max_rise_ci"][0], "max_rise_ci_high": analysis["max_rise_ci"][1],
        "exact_floor": floor if floor is not None else np.nan,
        "budget_limited_cells": len(analysis["budget_limited_cells"]),
        "runs_stopped_early": analysis["converged_runs"],
        "boundary_slope_low_end": analysis["boundary_slope_bracket"]["low"],
        "boundary_slope_high_end": analysis["boundary_slope_bracket"]["high"],
    }
    if analysis["parametric_converged"] is not None:
        numbers.update({"E_converged_runs": analysis["parametric_converged"]["E"],
                        "E_converged_ci_low": analysis["E_converged_ci"][0],
                        "E_converged_ci_high": analysis["E_converged_ci"][1]})
    for row in analysis["boundary_points"]:
        numbers[f"D{row['n_tokens']:.6g}.n_boundary"] = row["n_boundary"]
        numbers[f"D{row['n_tokens']:.6g}.tolerance_nats"] = row["tolerance"]
        numbers[f"D{row['n_tokens']:.6g}.n_over_d_squared"] = pr.n_over_d_squared(row["n_boundary"], row["n_tokens"])
    rising = [row for row in analysis["inverted_u"] if row["rises"]]
    evidence = (f"Boundary exponent b = {slope:.3f} from {len(points)} data sizes: {reason}. Tolerance "
                f"{sweep_analysis.describe(analysis['tolerance'])} nats; with half or twice it b = "
                f"{analysis['sensitivity']['x0.5']:.3f} / "
                f"{analysis['sensitivity']['x2']:.3f}.")
    if censored:
        evidence += (f" At {censored} data size(s) the boundary is the largest model of the grid, so the true "
                     "boundary may lie beyond it and the slope is then a lower bound.")
    evidence += (f" Inverted U: at {len(rising)} of {len(analysis['inverted_u'])} data sizes the largest model is "
                 "worse than the best by more than the noise at that D "
                 f"({sweep_analysis.describe(analysis['noise'])} nats).")
    return check_row(
        "scaling", "Sec. 5: for Z_t to reach Z_t = 1, we need N = O(D^2); Sec. 6.2: the model size is about the "
        "order O(D^2) when trained on 90M tokens.",
        f"A sweep of {analysis['n_cells']} cells ({analysis['n_params_span']:.0f}x in N, "
        f"{analysis['n_tokens_span']:.0f}x in D), each trained until its validation CE stopped improving: per D the "
        "smallest N within the tolerance of the best at that D, and the slope of log N on log D with a bootstrap "
        "interval (assocmem.scaling).",
        numbers, verdict, evidence + _DERIVATION, "data",
        ours_tex=(r"Measured: $\log N_b = a + b\log D$ with $b = " + f"{slope:.2f}" + r"$, 95\% CI $[" + f"{low:.2f}"
                  + ", " + f"{high:.2f}" + r"]$ (the paper: $b=2$). Derived: with the correct ball integral the "
                  r"Sec. 5 argument gives $n=\Theta(\log d)$, i.e. $N=O(\log D)$."),
        limits=("A small-model sweep on one synthetic dataset with a known entropy floor: the boundary depends on "
                "the tolerance (see the sensitivity numbers) and on the grid's resolution in N; boundary points at "
                "the largest model are censored. More seeds narrow the intervals; a GPU sweep at GPT-2 sizes on "
                "OpenWebText subsets (config/paper.yaml) would test the claim where the paper makes it."))


# The claim is that the loss levels off near 1; an estimate of the irreducible loss that cannot tell 0.95 from
# 1.05 (half-width above 5% of 1) cannot speak to it, so a wider sweep interval is shown but does not decide.
SWEEP_E_MAX_HALF_WIDTH = 0.05


def _floor_verdict(estimates: list[tuple[str, float, float, float]], floor: float,
                   floor_low: float) -> tuple[str, str]:
    """Apply the loss_floor rule to (label, estimate, CI low, CI high) tuples; see loss_floor."""
    below_one = [e for e in estimates if e[3] < 1.0]
    on_floor = [e for e in estimates if e[2] <= floor and e[3] >= floor_low]
    fmt = "; ".join(f"{label} {value:.4f} [{lo:.4f}, {hi:.4f}]" for label, value, lo, hi in estimates)
    if below_one:
        return "refuted", (f"Converged CE below 1 with 95% confidence: {', '.join(e[0] for e in below_one)} "
                           f"({fmt}); the data's exact entropy floor is {floor:.4f}.")
    if floor >= 1.0:
        return "not-testable", (f"The data's own entropy floor {floor:.4f} is >= 1, so any plateau >= 1 is "
                                f"forced by the data and cannot test a bound at 1 ({fmt}).")
    if on_floor:
        return "corrected", (f"The converged CE sits on the data's entropy floor: {', '.join(e[0] for e in on_floor)}"
                             f" is consistent with the floor [{floor_low:.4f}, {floor:.4f}] < 1 ({fmt}). The "
                             "plateau near 1 is the entropy of this dataset, not a model-independent bound.")
    if all(lo <= 1.0 <= hi for _, _, lo, hi in estimates):
        return "reproduced", (f"Every converged estimate is above the floor {floor:.4f} and consistent with 1 "
                              f"({fmt}): the runs stop near 1 although the data allows less.")
    return "not-testable", (f"The converged CE is above both the floor {floor:.4f} and 1 ({fmt}): a plateau above "
                            "the floor measures the model's capacity or training budget, which neither supports "
                            "nor refutes a bound at 1.")


def loss_floor(final_ce: pd.DataFrame, floor: float, floor_low: float | None = None,
               sweep_E: tuple[float, float, float] | None = None, z: float = 1.96) -> dict[str, Any]:
    """final_ce: run, train_ce, test_ce, test_ce_se (nats/token), optional fraction, usable, status.
    floor: exact entropy floor of the data (nats/token); floor_low: the floor for a model that has memorised the
    training pool (default: floor); sweep_E: (estimate, CI low, CI high) of the irreducible loss from a scaling
    sweep, an independent second estimate.

    Decided on the held-out CE of the converged runs on the full training set (the largest fraction; runs
    marked not converged are excluded) with CIs test_ce +- z * test_ce_se, plus sweep_E when given:
    refuted iff some CI lies below 1; else not-testable iff floor >= 1; else corrected iff some CI meets
    [floor_low, floor] (the plateau is the entropy of the data, below 1); else reproduced iff every CI contains
    1 (the runs stop near 1 above the floor); else not-testable (above both: a capacity limit). A run exactly on
    a floor below 1 is therefore never 'reproduced'."""
    require_columns(final_ce, ["run", "train_ce", "test_ce", "test_ce_se"], "final_ce")
    floor_low = floor if floor_low is None else min(floor_low, floor)
    frame = final_ce.copy()
    if "fraction" in frame.columns:
        frame = frame[frame["fraction"] == frame["fraction"].max()]
    usable, excluded = _usable(frame)
    numbers: dict[str, Any] = {"floor": floor, "floor_low": floor_low, "z": z, "converged_full_runs": len(usable)}
    estimates = []
    for _, row in final_ce.iterrows():
        key = str(row["run"])
        numbers.update({f"{key}.train_ce": row["train_ce"], f"{key}.test_ce": row["test_ce"],
                        f"{key}.test_ce_se": row["test_ce_se"], f"{key}.test_minus_floor": row["test_ce"] - floor,
                        f"{key}.train_minus_floor": row["train_ce"] - floor,
                        f"{key}.usable": bool(row.get("usable", True))})
    for _, row in usable.iterrows():
        if not np.isfinite(float(row["test_ce_se"] if row["test_ce_se"] is not None else np.nan)):
            raise AssocmemError(f"final_ce: run {row['run']} is marked usable but its test_ce_se is missing")
        half = z * float(row["test_ce_se"])
        estimates.append((str(row["run"]), float(row["test_ce"]), row["test_ce"] - half, row["test_ce"] + half))
    if sweep_E is not None:
        value, low, high = (float(v) for v in sweep_E)
        if not low <= value <= high:
            raise AssocmemError(f"sweep_E: expected (estimate, CI low, CI high) with low <= estimate <= high, "
                                f"got {sweep_E}")
        numbers.update({"sweep_E": value, "sweep_E_lo": low, "sweep_E_hi": high,
                        "sweep_E_max_half_width": SWEEP_E_MAX_HALF_WIDTH})
        if (high - low) / 2 <= SWEEP_E_MAX_HALF_WIDTH:
            estimates.append(("scaling-sweep E", value, low, high))
        else:
            excluded.append(f"scaling-sweep E {value:.3f} [{low:.3f}, {high:.3f}] (interval half-width "
                            f"{(high - low) / 2:.3f} > {SWEEP_E_MAX_HALF_WIDTH} nats: too wide to speak to a bound "
                            "at 1)")
    if estimates:
        verdict, evidence = _floor_verdict(estimates, floor, floor_low)
    else:
        verdict, evidence = "not-testable", "No converged run on the full training set and no sweep estimate."
    if excluded:
        evidence += " Not used (a claim never rests on them): " + ", ".join(excluded) + "."
    evidence += (" Held-out CE is compared with the floor because the floor bounds the expected CE on fresh "
                 "samples; a training CE below the floor means memorisation of a finite sample.")
    return check_row(
        "loss_floor",
        "Abstract: the minimum achievable cross-entropy loss is bounded from below by a constant approximately "
        "equal to 1; Sec. 6.3 / Fig. 4: the (Question-Formation) training losses stabilize at about 1, as "
        "predicted in Proposition 4.",
        "Final held-out CE (with its standard error on the fixed evaluation batches) of each converged run on "
        "the full training set against 1 and against the exact entropy floor of the data; a scaling-sweep "
        "estimate of the irreducible loss when supplied.",
        numbers, verdict, evidence, "data",
        ours_tex=(r"The lowest achievable expected CE is the entropy rate of the data, $H=" f"{floor:.4f}" r"$ "
                  r"nats/token here (the paper's own Remark 2: the minimal cross-entropy equals the entropy of the "
                  r"samples); a plateau near 1 on Question-Formation is that entropy, not the bound "
                  r"$\log Z_t+1/Z_t\ge 1$ of Proposition 4 (refuted separately)."),
        limits=("Only converged runs on the full training set count; with the CPU-sized default config they may be "
                "few or none. The standard error covers the finite evaluation set, not the training seed. The "
                "floor is exact for our generator's distribution, not necessarily for McCoy's files (see the data "
                "section), and is within the memorisation allowance floor_low..floor. Because this dataset's "
                "entropy happens to be close to 1, the level alone separates 'entropy' from 'bound at 1' only by "
                "|1 - floor|; data with an entropy far from 1 (the gen split, natural text), a scaling-sweep "
                "estimate of the irreducible loss (sweep_E), or GPU-scale training to the floor would separate "
                "them more sharply."))


def overfit(metrics: pd.DataFrame, floor: float, min_rise: float = 0.05) -> dict[str, Any]:
    """metrics: subset, step, train_ce, test_ce (optional usable/status per row: runs marked not converged are
    dropped). Reproduced iff some subset's test CE ends >= min_rise nats above its minimum while its train CE kept
    falling after that minimum; refuted iff no converged subset does; not-testable iff none has two evaluations."""
    require_columns(metrics, ["subset", "step", "train_ce", "test_ce"], "overfit metrics")
    metrics, excluded = _usable(metrics)
    numbers: dict[str, Any] = {"floor": floor, "min_rise": min_rise}
    shown, testable = [], False
    for subset, group in metrics.sort_values("step").groupby("subset"):
        if len(group) < 2:
            continue
        testable = True
        best = group["test_ce"].idxmin()
        rise = group["test_ce"].iloc[-1] - group.loc[best, "test_ce"]
        train_drop = group.loc[best, "train_ce"] - group["train_ce"].iloc[-1]
        numbers.update({f"{subset}.min_test_ce": group.loc[best, "test_ce"],
                        f"{subset}.step_at_min": group.loc[best, "step"],
                        f"{subset}.final_test_ce": group["test_ce"].iloc[-1], f"{subset}.test_rise": rise,
                        f"{subset}.final_train_ce": group["train_ce"].iloc[-1],
                        f"{subset}.final_train_minus_floor": group["train_ce"].iloc[-1] - floor,
                        f"{subset}.train_drop_after_min": train_drop})
        if rise >= min_rise and train_drop > 0:
            shown.append(str(subset))
    verdict = "not-testable" if not testable else ("reproduced" if shown else "refuted")
    evidence = (f"Subsets with test CE rising >= {min_rise} nats after its minimum while train CE keeps falling: "
                f"{shown or 'none'}. final_train_minus_floor < 0 means the training CE is below the data's Bayes "
                "floor, i.e. memorisation of the training sample." if testable
                else "No converged subset with two or more evaluations.")
    if excluded:
        evidence += (" Not used (still improving, so they cannot show the rise yet): " + ", ".join(excluded) + ".")
    return check_row(
        "overfit",
        "Sec. 6.2: the training with 0.1% (9M) of the data clearly experiences over-fitting, and the training loss "
        "vanishes over iterations; Sec. 7: performance can be compromised by both early and delayed stopping.",
        "Per converged data subset: minimum and final test CE, the rise after the minimum, train CE vs the "
        "entropy floor.",
        numbers, verdict, evidence, "data",
        ours_tex=(r"Small subsets over-fit: held-out CE rises after its minimum while the training CE keeps falling, "
                  r"below the entropy floor (memorisation). This is ordinary over-fitting; it needs no "
                  r"associative-memory argument."),
        limits=(f"The rise threshold ({min_rise} nats) is fixed in advance, not scaled to the evaluation noise; "
                "one seed per run; the smallest subsets of the shipped configs are a few hundred to a few thousand "
                "sequences. A verdict of 'refuted' could change with longer training of the small subsets; "
                "GPU-scale runs on OpenWebText subsets would test the paper's own 0.1% setting."))
