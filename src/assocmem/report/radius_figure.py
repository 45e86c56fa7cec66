"""The radius claim's figure (:mod:`assocmem.report.claims.radius`): per run, the mean nearest-neighbour distance
over the nested samples against 2r* and the paper's tolerance band."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from assocmem.report import nn_trends, style
from assocmem.theory import radius as ra

SET_LABELS = {"distinct": "distinct prefixes", "all": "all chunks", "gain_free": "distinct, gain divided out"}
SET_MARKERS = {"distinct": "o", "all": "s", "gain_free": "^"}


def _panel(ax, frame: pd.DataFrame, info: pd.Series, tolerance: float, primary: str, seed: int) -> None:
    two_r = 2 * ra.radius_star(int(info["n_dim"]))
    for offset, (set_name, group) in enumerate(sorted(frame.groupby("set"), key=lambda item: item[0] != primary)):
        colour = style.SERIES_COLOURS[offset % len(style.SERIES_COLOURS)]
        means = group.groupby("n_patterns")["distance"].mean()
        filled = set_name == primary
        ax.plot(means.index, means.to_numpy(), SET_MARKERS.get(set_name, "o"), color=colour,
                markerfacecolor=colour if filled else "none", label=SET_LABELS.get(set_name, set_name))
        if filled and len(means) > 1:
            trend = nn_trends.trend(group, "mean", seed=seed)
            error = [[trend["level"] - trend["level_lo"]], [trend["level_hi"] - trend["level"]]]
            ax.errorbar([trend["largest"]], [trend["level"]], yerr=error, color=colour, capsize=4, fmt="none",
                        label="95% CI at the largest sample")
    ax.axhspan(two_r / tolerance, two_r * tolerance, color="grey", alpha=0.15,
               label=f"2r* within the paper's tolerance (x/÷ {tolerance:.2f})")
    style.TWO_R_STAR.hline(ax, two_r, label="2r* (n = d_emb)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("distinct prefixes in the sample, m")
    ax.set_ylabel("mean NN distance")
    ax.set_title(f"{info['run']} ({info['status']})")


def radius_trend(nn_queries: pd.DataFrame, runs: pd.DataFrame, out_dir: Path, *, tolerance: float,
                 primary: Callable[[pd.DataFrame], str], seed: int = 0) -> tuple[Path, str]:
    """One panel per run: the inputs of claims.radius, drawn (``tolerance``: the paper's ratio band around 2r*;
    ``primary``: the run's primary set of distances, filled and with its interval). Drawn where its files are
    written (:func:`style.draw_figure`), with any bootstrapped trend the claim did not compute."""
    draw = functools.partial(_radius_trend_figure, nn_queries, runs, tolerance, primary, seed)
    caption = ("Radius test: last-layer mean nearest-neighbour distance against the number of prefixes in the "
               "nested samples (log-log), only where measured. Filled markers: the primary set (distinct prefixes, "
               "the final LayerNorm's gain divided out where known), with its 95% bootstrap CI at the largest "
               "sample; hollow markers: distinct prefixes with the gain, and all chunks (identical prefixes give "
               f"zero distances). The paper reads the distance as 2r*, the {style.TWO_R_STAR.describe()}, "
               "independent of the sample size; the grey band is the paper's own tolerance around it.")
    return style.draw_figure(draw, out_dir, "radius_trend")[0], caption


def _radius_trend_figure(nn_queries: pd.DataFrame, runs: pd.DataFrame, tolerance: float,
                         primary: Callable[[pd.DataFrame], str], seed: int) -> Figure:
    fig, axes = style.panels(len(runs), panel_width=4.8, panel_height=3.6)
    for ax, (_, info) in zip(axes, runs.iterrows(), strict=True):
        frame = nn_queries[nn_queries["run"] == info["run"]]
        _panel(ax, frame, info, tolerance, primary(frame), seed)
    style.legend_outside(fig)
    return fig
