"""The radius hypothesis of Sec. 5 / 6.1 as a statistical statement about nearest-neighbour distances.

What the paper predicts (quoted in report.quotes): the ball radius is "approximately sqrt(n/(2 pi e))"; in
Fig. 2 the mean and median NN distance of 80K last-layer activations are "approximately 20", about 2 r* = 15.49
(n = 1024), at 25, 50, 75 and 100% of the sample, so the distance is read as a property of the model's width n
(twice the radius of disjoint balls), not of the model, its data or the sample size.

The primary test, stated in advance: *is the nearest-neighbour distance a function of n alone, at about 2 r*?*
Per usable run (a trained run at its best checkpoint, or a pretrained one) the statistic is the mean, and the
median, of the rank-1 distances among distinct prefixes of the last layer with the final LayerNorm's gain divided
out (distinct prefixes without it where the gain is unknown), at the largest sample the run's radius search holds:
the paper's m = 80,000 whenever the sample has that many distinct prefixes, else the largest m it has (stated);
nothing is extrapolated. Its 95% percentile bootstrap interval resamples the queries. The tolerance is the one the
paper itself accepts: T = 20 / 15.49 = 1.29.

* **Level**: a run agrees iff the interval of statistic / 2r*(n) lies inside [1/T, T], disagrees iff it lies
  outside, else is undecided.
* **Function of n alone**: for the runs of one width n (depth, data and training length differ), the spread
  max / min of the statistic agrees iff its interval lies inside [1, T], disagrees iff it lies above T; and per
  run, across the nested samples (the paper's "25, 50, 75 and 100%" of the sample), the same for the spread of
  the statistic over the sample sizes.

Verdict: reproduced iff every level and every spread agrees, for the mean and for the median; refuted iff any
disagrees; not-testable otherwise (an interval straddles the tolerance) or without a usable run. Reported
beside it: the trend of the statistic over the nested samples (log-log slope with its interval), the all-chunks and
the with-gain distances, and 2 r* for n = T_max d_emb (the paper's definition in Sec. 3).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from assocmem.errors import AssocmemError
from assocmem.report import quotes, style
from assocmem.report.artifacts import Run
from assocmem.report.claims.base import check_row, require_columns
from assocmem.report.claims.registry import Claim, Untestable, register
from assocmem.report.evidence import Evidence
from assocmem.report.nn_statistics import CONFIDENCE, N_BOOT, nn_trend
from assocmem.report.quotes import PAPER_SAMPLE_SIZE
from assocmem.theory import radius as ra

PAPER_RATIO = 20.0 / (2.0 * ra.radius_star(1024))  # the paper's own "agreement": mean 20 vs 2r* = 15.49
STATISTICS = ("mean", "median")
QUERY_COLUMNS = ["run", "set", "fraction", "n_patterns", "query", "distance"]
RUN_COLUMNS = ["run", "n_dim", "t_max", "usable", "status"]
AGREES, DISAGREES, UNDECIDED = "agrees", "disagrees", "undecided"


def band_outcome(low: float, high: float, band: tuple[float, float]) -> str:
    """Whether an interval lies inside the tolerance band, outside it, or straddles an edge."""
    if band[0] <= low and high <= band[1]:
        return AGREES
    if high < band[0] or low > band[1]:
        return DISAGREES
    return UNDECIDED


def _percentiles(replicates: np.ndarray) -> tuple[float, float]:
    tail = 100 * (1 - CONFIDENCE) / 2
    low, high = np.percentile(replicates, [tail, 100 - tail])
    return float(low), float(high)


def primary_set(frame: pd.DataFrame) -> str:
    """The run's primary set: the gain-free distinct prefixes where the final LayerNorm is known."""
    return "gain_free" if (frame["set"] == "gain_free").any() else "distinct"


