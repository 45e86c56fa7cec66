"""The radius hypothesis of Sec. 5 / 6.1 as a statistical statement about nearest-neighbour distances.

What the paper predicts (quoted in report.quotes): the ball radius is "approximately sqrt(n/(2 pi e))"; in
Fig. 2 the mean and median NN distance of 80K last-layer activations are "approximately 20", about 2 r*, at 25,
50, 75 and 100% of the sample ("In all these cases"), so the distance is read as a property of the model (twice
the radius of disjoint balls), not of the sample size; the paper adds that its estimate "may be greater than
actual one".

What we test, per primary row (the last layer, distinct prefixes, each converged trained run and each
pretrained run):

1. Trend: the least-squares slope b of log(mean NN distance) on log(sample size m) over the self-search
   fractions, with a 95% percentile bootstrap CI (queries resampled jointly across fractions, the stored sets
   held fixed). A sample-size-free distance has b = 0; i.i.d. points of intrinsic dimension k give b = -1/k.
2. Extrapolation: the fitted power law at the paper's own sample size m = 80,000, with its bootstrap CI, and
   its ratio to 2 r* for both readings of n (n = d_emb, the paper's plug-in in Sec. 6.1, and n = T_max d_emb,
   its definition in Sec. 3).

Verdict rule (fixed in advance): a primary row *agrees* iff the CI of b contains 0 (no evidence the distance
keeps shrinking) AND the CI of the mean at m = 80,000 contains 2 r*(d_emb). Reproduced iff every primary row
agrees; refuted iff at least one does not; not-testable iff there is no primary row with two or more
fractions. No tolerance band enters: "approximately" is read as "statistically indistinguishable". What would
change it is reported with the row (ratios with CIs, the sample size at which the fitted mean would equal 2 r*,
and whether the ratio CI lies within the paper's own accepted 20 / 15.49 = 1.29).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from assocmem.errors import AssocmemError
from assocmem.report import quotes, style
from assocmem.report.artifacts import Run
from assocmem.report.claims.base import check_row, require_columns
from assocmem.report.claims.registry import Claim, Untestable, register
from assocmem.report.evidence import Evidence
from assocmem.report.quotes import PAPER_SAMPLE_SIZE
from assocmem.theory import radius as ra

PAPER_RATIO = 20.0 / (2.0 * ra.radius_star(1024))  # the paper's own "agreement": mean 20 vs 2r* = 15.49
CONFIDENCE = 0.95
N_BOOT = 1000
_BLOCK_ELEMENTS = 4_000_000  # bootstrap weights held at once (replicates x queries)

QUERY_COLUMNS = ["run", "set", "fraction", "n_patterns", "query", "distance"]
RUN_COLUMNS = ["run", "n_dim", "t_max", "usable", "status"]


def loglog_fit(sizes: np.ndarray, values: np.ndarray) -> tuple[float, float]:
    """(intercept, slope) of log(values) = a + b log(sizes), by scipy's least squares."""
    fit = stats.linregress(np.log(np.asarray(sizes, dtype=np.float64)), np.log(np.asarray(values, dtype=np.float64)))
    return float(fit.intercept), float(fit.slope)


