"""Report figures (matplotlib, PNG + PDF, written atomically), all in the style of :mod:`assocmem.report.style`.

Each public function returns the PNG path and its caption; captions name reference lines through
:meth:`style.LineStyle.describe`, so a caption cannot call a line by a colour it does not have.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FormatStrFormatter, MaxNLocator

from assocmem.report import style
from assocmem.report.artifacts import Experiment, Run
from assocmem.report.style import save_figure
from assocmem.theory.radius import radius_star

__all__ = ["eq12_ball_integral", "fig1_landscapes", "floor_zoom_limits", "nn_by_layer", "nn_distance_range",
           "nn_histograms", "radius_star", "save_figure", "training_curves"]

PathAndCaption = tuple[Path, str]


ZOOM_BELOW, ZOOM_ABOVE = 0.01, 0.02  # nats/token below the floor and above max(1, the near curves)
ZOOM_REACH = 0.1  # a curve ending within this many nats/token of the floor or of 1 is drawn inside the zoom
FLOOR_ZOOM = "floor zoom"  # the label of the zoomed axes (tests and readers find the panel by it)


def floor_zoom_limits(floor: float, finals: Sequence[float]) -> tuple[float, float]:
    """The linear y-range of the floor panel: from the lowest of ``floor``, 1 and the near final values - 0.01 to the
    highest of them + 0.02. ``finals``: each curve's last value; those further than ``ZOOM_REACH`` from the floor and
    1 are left out, so an over-fitted or unfinished run cannot stretch the zoom."""
    bottom, top = sorted((floor, 1.0))
    near = [v for v in finals if math.isfinite(v) and bottom - ZOOM_REACH <= v <= top + ZOOM_REACH]
    return min([bottom, *near]) - ZOOM_BELOW, max([top, *near]) + ZOOM_ABOVE


def _plot_runs(ax: Axes, runs: Sequence[Run], colours: dict[str, str]) -> None:
    for run in runs:
        m = run.metrics
        ax.plot(m["step"], m["train_loss"], color=colours[run.subset], linestyle=style.TRAIN_LINESTYLE,
                label=f"{run.subset} train")
        ax.plot(m["step"], m["val_ce"], color=colours[run.subset], linestyle=style.VALIDATION_LINESTYLE,
                label=f"{run.subset} validation")


def _reference_lines(ax: Axes, floor: float | None) -> None:
    if floor is not None:
        style.EXACT_FLOOR.hline(ax, floor, label=f"exact entropy floor {floor:.4f} (loss incl. <eos>)")
    style.PAPER_FLOOR.hline(ax, 1.0)


def _zoom_panel(ax: Axes, floor: float, limits: tuple[float, float], finals: Sequence[float]) -> None:
    """Linear axis around the floor and 1, each line named at the left edge (where the curves are still high); says
    so when no curve ends inside it (an unfinished or toy run)."""
    ax.set_ylim(*limits)
    ax.set_label(FLOOR_ZOOM)
    ax.yaxis.set_major_locator(MaxNLocator(nbins=5))
    ax.yaxis.set_major_formatter(FormatStrFormatter("%.3f"))
    below = floor < 1.0  # each label on the side of its line away from the other line
    for y, text, under in ((floor, f"exact floor {floor:.4f}", below), (1.0, "paper's L = 1", not below)):
        ax.annotate(text, xy=(0.01, y), xycoords=("axes fraction", "data"), ha="left",
                    va="top" if under else "bottom", xytext=(0, -2 if under else 2), textcoords="offset points",
                    fontsize=8.5, zorder=5, bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.85, "pad": 1})
    if not any(limits[0] <= value <= limits[1] for value in finals):
        ax.text(0.5, 0.8, "no curve ends inside this range", transform=ax.transAxes, ha="center", color="dimgrey",
                fontsize=9)


@style.styled
def training_curves(exp: Experiment, out_dir: Path) -> PathAndCaption:
    """Fig. 3/4 analogue: train and validation CE per model and subset, with the exact entropy floor; with a floor, a
    second row zooms (linear axis, :func:`floor_zoom_limits`) on the floor and the paper's 1, which a log axis over
    the whole curve cannot tell apart."""
    import matplotlib.pyplot as plt

    models = sorted({run.model for run in exp.trained_runs})
    floor = exp.floor["train"]["floor_nats_per_token"] if exp.floor else None
    width = max(4.0, min(6.5, style.PAGE_WIDTH_IN / len(models)))
    rows = 1 if floor is None else 2
    fig, grid = plt.subplots(rows, len(models), figsize=(min(style.PAGE_WIDTH_IN, width * len(models)),
                                                         3.8 + 2.8 * (rows - 1)),
                             squeeze=False, sharex=True, sharey="row", height_ratios=[3.8, 2.8][:rows])
    subsets = sorted({run.subset for run in exp.trained_runs}, key=lambda s: -_fraction(exp, s))
    colours = {subset: style.SERIES_COLOURS[i % len(style.SERIES_COLOURS)] for i, subset in enumerate(subsets)}
    finals = [float(run.metrics[column].iloc[-1]) for run in exp.trained_runs for column in ("train_loss", "val_ce")]
    limits = floor_zoom_limits(floor, finals) if floor is not None else None
    for column, model in enumerate(models):
        runs = [r for r in exp.trained_runs if r.model == model]
        for row in range(rows):
            ax = grid[row][column]
            _plot_runs(ax, runs, colours)
            _reference_lines(ax, floor)
        grid[0][column].set_title(f"{exp.name}: {model}")
        grid[0][column].set_yscale("log")
        if limits is not None:
            _zoom_panel(grid[1][column], floor, limits, finals)
            grid[1][column].set_title(f"{model}: zoom on the floor and 1 (linear axis)")
        grid[-1][column].set_xlabel("optimizer step")
    grid[0][0].set_ylabel("cross-entropy (nats / predicted token)")
    if limits is not None:
        grid[1][0].set_ylabel("cross-entropy, zoomed")
    style.legend_outside(fig)
    path = save_figure(fig, out_dir, f"training_curves_{exp.name}")[0]
    return path, _training_caption(floor, limits)


def _training_caption(floor: float | None, limits: tuple[float, float] | None) -> str:
    floor_text = (f"{style.EXACT_FLOOR.describe()}: exact entropy floor of the training distribution "
                  f"({floor:.4f} nats/token, the mean over all target tokens including <eos>, as in the loss); "
                  if floor is not None else "")
    caption = (f"Training (solid) and validation (dashed) cross-entropy, one colour per subset; {floor_text}"
               f"{style.PAPER_FLOOR.describe()}: the paper's floor $L \\approx 1$. Log scale")
    if limits is None:
        return caption + "."
    return caption + (f" in the top row; the bottom row shows the same curves on a linear axis from {limits[0]:.3f} "
                      f"to {limits[1]:.3f} nats/token, where the exact floor and 1 are "
                      f"{abs(1 - floor) / (limits[1] - limits[0]):.0%} of the axis apart (curves that end further "
                      "from both leave the panel).")


def _fraction(exp: Experiment, subset: str) -> float:
    return next(run.fraction for run in exp.runs if run.subset == subset)


def _rank1(run: Run, layer: str) -> tuple[list[float], dict[float, np.ndarray]]:
    frame = run.nn_self[(run.nn_self["rank"] == 1) & (run.nn_self["layer"] == layer)]
    fractions = sorted(frame["fraction"].unique())
    return fractions, {f: frame.loc[frame["fraction"] == f, "distance"].to_numpy() for f in fractions}


TAIL_QUANTILE = 0.99  # a run's histograms reach this quantile of its distances; the longer ones share the last bin


def nn_distance_range(runs: Sequence[Run], quantile: float = 1.0) -> tuple[float, float]:
    """One x-range for the NN histograms of ``runs``: up to the ``quantile`` of each run's last-layer distances (all
    fractions pooled; 1: the longest), and past 2r*."""
    values: list[float] = []
    for run in runs:
        _, by_fraction = _rank1(run, run.act_meta["layers"][-1])
        pooled = np.concatenate([d for d in by_fraction.values() if d.size] or [np.zeros(1)])
        values.append(float(np.quantile(pooled, quantile)))
        values.append(2 * float(radius_star(int(run.nn_summary["n_dim"].iloc[0]))))
    return style.shared_range([0.0, *values], include_zero=True)


def _histogram_panel(ax: Axes, dist: np.ndarray, bins: np.ndarray, r_star: float, title: str) -> None:
    """One fraction's histogram; distances beyond the last bin are counted in it (and said in the title)."""
    beyond = int((dist > bins[-1]).sum())
    ax.hist(np.clip(dist, bins[0], bins[-1]), bins=bins, color=style.SERIES_COLOURS[0], alpha=0.8,
            label="NN distances")
    style.MEAN.vline(ax, float(np.mean(dist)))
    style.MEDIAN.vline(ax, float(np.median(dist)))
    style.R_STAR.vline(ax, r_star, label=f"r* = {r_star:.2f}")
    style.TWO_R_STAR.vline(ax, 2 * r_star, label=f"2r* = {2 * r_star:.2f}")
    tail = f"\n{beyond} beyond {bins[-1]:.3g}, in the last bin" if beyond else ""
    ax.set_title(f"{title}\nmean {np.mean(dist):.2f}, median {np.median(dist):.2f}{tail}", fontsize=9)
    ax.yaxis.set_major_locator(MaxNLocator(nbins=5, integer=True))
    ax.set_xlabel("NN distance (L2)")
    ax.set_xlim(bins[0], bins[-1])