def _run_levels(run: str, frame: pd.DataFrame, n_dim: int, tolerance: float, n_boot: int,
                seed: int) -> tuple[dict[str, Any], dict[str, tuple[float, np.ndarray]], dict[str, str], list[str]]:
    """One usable run: numbers, each statistic at its largest sample with its bootstrap replicates, level outcomes
    and one line of evidence per statistic."""
    two_r = 2 * ra.radius_star(n_dim)
    group = frame[frame["set"] == primary_set(frame)]
    numbers: dict[str, Any] = {f"{run}.primary_set_is_gain_free": primary_set(frame) == "gain_free"}
    replicates, outcomes, lines = {}, {}, []
    for statistic in STATISTICS:
        trend = nn_trend(group, statistic, n_boot=n_boot, seed=seed)
        replicates[statistic] = (trend["level"], trend.pop("level_replicates"))
        ratio_lo, ratio_hi = trend["level_lo"] / two_r, trend["level_hi"] / two_r
        outcomes[statistic] = band_outcome(ratio_lo, ratio_hi, (1 / tolerance, tolerance))
        if "sample_spread" in trend:
            outcomes[f"{statistic}_over_m"] = band_outcome(trend["sample_spread_lo"], trend["sample_spread_hi"],
                                                           (1.0, tolerance))
        key = f"{run}.{statistic}"
        numbers.update({f"{key}.{name}": value for name, value in trend.items() if name not in ("intercept",)})
        numbers.update({f"{key}.ratio_to_2r_star": trend["level"] / two_r, f"{key}.ratio_to_2r_star_lo": ratio_lo,
                        f"{key}.ratio_to_2r_star_hi": ratio_hi})
        lines.append(f"{run}, {statistic} at $m={int(trend['largest'])}$: {trend['level']:.3g} "
                     f"[{trend['level_lo']:.3g}, {trend['level_hi']:.3g}] = {trend['level'] / two_r:.2f} "
                     f"[{ratio_lo:.2f}, {ratio_hi:.2f}] × $2r^*$ ({outcomes[statistic]}); over the nested samples "
                     f"max/min {trend.get('sample_spread', np.nan):.2f} [{trend.get('sample_spread_lo', np.nan):.2f}, "
                     f"{trend.get('sample_spread_hi', np.nan):.2f}] ({outcomes.get(f'{statistic}_over_m', UNDECIDED)}; "
                     f"log-log slope {trend['slope']:.3f} [{trend['slope_lo']:.3f}, {trend['slope_hi']:.3f}])")
    return numbers, replicates, outcomes, lines


def _spreads(by_width: dict[int, dict[str, dict[str, tuple[float, np.ndarray]]]],
             tolerance: float) -> tuple[dict[str, Any], list[str], list[str]]:
    """Per width with two or more runs: max / min of each statistic across its runs, with the interval from the
    runs' independent bootstrap replicates."""
    numbers: dict[str, Any] = {}
    outcomes, lines = [], []
    for n_dim, runs in sorted(by_width.items()):
        if len(runs) < 2:
            continue
        for statistic in STATISTICS:
            levels = np.array([values[statistic][0] for values in runs.values()])
            reps = np.stack([values[statistic][1] for values in runs.values()])  # (runs, replicates)
            spread = float(levels.max() / levels.min())
            low, high = _percentiles(reps.max(axis=0) / reps.min(axis=0))
            outcome = band_outcome(low, high, (1.0, tolerance))
            outcomes.append(outcome)
            numbers.update({f"n{n_dim}.{statistic}.spread": spread, f"n{n_dim}.{statistic}.spread_lo": low,
                            f"n{n_dim}.{statistic}.spread_hi": high})
            lines.append(f"$n={n_dim}$, {len(runs)} runs, {statistic}: max/min {spread:.2f} [{low:.2f}, "
                         f"{high:.2f}] ({outcome})")
    return numbers, outcomes, lines


def radius_verdict(outcomes: list[str]) -> str:
    if not outcomes:
        return "not-testable"
    if DISAGREES in outcomes:
        return "refuted"
    return "reproduced" if all(outcome == AGREES for outcome in outcomes) else "not-testable"


