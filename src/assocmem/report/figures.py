"""Report figures (matplotlib, PNG + PDF, written atomically), all in the style of :mod:`assocmem.report.style`.

Each public function returns the PNG path and its caption; captions name reference lines through
:meth:`style.LineStyle.describe`, so a caption cannot call a line by a colour it does not have.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from assocmem.report import style
from assocmem.report.artifacts import Experiment, Run
from assocmem.report.style import save_figure
from assocmem.theory.radius import radius_star

__all__ = ["eq12_ball_integral", "fig1_landscapes", "nn_by_layer", "nn_distance_range", "nn_histograms",
           "radius_star", "save_figure", "training_curves"]

PathAndCaption = tuple[Path, str]


@style.styled
def training_curves(exp: Experiment, out_dir: Path) -> PathAndCaption:
    """Fig. 3/4 analogue: train and validation CE per model and subset, with the exact entropy floor."""
    models = sorted({run.model for run in exp.trained_runs})
    width = max(4.0, min(6.5, style.PAGE_WIDTH_IN / len(models)))
    fig, axes = style.panels(len(models), panel_width=width, panel_height=3.8, sharex=True, sharey=True)
    floor = exp.floor["train"]["floor_nats_per_token"] if exp.floor else None
    subsets = sorted({run.subset for run in exp.trained_runs}, key=lambda s: -_fraction(exp, s))
    colours = {subset: style.SERIES_COLOURS[i % len(style.SERIES_COLOURS)] for i, subset in enumerate(subsets)}
    for ax, model in zip(axes, models, strict=True):
        for run in (r for r in exp.trained_runs if r.model == model):
            m = run.metrics
            ax.plot(m["step"], m["train_loss"], color=colours[run.subset], linestyle=style.TRAIN_LINESTYLE,
                    label=f"{run.subset} train")
            ax.plot(m["step"], m["val_ce"], color=colours[run.subset], linestyle=style.VALIDATION_LINESTYLE,
                    label=f"{run.subset} validation")
        if floor is not None:
            style.EXACT_FLOOR.hline(ax, floor, label=f"exact entropy floor {floor:.4f} (loss incl. <eos>)")
        style.PAPER_FLOOR.hline(ax, 1.0)
        ax.set_title(f"{exp.name}: {model}")
        ax.set_xlabel("optimizer step")
        ax.set_yscale("log")
    axes[0].set_ylabel("cross-entropy (nats / predicted token)")
    style.legend_outside(fig)
    path = save_figure(fig, out_dir, f"training_curves_{exp.name}")[0]
    floor_text = (f"{style.EXACT_FLOOR.describe()}: exact entropy floor of the training distribution "
                  f"({floor:.4f} nats/token, the mean over all target tokens including <eos>, as in the loss); "
                  if floor is not None else "")
    caption = (f"Training (solid) and validation (dashed) cross-entropy, one colour per subset; {floor_text}"
               f"{style.PAPER_FLOOR.describe()}: the paper's floor $L \\approx 1$. Log scale.")
    return path, caption


def _fraction(exp: Experiment, subset: str) -> float:
    return next(run.fraction for run in exp.runs if run.subset == subset)


def _rank1(run: Run, layer: str) -> tuple[list[float], dict[float, np.ndarray]]:
    frame = run.nn_self[(run.nn_self["rank"] == 1) & (run.nn_self["layer"] == layer)]
    fractions = sorted(frame["fraction"].unique())
    return fractions, {f: frame.loc[frame["fraction"] == f, "distance"].to_numpy() for f in fractions}


def nn_distance_range(runs: Sequence[Run]) -> tuple[float, float]:
    """One x-range for every NN histogram of an experiment: all last-layer distances, r* and 2r*."""
    values: list[float] = []
    for run in runs:
        _, by_fraction = _rank1(run, run.act_meta["layers"][-1])
        values += [float(d.max()) for d in by_fraction.values() if d.size]
        values.append(2 * float(radius_star(int(run.nn_summary["n_dim"].iloc[0]))))
    return style.shared_range([0.0, *values], include_zero=True)


@style.styled
def nn_histograms(run: Run, out_dir: Path, x_range: tuple[float, float] | None = None,
                  layer: str | None = None) -> PathAndCaption:
    """Fig. 2 analogue: rank-1 NN distances per subsample fraction for one layer, with r* and 2r*.

    All panels share the bins and the x-range (``x_range``, e.g. from :func:`nn_distance_range`, so that
    figures of one experiment compare too)."""
    layer = layer or run.act_meta["layers"][-1]
    fractions, by_fraction = _rank1(run, layer)
    n_dim = int(run.nn_summary["n_dim"].iloc[0])
    r_star = float(radius_star(n_dim))
    low, high = x_range or nn_distance_range([run])
    bins = np.linspace(low, high, 41)
    fig, axes = style.panels(len(fractions), panel_width=2.5, panel_height=3.0, sharex=True, sharey=True)
    n_chunks = run.nn_self["query_row"].nunique()
    for ax, fraction in zip(axes, fractions, strict=True):
        dist = by_fraction[fraction]
        ax.hist(dist, bins=bins, color=style.SERIES_COLOURS[0], alpha=0.8, label="NN distances")
        style.MEAN.vline(ax, float(np.mean(dist)))
        style.MEDIAN.vline(ax, float(np.median(dist)))
        style.R_STAR.vline(ax, r_star, label=f"r* = {r_star:.2f}")
        style.TWO_R_STAR.vline(ax, 2 * r_star, label=f"2r* = {2 * r_star:.2f}")
        ax.set_title(f"{round(fraction * 100)}% of {n_chunks} chunks\nmean {np.mean(dist):.2f}, "
                     f"median {np.median(dist):.2f}", fontsize=9)
        ax.yaxis.set_major_locator(MaxNLocator(nbins=5, integer=True))
        ax.set_xlabel("NN distance (L2)")
        ax.set_xlim(low, high)
    axes[0].set_ylabel("chunks")
    fig.suptitle(f"{run.exp} {run.label}, layer {layer} (n = {n_dim})")
    style.legend_outside(fig)
    path = save_figure(fig, out_dir, f"nn_{run.exp}_{run.model}_{run.subset}")[0]
    caption = (f"{run.label}, layer {layer}: rank-1 NN distance histograms at each subsample fraction (same bins "
               f"and x-range in every panel and every run of this experiment). {_mean_median_r_star_words()}")
    return path, caption


def _mean_median_r_star_words() -> str:
    return (f"{style.MEAN.describe().capitalize()}: mean; {style.MEDIAN.describe()}: median; "
            f"{style.R_STAR.describe()}: $r^* = \\sqrt{{n/(2\\pi e)}}$; {style.TWO_R_STAR.describe()}: $2r^*$.")


@style.styled
def nn_by_layer(exp: Experiment, out_dir: Path) -> PathAndCaption:
    """Mean rank-1 NN distance per layer (self-search, 100%) and held-out, divided by r*(d_model)."""
    fig, axes = style.panels(2, panel_width=5.0, panel_height=3.4, sharex=True, sharey=True)
    for run in exp.runs:
        summary = run.nn_summary
        n_dim = int(summary["n_dim"].iloc[0])
        for ax, protocol in zip(axes, ("self", "heldout"), strict=True):
            rows = summary[(summary["protocol"] == protocol) & (summary["fraction"] == summary["fraction"].max())]
            order = [layer for layer in run.act_meta["layers"] if layer in set(rows["layer"])]
            rows = rows.set_index("layer").loc[order]
            depth = np.linspace(0, 1, len(order)) if len(order) > 1 else np.ones(1)
            ax.plot(depth, rows["mean"] / radius_star(n_dim), marker="o", label=run.label)
    titles = {"self": "self-search among training chunks", "heldout": "held-out queries vs training chunks"}
    for ax, protocol in zip(axes, ("self", "heldout"), strict=True):
        style.R_STAR.hline(ax, 1.0, label="r* (ratio 1)")
        style.TWO_R_STAR.hline(ax, 2.0, label="2r* (ratio 2)")
        ax.set_title(titles[protocol])
        ax.set_xlabel("relative depth (0 = embeddings, 1 = final LayerNorm)")
    axes[0].set_ylabel("mean NN distance / r*")
    fig.suptitle(f"{exp.name}: mean rank-1 NN distance per layer, in units of r*")
    style.legend_outside(fig)
    path = save_figure(fig, out_dir, f"nn_by_layer_{exp.name}")[0]
    caption = (f"Mean NN distance per layer in units of $r^* = \\sqrt{{n/(2\\pi e)}}$, $n$ = d_model; one colour "
               f"per model/subset. {style.R_STAR.describe().capitalize()}: $r^*$; "
               f"{style.TWO_R_STAR.describe()}: $2r^*$, the paper's predicted NN distance.")
    return path, caption


@style.styled
def fig1_landscapes(num: int = 201) -> tuple[Figure, str]:
    """Fig. 1 of the paper redrawn: four 2-D energy landscapes and the 1-D curves (from theory.landscapes)."""
    from assocmem.theory import landscapes

    fig = _fig1_2d_and_1d(landscapes, num)
    caption = ("Fig. 1 reproduced. Top: energy landscapes of $D = \\{(-2,-0.5), (0.2,-0.3), (1.5,1.5)\\}$ "
               "(colour = energy, dark = low; vermillion dots = the patterns). Bottom: $D = \\{-2, 0, 1\\}$ with "
               f"the proposed energy and the MCHN energy for $\\beta = 1, 2$; {style.PATTERN.describe()}s: the "
               "patterns.")
    return fig, caption


def _fig1_2d_and_1d(landscapes, num: int) -> Figure:
    import matplotlib.pyplot as plt

    fig, grid = plt.subplot_mosaic([["a", "b", "c", "d"], ["e", "e", "e", "e"]], figsize=(style.PAGE_WIDTH_IN, 5.4),
                                   height_ratios=[1.1, 1])
    panels = landscapes.fig1_panels_2d(num=num)
    for key, name in zip("abcd", landscapes.PANEL_TITLES, strict=True):
        ax = grid[key]
        filled = ax.contourf(panels["x"], panels["y"], panels[name], levels=30, cmap=style.SEQUENTIAL_CMAP)
        fig.colorbar(filled, ax=ax, shrink=0.8, aspect=25)
        ax.scatter(*landscapes.PATTERNS_2D.T, color=style.OKABE_ITO["vermillion"], edgecolor="white", s=28, zorder=3)
        ax.set_title(landscapes.PANEL_TITLES[name])
        ax.set_aspect("equal")
        ax.grid(False)
    curves = landscapes.fig1_curves_1d()
    ax = grid["e"]
    ax.plot(curves["x"], curves["proposed"], color=style.SERIES_COLOURS[0], label="proposed energy (4)")
    ax.plot(curves["x"], curves["mchn_beta1"], color=style.SERIES_COLOURS[3], label="MCHN, β = 1")
    ax.plot(curves["x"], curves["mchn_beta2"], color=style.SERIES_COLOURS[3], linestyle=(0, (4, 2)),
            label="MCHN, β = 2")
    for i, pattern in enumerate(landscapes.PATTERNS_1D[:, 0]):
        style.PATTERN.vline(ax, float(pattern), label=style.PATTERN.label if i == 0 else "_")
    ax.set_xlabel("x")
    ax.set_ylabel("energy")
    style.legend_outside(fig, [ax])
    return fig


@style.styled
def eq12_ball_integral(radii: np.ndarray | None = None, dims: Sequence[int] = (512, 768, 1024)) -> tuple[Figure, str]:
    """Eq. (12): the Gaussian integral over an n-ball relative to its total mass, printed vs correct form."""
    import matplotlib.pyplot as plt

    from assocmem.theory import partition

    radii = np.linspace(1, 30, 59) if radii is None else radii
    fig, ax = plt.subplots(figsize=(7.0, 4.2))
    for colour, n in zip(style.SERIES_COLOURS, dims, strict=False):
        total = float(partition.log_gaussian_total_mass(n))
        ax.plot(radii, partition.log_ball_integral(n, radii) - total, color=colour,
                linestyle=style.CORRECT_LINESTYLE, label=f"correct, n = {n}")
        ax.plot(radii, partition.log_ball_integral_printed(n, radii) - total, color=colour,
                linestyle=style.PRINTED_LINESTYLE, label=f"printed, n = {n}")
    style.ZERO.hline(ax, 0.0)
    ax.set_xlabel("ball radius r")
    ax.set_ylabel(r"$\log\left(\int_{\|x\|\leq r} e^{-\|x\|^2}\,dx \;/\; \pi^{n/2}\right)$")
    ax.set_ylim(-3000, 2000)
    style.legend_outside(fig, columns=3)
    caption = ("Eq. (12): log of the Gaussian integral over an $n$-ball relative to its total mass $\\pi^{n/2}$; "
               "the printed formula (dashed) against the correct one (solid), one colour per $n$. "
               f"{style.ZERO.describe().capitalize()}: 0, the total mass, which the correct value can never "
               "exceed.")
    return fig, caption