def _weighted_medians(sorted_values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Lower weighted median per row of ``weights`` (replicates x values), values sorted ascending."""
    cumulative = np.cumsum(weights, axis=1)
    index = (cumulative < cumulative[:, -1:] / 2.0).sum(axis=1)
    return sorted_values[np.minimum(index, sorted_values.size - 1)]


def _statistic(distances: np.ndarray, statistic: str) -> float:
    return float(np.mean(distances) if statistic == "mean" else np.median(distances))


def _bootstrap_statistics(groups: list[tuple[np.ndarray, np.ndarray]], n_queries: int, statistic: str,
                          n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """(n_boot, n_fractions) statistic per fraction under multinomial query weights shared across fractions."""
    out = np.empty((n_boot, len(groups)))
    block = max(1, _BLOCK_ELEMENTS // max(1, n_queries))
    for start in range(0, n_boot, block):
        size = min(block, n_boot - start)
        weights = rng.multinomial(n_queries, np.full(n_queries, 1.0 / n_queries), size=size).astype(np.float64)
        for column, (query_index, distances) in enumerate(groups):
            w = weights[:, query_index]
            if statistic == "mean":
                out[start:start + size, column] = (w @ distances) / np.maximum(w.sum(axis=1), 1e-300)
            else:
                order = np.argsort(distances, kind="stable")
                out[start:start + size, column] = _weighted_medians(distances[order], w[:, order])
    return out


def nn_trend(frame: pd.DataFrame, statistic: str = "mean", target: int = PAPER_SAMPLE_SIZE, n_boot: int = N_BOOT,
             seed: int = 0) -> dict[str, float]:
    """Power-law trend of one set's NN-distance statistic against the sample size, with bootstrap CIs.

    ``frame``: fraction, n_patterns, query (id shared across fractions), distance. Returns the statistic per
    fraction (key ``at_<n_patterns>``), slope, value at ``target`` and their CI bounds (``_lo``, ``_hi``); NaN
    where a statistic is 0 (a log-log fit is then undefined)."""
    require_columns(frame, ["fraction", "n_patterns", "query", "distance"], "nn trend frame")
    if statistic not in ("mean", "median"):
        raise AssocmemError(f"statistic must be 'mean' or 'median', got {statistic!r}")
    by_fraction = sorted(frame.groupby("fraction"), key=lambda item: item[0])
    queries = np.unique(frame["query"].to_numpy())
    lookup = pd.Series(np.arange(queries.size), index=queries)
    groups = [(lookup[g["query"].to_numpy()].to_numpy(), g["distance"].to_numpy(dtype=np.float64))
              for _, g in by_fraction]
    sizes = np.array([float(g["n_patterns"].iloc[0]) for _, g in by_fraction])
    points = np.array([_statistic(d, statistic) for _, d in groups])
    out: dict[str, float] = {f"at_{int(m)}": v for m, v in zip(sizes, points, strict=True)}
    nan_keys = ("slope", "slope_lo", "slope_hi", "at_target", "at_target_lo", "at_target_hi")
    if len(sizes) < 2 or np.any(points <= 0):
        return {**out, **dict.fromkeys(nan_keys, float("nan"))}
    intercept, slope = loglog_fit(sizes, points)
    boot = _bootstrap_statistics(groups, queries.size, statistic, n_boot, np.random.default_rng(seed))
    boot = boot[np.all(boot > 0, axis=1)]
    coefficients = np.polyfit(np.log(sizes), np.log(boot).T, 1)  # (2, replicates): slope, intercept
    tail = 100 * (1 - CONFIDENCE) / 2
    slope_lo, slope_hi = np.percentile(coefficients[0], [tail, 100 - tail])
    at_boot = np.exp(coefficients[1] + coefficients[0] * np.log(target))
    at_lo, at_hi = np.percentile(at_boot, [tail, 100 - tail])
    return {**out, "slope": slope, "slope_lo": float(slope_lo), "slope_hi": float(slope_hi),
            "intercept": intercept, "at_target": float(np.exp(intercept + slope * np.log(target))),
            "at_target_lo": float(at_lo), "at_target_hi": float(at_hi), "replicates": float(len(boot))}


def size_for_value(trend: dict[str, float], value: float) -> float:
    """Sample size at which the fitted power law equals ``value`` (NaN for a flat or undefined fit)."""
    slope, intercept = trend.get("slope", np.nan), trend.get("intercept", np.nan)
    if not np.isfinite(slope) or slope == 0:
        return float("nan")
    return float(np.exp((np.log(value) - intercept) / slope))


def _row_numbers(key: str, trend: dict[str, float], two_r_emb: float, two_r_seq: float) -> dict[str, float]:
    numbers = {f"{key}.{name}": value for name, value in trend.items() if name not in ("intercept", "replicates")}
    for bound in ("", "_lo", "_hi"):
        numbers[f"{key}.ratio_to_2r_star_emb{bound}"] = trend[f"at_target{bound}"] / two_r_emb
    numbers[f"{key}.ratio_to_2r_star_seq"] = trend["at_target"] / two_r_seq
    numbers[f"{key}.size_where_2r_star_emb"] = size_for_value(trend, two_r_emb)
    return numbers


def _agrees(trend: dict[str, float], two_r: float) -> bool:
    return bool(trend["slope_hi"] >= 0 and trend["at_target_lo"] <= two_r <= trend["at_target_hi"])


def _describe(run: str, trend: dict[str, float], two_r: float) -> str:
    if not np.isfinite(trend["slope"]):
        return f"{run}: no trend (a statistic is 0)"
    shrink = "shrinks" if trend["slope_hi"] < 0 else ("grows" if trend["slope_lo"] > 0 else "is flat within noise")
    return (f"{run}: mean NN distance {shrink} with the sample size (log-log slope {trend['slope']:.3f}, 95% CI "
            f"[{trend['slope_lo']:.3f}, {trend['slope_hi']:.3f}]); extrapolated to m = {PAPER_SAMPLE_SIZE:,}: "
            f"{trend['at_target']:.3g} [{trend['at_target_lo']:.3g}, {trend['at_target_hi']:.3g}] vs 2r* = "
            f"{two_r:.3g} (ratio {trend['at_target'] / two_r:.3g})")


def radius(nn_queries: pd.DataFrame, runs: pd.DataFrame, layer_scale: pd.DataFrame | None = None,
           seed: int = 0, n_boot: int = N_BOOT) -> dict[str, Any]:
    """nn_queries: run, set ('distinct' primary; 'all', 'gain_free' reported), fraction, n_patterns, query,
    distance (last layer). runs: run, n_dim, t_max, usable, status, plus optional rms_norm, gain_rms,
    zero_share, n_chunks, n_distinct. layer_scale (optional): run, layer, mean_nn, rms_norm (every layer).
    The rule is in the module docstring."""
    require_columns(nn_queries, QUERY_COLUMNS, "nn_queries")
    require_columns(runs, RUN_COLUMNS, "radius runs")
    if runs.empty:
        raise AssocmemError("radius runs: no rows")
    numbers: dict[str, Any] = {"paper_sample_size": PAPER_SAMPLE_SIZE, "paper_own_ratio": PAPER_RATIO,
                               "confidence": CONFIDENCE, "bootstrap_replicates": n_boot}
    described, agreements, excluded = [], [], []
    for _, info in runs.iterrows():
        run, n_dim, t_max = str(info["run"]), int(info["n_dim"]), int(info["t_max"])
        two_r_emb, two_r_seq = 2 * ra.radius_star(n_dim), 2 * ra.radius_star(n_dim * t_max)
        numbers.update({f"{run}.usable": bool(info["usable"]), f"{run}.2r_star_emb": two_r_emb,
                        f"{run}.2r_star_seq": two_r_seq})
        numbers.update({f"{run}.{k}": info[k] for k in ("rms_norm", "gain_free_rms_norm", "gain_rms", "zero_share",
                                                        "n_chunks", "n_distinct") if k in info and pd.notna(info[k])})
        for scale in ("rms_norm", "gain_free_rms_norm"):
            if scale in info and pd.notna(info[scale]):
                numbers[f"{run}.2r_star_emb_over_{scale}"] = two_r_emb / float(info[scale])
        for set_name, group in nn_queries[nn_queries["run"] == run].groupby("set"):
            for statistic in ("mean", "median") if set_name == "distinct" else ("mean",):
                trend = nn_trend(group, statistic, n_boot=n_boot, seed=seed)
                numbers.update(_row_numbers(f"{run}.{set_name}.{statistic}", trend, two_r_emb, two_r_seq))
                if set_name == "distinct" and statistic == "mean":
                    if not info["usable"]:
                        excluded.append(f"{run} ({info['status']})")
                    elif np.isfinite(trend["slope"]):
                        agreements.append(_agrees(trend, two_r_emb))
                        described.append(_describe(run, trend, two_r_emb))
    if layer_scale is not None and not layer_scale.empty:
        for _, row in layer_scale.iterrows():
            numbers[f"{row['run']}|{row['layer']}.mean_nn_over_rms_norm"] = row["mean_nn"] / row["rms_norm"]
    numbers.update({"primary_rows": len(agreements), "primary_rows_agreeing": sum(agreements)})
    if not agreements:
        verdict = "not-testable"
        evidence = ("No primary row: no converged trained run or pretrained run with a last-layer self-search at "
                    "two or more sample fractions.")
    else:
        verdict = "reproduced" if all(agreements) else "refuted"
        evidence = (f"{sum(agreements)} of {len(agreements)} primary rows agree (slope CI contains 0 and the "
                    f"mean extrapolated to m = {PAPER_SAMPLE_SIZE:,} has 2r* = 2 sqrt(d_emb/(2 pi e)) inside its "
                    "95% CI). " + "; ".join(described) + ".")
    if excluded:
        evidence += " Not used (a claim never rests on them): " + ", ".join(excluded) + "."
    evidence += (" Distances are between distinct prefixes (identical prefixes give identical activations and "
                 "exact zero distances; the all-chunks rows keep them). The final LayerNorm output is "
                 "gain * normalised + bias, so distances scale with the gain: the gain_free rows divide the "
                 "gain out (distances of the normalised vectors, whose norm is sqrt(d_emb)); 2r*_emb / rms_norm "
                 "puts the prediction in units of the layer's RMS norm.")
    return check_row(
        "radius",
        "Last-layer NN distances among distinct prefixes at each self-search fraction, per run; log-log trend "
        f"against the sample size with {n_boot} bootstrap replicates; extrapolation to m = {PAPER_SAMPLE_SIZE:,}; "
        "ratios to 2r* for n = d_emb and n = T_max d_emb; the same for all chunks and for the gain-free vectors; "
        "per-layer mean NN distance over the layer's RMS norm.",
        numbers, verdict, evidence, "data",
        ours_tex=(r"Per run, $\overline{\mathrm{NN}}(m)\approx a\,m^{b}$ over the sample size $m$; the paper's "
                  r"reading needs $b=0$ and $\overline{\mathrm{NN}}(80{,}000)=2r^*=2\sqrt{d_{\mathrm{emb}}/(2\pi e)}$"
                  r" within the 95% CI; both are measured per run (numbers: slope, at\_target, ratios). With "
                  r"$b<0$ the fitted law has no positive limit, so a single sample size cannot fix a radius."),
        limits=("The default and test configs train small models (d_model 64 and 32) on Question-Formation "
                "data, not GPT-2 medium on OpenWebText; the self-search spans at most a factor of 4 in sample size "
                "and the extrapolation to 80,000 spans a factor of up to 40 beyond it, so the CI (which resamples "
                "queries only, not the chunk sample, the training seed or the model) is a lower bound on the "
                "uncertainty. The verdict would change with: the paper-scale run (config/paper.yaml: GPT-2 "
                "medium, 80K chunks, GPU) where the extrapolation becomes an interpolation; larger chunk samples "
                "to show whether the decline flattens into a plateau; and real pretrained weights, whose "
                "LayerNorm gain sets the absolute scale the prediction 2r* is compared with."))


# ---------------------------------------------------------------- the figure

SET_LABELS = {"distinct": "distinct prefixes (fit)", "all": "all chunks", "gain_free": "gain divided out"}
SET_MARKERS = {"distinct": "o", "all": "s", "gain_free": "^"}


def _panel(ax, frame: pd.DataFrame, info: pd.Series, seed: int) -> None:
    for offset, (set_name, group) in enumerate(sorted(frame.groupby("set"), key=lambda item: item[0] != "distinct")):
        colour = style.SERIES_COLOURS[offset % len(style.SERIES_COLOURS)]
        means = group.groupby("n_patterns")["distance"].mean()
        filled = set_name == "distinct"
        ax.plot(means.index, means.to_numpy(), SET_MARKERS.get(set_name, "o"), color=colour,
                markerfacecolor=colour if filled else "none", label=SET_LABELS.get(set_name, set_name))
        if not filled:
            continue
        trend = nn_trend(group, "mean", seed=seed)
        if np.isfinite(trend["slope"]):
            sizes = np.geomspace(means.index.min(), PAPER_SAMPLE_SIZE, 50)
            ax.plot(sizes, np.exp(trend["intercept"]) * sizes ** trend["slope"], color=colour,
                    label="power-law fit, extrapolated")
            error = [[trend["at_target"] - trend["at_target_lo"]], [trend["at_target_hi"] - trend["at_target"]]]
            ax.errorbar([PAPER_SAMPLE_SIZE], [trend["at_target"]], yerr=error, color=colour, capsize=4, fmt="D",
                        label="95% CI at 80,000")
    style.TWO_R_STAR.hline(ax, 2 * ra.radius_star(int(info["n_dim"])), label="2r* (n = d_emb)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("chunks in the sample, m")
    ax.set_ylabel("mean NN distance")
    ax.set_title(f"{info['run']} ({info['status']})")


@style.styled
def radius_trend(nn_queries: pd.DataFrame, runs: pd.DataFrame, out_dir: Path, seed: int = 0) -> tuple[Path, str]:
    """One panel per run: the inputs of claims.radius, drawn."""
    fig, axes = style.panels(len(runs), panel_width=4.8, panel_height=3.6)
    for ax, (_, info) in zip(axes, runs.iterrows(), strict=True):
        _panel(ax, nn_queries[nn_queries["run"] == info["run"]], info, seed)
    style.legend_outside(fig)
    caption = ("Radius test: last-layer mean nearest-neighbour distance against the number of chunks in the "
               "self-search sample (log-log). Filled circles: distinct prefixes, with the least-squares power "
               f"law extrapolated to the paper's {PAPER_SAMPLE_SIZE:,} chunks and its 95% bootstrap CI (diamond); "
               "hollow squares: all chunks (identical prefixes give zero distances); triangles: the final "
               "LayerNorm gain divided out. The paper reads the distance as 2r*, "
               f"the {style.TWO_R_STAR.describe()}, independent of the sample size.")
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
    """(nn_queries, runs, layer_scale) as :func:`radius` takes them, for every run with activations."""
    queries, infos, scales = [], [], []
    for run in evidence.runs:
        frame, info, scale = _radius_run(run)
        status = evidence.status(run)
        queries.append(frame)
        infos.append({"run": run.label, "usable": status.usable, "status": status.status, **info})
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