def radius(nn_queries: pd.DataFrame, runs: pd.DataFrame, layer_scale: pd.DataFrame | None = None,
           seed: int = 0, n_boot: int = N_BOOT, tolerance: float = PAPER_RATIO) -> dict[str, Any]:
    """nn_queries: run, set ('distinct' and 'gain_free' for the test; 'all' reported), fraction, n_patterns, query,
    distance (last layer). runs: run, n_dim, t_max, usable, status, plus optional rms_norm, gain_rms, zero_share,
    n_chunks, n_distinct. layer_scale (optional): run, layer, mean_nn, rms_norm (every layer). The rule is in the
    module docstring."""
    require_columns(nn_queries, QUERY_COLUMNS, "nn_queries")
    require_columns(runs, RUN_COLUMNS, "radius runs")
    if runs.empty:
        raise AssocmemError("radius runs: no rows")
    numbers: dict[str, Any] = {"paper_sample_size": PAPER_SAMPLE_SIZE, "tolerance": tolerance,
                               "confidence": CONFIDENCE, "bootstrap_replicates": n_boot}
    outcomes, lines, excluded = [], [], []
    by_width: dict[int, dict[str, dict[str, tuple[float, np.ndarray]]]] = {}
    for _, info in runs.iterrows():
        run, n_dim = str(info["run"]), int(info["n_dim"])
        numbers.update({f"{run}.usable": bool(info["usable"]), f"{run}.2r_star_emb": 2 * ra.radius_star(n_dim),
                        f"{run}.2r_star_seq": 2 * ra.radius_star(n_dim * int(info["t_max"]))})
        numbers.update({f"{run}.{k}": info[k] for k in ("rms_norm", "gain_free_rms_norm", "gain_rms", "zero_share",
                                                        "n_chunks", "n_distinct") if k in info and pd.notna(info[k])})
        frame = nn_queries[nn_queries["run"] == run]
        numbers.update(_reported_sets(run, frame, n_dim, n_boot, seed))
        if not info["usable"]:
            excluded.append(f"{run} ({info['status']})")
            continue
        run_numbers, replicates, run_outcomes, run_lines = _run_levels(run, frame, n_dim, tolerance, n_boot, seed)
        numbers.update(run_numbers)
        outcomes += list(run_outcomes.values())
        lines += run_lines
        by_width.setdefault(n_dim, {})[run] = replicates
    spread_numbers, spread_outcomes, spread_lines = _spreads(by_width, tolerance)
    numbers.update(spread_numbers)
    outcomes += spread_outcomes
    if layer_scale is not None and not layer_scale.empty:
        for _, row in layer_scale.iterrows():
            numbers[f"{row['run']}|{row['layer']}.mean_nn_over_rms_norm"] = row["mean_nn"] / row["rms_norm"]
    verdict = radius_verdict(outcomes)
    numbers.update({"outcomes_agreeing": outcomes.count(AGREES), "outcomes_disagreeing": outcomes.count(DISAGREES),
                    "outcomes_undecided": outcomes.count(UNDECIDED)})
    return _radius_check(verdict, numbers, lines + spread_lines, excluded, n_boot, tolerance)


def _reported_sets(run: str, frame: pd.DataFrame, n_dim: int, n_boot: int, seed: int) -> dict[str, Any]:
    """The sets beside the primary one (all chunks; distinct prefixes with the gain): their mean at the largest
    sample and its ratio to 2r*."""
    numbers = {}
    for set_name in sorted(set(frame["set"]) - {primary_set(frame)}):
        trend = nn_trend(frame[frame["set"] == set_name], "mean", n_boot=n_boot, seed=seed)
        numbers.update({f"{run}.{set_name}.mean.level": trend["level"], f"{run}.{set_name}.mean.largest":
                        trend["largest"], f"{run}.{set_name}.mean.ratio_to_2r_star":
                        trend["level"] / (2 * ra.radius_star(n_dim))})
    return numbers


def _radius_check(verdict: str, numbers: dict[str, Any], lines: list[str], excluded: list[str], n_boot: int,
                tolerance: float) -> dict[str, Any]:
    if lines:
        evidence = (f"Primary test (stated in advance): within the paper's own tolerance $T={tolerance:.2f}$ "
                    "(20 vs $2r^*=15.49$), is the NN distance among distinct prefixes, gain divided out, at about "
                    "$2r^*$ and the same for every run of one width? " + "; ".join(lines) + ".")
    else:
        evidence = ("No usable run: no trained run at its best checkpoint (converged or over-fitted) and no pretrained "
                    "run with a radius search.")
    if excluded:
        evidence += " Not used (a claim never rests on them): " + ", ".join(excluded) + "."
    return check_row(
        "radius",
        "Last-layer NN distances among distinct prefixes (the final LayerNorm's gain divided out) at the largest "
        f"nested sample of each run's radius search (the paper's $m={PAPER_SAMPLE_SIZE}$ where the sample holds "
        f"that many distinct prefixes), mean and median with {n_boot} bootstrap replicates; their ratio to $2r^*$ and "
        "their spread across the runs of one width, against the paper's tolerance; the trend over the nested "
        "samples, the all-chunks and with-gain distances and per-layer NN distance over RMS norm reported.",
        numbers, verdict, evidence, "data",
        ours_tex=(r"Per run, the NN distance $\overline{\mathrm{NN}}(m^*)$ at the largest sample $m^*\le 80{,}000$ "
                  r"(no extrapolation) against $2r^*=2\sqrt{n/(2\pi e)}$ and against the other runs of width $n$, "
                  r"within the paper's own tolerance $20/15.49=1.29$."),
        limits=("The default config trains small models ($d_{\\mathrm{model}}=64$) on Question-Formation data, not "
                "GPT-2 medium on OpenWebText; the interval resamples the queries of one sample of chunks, not the "
                "chunk sample, the training seed or the model, so it is a lower bound on the uncertainty. The "
                "tolerance is the paper's own (20 vs 15.49); a stricter one would move undecided outcomes to refuted, "
                "a looser one to reproduced (the ratios and spreads are in the numbers). The verdict would change "
                "with: the paper-scale run (config/paper.yaml: GPT-2 medium, 80K chunks, GPU) and real pretrained "
                "weights, whose LayerNorm gain sets the scale of the with-gain distances."))