def nn_histograms(run: Run, out_dir: Path, x_range: tuple[float, float] | None = None,
                  layer: str | None = None) -> PathAndCaption:
    """Fig. 2 analogue: rank-1 NN distances per subsample fraction for one layer, with r* and 2r*.

    The panels of one run share the bins and the x-range: the run's own, up to the ``TAIL_QUANTILE`` of its distances
    (:func:`nn_distance_range`), so that its histograms fill the panels whatever the other runs' distances and its
    own longest few; ``x_range`` imposes another. Distances beyond the range are counted in the last bin. The figure
    is drawn where its files are written (:func:`style.draw_figure`): its sixteen-odd panels of bars were most of the
    report's own drawing time."""
    layer = layer or run.act_meta["layers"][-1]
    low, high = x_range or nn_distance_range([run], TAIL_QUANTILE)
    draw = functools.partial(_nn_histograms_figure, run, layer, np.linspace(low, high, 41))
    path = style.draw_figure(draw, out_dir, f"nn_{run.exp}_{run.model}_{run.subset}")[0]
    scope = (f"this run's own x-range, up to the {TAIL_QUANTILE:.0%} quantile of its distances and past $2r^*$, so "
             "the axes differ between runs" if x_range is None else "one x-range")
    caption = (f"{run.label}, layer {layer}: rank-1 NN distance histograms at each subsample fraction, with the same "
               f"bins in every panel and {scope} ({low:.3g} to {high:.3g}); longer distances are counted in the last "
               f"bin, and each panel's title says how many. {_mean_median_r_star_words()}")
    return path, caption


def _nn_histograms_figure(run: Run, layer: str, bins: np.ndarray) -> Figure:
    fractions, by_fraction = _rank1(run, layer)
    n_dim = int(run.nn_summary["n_dim"].iloc[0])
    r_star = float(radius_star(n_dim))
    fig, axes = style.panels(len(fractions), panel_width=2.5, panel_height=3.0, sharex=True, sharey=True)
    n_chunks = run.nn_self["query_row"].nunique()
    for ax, fraction in zip(axes, fractions, strict=True):
        _histogram_panel(ax, by_fraction[fraction], bins, r_star, f"{round(fraction * 100)}% of {n_chunks} chunks")
    axes[0].set_ylabel("chunks")
    fig.suptitle(f"{run.exp} {run.label}, layer {layer} (n = {n_dim})")
    style.legend_outside(fig)
    return fig


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
