"""Figure of the radius test (claims.radius): mean NN distance against the sample size, the fitted power law
extrapolated to the paper's 80,000 chunks with its bootstrap CI, and the predicted 2r*."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from assocmem.report import style
from assocmem.report.claims.radius import nn_trend
from assocmem.report.quotes import PAPER_SAMPLE_SIZE
from assocmem.theory.radius import radius_star

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
    style.TWO_R_STAR.hline(ax, 2 * radius_star(int(info["n_dim"])), label="2r* (n = d_emb)")
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