# ---------------------------------------------------------------- the figure

SET_LABELS = {"distinct": "distinct prefixes", "all": "all chunks", "gain_free": "distinct, gain divided out"}
SET_MARKERS = {"distinct": "o", "all": "s", "gain_free": "^"}


def _panel(ax, frame: pd.DataFrame, info: pd.Series, seed: int) -> None:
    primary = primary_set(frame)
    two_r = 2 * ra.radius_star(int(info["n_dim"]))
    for offset, (set_name, group) in enumerate(sorted(frame.groupby("set"), key=lambda item: item[0] != primary)):
        colour = style.SERIES_COLOURS[offset % len(style.SERIES_COLOURS)]
        means = group.groupby("n_patterns")["distance"].mean()
        filled = set_name == primary
        ax.plot(means.index, means.to_numpy(), SET_MARKERS.get(set_name, "o"), color=colour,
                markerfacecolor=colour if filled else "none", label=SET_LABELS.get(set_name, set_name))
        if filled and len(means) > 1:
            trend = nn_trend(group, "mean", seed=seed)
            error = [[trend["level"] - trend["level_lo"]], [trend["level_hi"] - trend["level"]]]
            ax.errorbar([trend["largest"]], [trend["level"]], yerr=error, color=colour, capsize=4, fmt="none",
                        label="95% CI at the largest sample")
    ax.axhspan(two_r / PAPER_RATIO, two_r * PAPER_RATIO, color="grey", alpha=0.15,
               label="2r* within the paper's tolerance (x/÷ 1.29)")
    style.TWO_R_STAR.hline(ax, two_r, label="2r* (n = d_emb)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("distinct prefixes in the sample, m")
    ax.set_ylabel("mean NN distance")
    ax.set_title(f"{info['run']} ({info['status']})")


@style.styled
def radius_trend(nn_queries: pd.DataFrame, runs: pd.DataFrame, out_dir: Path, seed: int = 0) -> tuple[Path, str]:
    """One panel per run: the inputs of claims.radius, drawn."""
    fig, axes = style.panels(len(runs), panel_width=4.8, panel_height=3.6)
    for ax, (_, info) in zip(axes, runs.iterrows(), strict=True):
        _panel(ax, nn_queries[nn_queries["run"] == info["run"]], info, seed)
    style.legend_outside(fig)
    caption = ("Radius test: last-layer mean nearest-neighbour distance against the number of prefixes in the "
               "nested samples (log-log), only where measured. Filled markers: the primary set (distinct prefixes, "
               "the final LayerNorm's gain divided out where known), with its 95% bootstrap CI at the largest "
               "sample; hollow markers: distinct prefixes with the gain, and all chunks (identical prefixes give "
               f"zero distances). The paper reads the distance as 2r*, the {style.TWO_R_STAR.describe()}, "
               "independent of the sample size; the grey band is the paper's own tolerance around it.")
    return style.save_figure(fig, out_dir, "radius_trend")[0], caption


# ---------------------------------------------------------------- inputs and registry

def _t_max(run: Run) -> int:
    """Context length behind each activation: the chunk length for corpus data, the model context for QF."""
    chunk_len = run.act_meta["splits"]["train"].get("chunk_len")
    if chunk_len:
        return int(chunk_len)
    if run.summary is not None:
        return int(run.summary["model_config"]["max_len"])
    raise AssocmemError(f"{run.act_dir / 'meta.json'}: no chunk_len for pretrained run {run.label}")


def _all_chunks(run: Run, layer: str) -> pd.DataFrame:
    """The stored self-search (every chunk, duplicates included) at ``layer``, rank 1."""
    frame = run.nn_self
    rank1 = frame[(frame["rank"] == 1) & (frame["layer"] == layer)]
    counts = rank1.groupby("fraction")["query_row"].transform("size")
    return pd.DataFrame({"fraction": rank1["fraction"].astype(float), "n_patterns": counts,
                         "query": rank1["query_row"], "distance": rank1["distance"].astype(np.float64)})


def _radius_run(run: Run) -> tuple[pd.DataFrame, dict[str, Any], list[dict[str, Any]]]:
    """One run's last-layer NN distances (all chunks from the self-search; distinct prefixes and gain-free
    vectors from the neighbours stage's radius searches), its scale numbers and each layer's RMS norm."""
    meta, last = run.radius_meta, run.act_meta["layers"][-1]
    frames = [_all_chunks(run, last).assign(set="all"), run.radius]
    info: dict[str, Any] = {key: meta[key] for key in ("n_chunks", "n_distinct", "rms_norm", "n_dim")}
    info["t_max"] = _t_max(run)
    all_full = frames[0][frames[0]["fraction"] == frames[0]["fraction"].max()]["distance"]
    info["zero_share"] = float((all_full == 0).mean()) if len(all_full) else np.nan
    info.update({key: meta[key] for key in ("gain_rms", "gain_free_rms_norm") if meta.get(key) is not None})
    summary = run.nn_summary
    full = summary[(summary["protocol"] == "self") & (summary["fraction"] == summary["fraction"].max())]
    scale = [{"run": run.label, "layer": row["layer"], "mean_nn": float(row["mean"]),
              "rms_norm": float(meta["layer_rms_norm"][row["layer"]])} for _, row in full.iterrows()]
    return pd.concat(frames, ignore_index=True).assign(run=run.label), info, scale


def radius_inputs(evidence: Evidence) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(nn_queries, runs, layer_scale) as :func:`radius` takes them, for every run with activations. A run that
    over-fitted counts when its activations come from its best checkpoint."""
    queries, infos, scales = [], [], []
    for run in evidence.runs:
        frame, info, scale = _radius_run(run)
        status = evidence.status(run)
        queries.append(frame)
        usable = status.usable_at_best if run.checkpoint == "best" or not run.trained else status.usable
        infos.append({"run": run.label, "usable": usable, "status": status.status, **info})
        scales += scale
    return pd.concat(queries, ignore_index=True), pd.DataFrame(infos), pd.DataFrame(scales)


NO_ACTIVATIONS = Untestable(
    "nothing: this configuration dumps no activations (a scaling sweep only)",
    "No nearest-neighbour distances: the configured experiments dump no activations. The default config "
    "(`snakemake --cores all`) measures them.",
    "Needs an experiment with activations and neighbours (any non-sweep experiment).",
    {"runs_with_activations": 0})


def _radius_row(evidence: Evidence) -> dict[str, Any] | Untestable:
    """The radius row plus its figure (``figures``: file name under the figure directory and caption)."""
    if not evidence.runs:
        return NO_ACTIVATIONS
    nn_queries, run_info, layer_scale = radius_inputs(evidence)
    row = radius(nn_queries, run_info, layer_scale, seed=evidence.seed)
    path, caption = radius_trend(nn_queries, run_info, evidence.fig_dir, seed=evidence.seed)
    return {**row, "figures": [{"file": path.name, "caption": caption}]}


register(Claim(
    "radius", "Radius", r"NN distance $\approx 2r^*$ with $r^* = \sqrt{n/(2\pi e)}$",
    "Sec. 5: the radius must be approximately sqrt(n/(2 pi e)); Sec. 6.1 / Fig. 2: the mean and median NN distance "
    "of last-layer activations are about 20 ~ 2 sqrt(n/2 pi e) at 25, 50, 75 and 100% of 80K chunks "
    "(n = d_emb = 1024).",
    r"$r^*=\sqrt{n/(2\pi e)}$; at 25, 50, 75 and 100% of 80K chunks the mean and median NN distance "
    r"$\approx 20\approx 2r^*=2\sqrt{1024/(2\pi e)}=15.49$.",
    quotes.RADIUS, order=70, evaluate=_radius_row, untestable=NO_ACTIVATIONS))
