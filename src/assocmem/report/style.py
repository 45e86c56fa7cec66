"""The one figure style of the report: palette, fonts, reference lines, plain log ticks, legends, saving.

Every report figure goes through this module, so a new figure looks like the others with four calls::

    from assocmem.report import style

    @style.styled                                    # fonts, palette, grid, constrained layout
    def my_figure(data, out_dir: Path) -> tuple[Path, str]:
        fig, axes = style.panels(2, sharex=True)     # wraps to the page width; shared x-range
        axes[0].plot(data.x, data.y, label="measured")
        style.R_STAR.hline(axes[0], 1.0)             # a named reference line with a fixed look
        axes[0].set_yscale("log")                    # plain tick labels are applied when saving
        style.legend_outside(fig)                    # one legend below the panels, never over data
        caption = f"... {style.R_STAR.describe()}: r* ..."   # captions name lines by their real look
        return style.save_figure(fig, out_dir, "my_figure")[0], caption

Choices, each for a reader of the HTML page (about 1000 px of content width):

- Palette: Okabe & Ito (2008), designed to stay distinguishable under the common colour-vision deficiencies;
  data series never use black or vermillion, which are kept for reference lines.
- Fonts: 10 pt text on figures at most ``PAGE_WIDTH_IN`` inches wide, so text is about as large as the
  page's own small print when the PNG is scaled to the column.
- Log axes: tick labels are plain numbers ("3", "0.5"), never "3×10⁰".
- Reference lines (entropy floor, the paper's lines, r*) have one fixed colour + dash pattern each, and
  :meth:`LineStyle.describe` gives the words a caption must use for them.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from cycler import cycler  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.legend import Legend  # noqa: E402
from matplotlib.ticker import Formatter, FuncFormatter, MaxNLocator, NullLocator  # noqa: E402

from assocmem.io import atomic_path  # noqa: E402
from assocmem.report.figure_writer import write_figure  # noqa: E402

# Okabe & Ito, "Color Universal Design" (2008).
OKABE_ITO = {"black": "#000000", "orange": "#E69F00", "sky blue": "#56B4E9", "bluish green": "#009E73",
             "yellow": "#F0E442", "blue": "#0072B2", "vermillion": "#D55E00", "reddish purple": "#CC79A7"}
SERIES_COLOURS = [OKABE_ITO[name] for name in ("blue", "bluish green", "reddish purple", "orange", "sky blue",
                                               "yellow")]
SEQUENTIAL_CMAP = "viridis"  # perceptually uniform and colour-blind safe, for maps and contour plots
PAGE_WIDTH_IN = 10.0
PNG_DPI = 150

RC_PARAMS: dict[str, Any] = {
    "font.family": "DejaVu Sans",
    "font.size": 10,
    "axes.titlesize": 10.5,
    "axes.labelsize": 10,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "legend.fontsize": 9,
    "figure.titlesize": 11,
    "axes.prop_cycle": cycler(color=SERIES_COLOURS),
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "lines.linewidth": 1.6,
    "image.cmap": SEQUENTIAL_CMAP,
    "figure.constrained_layout.use": True,
    "savefig.dpi": PNG_DPI,
}


@dataclass(frozen=True)
class LineStyle:
    """A reference line with a fixed look; ``describe()`` is how captions must name it."""

    label: str
    colour_name: str
    dash_name: str
    linestyle: str | tuple[float, tuple[float, ...]]
    linewidth: float = 1.6

    @property
    def colour(self) -> str:
        return OKABE_ITO.get(self.colour_name, self.colour_name)

    def kwargs(self, label: str | None = None) -> dict[str, Any]:
        return {"color": self.colour, "linestyle": self.linestyle, "linewidth": self.linewidth,
                "label": self.label if label is None else label}

    def describe(self) -> str:
        """Caption words for this line, e.g. 'solid black line'."""
        return f"{self.dash_name} {self.colour_name} line"

    def hline(self, ax: Axes, y: float, label: str | None = None) -> Any:
        return ax.axhline(y, **self.kwargs(label))

    def vline(self, ax: Axes, x: float, label: str | None = None) -> Any:
        return ax.axvline(x, **self.kwargs(label))


EXACT_FLOOR = LineStyle("exact entropy floor", "black", "solid", "-", 2.2)
PAPER_FLOOR = LineStyle("paper's L ≈ 1", "vermillion", "dash-dot", (0, (7, 3, 1.5, 3)), 1.8)
R_STAR = LineStyle("r*", "black", "dotted", (0, (1, 2)), 1.6)
TWO_R_STAR = LineStyle("2r*", "black", "dash-dot", (0, (6, 2, 1.5, 2)), 1.6)
MEAN = LineStyle("mean", "vermillion", "solid", "-", 1.8)
MEDIAN = LineStyle("median", "vermillion", "dashed", (0, (4, 2)), 1.8)
ZERO = LineStyle("0 (total mass)", "grey", "solid", "-", 1.4)
PATTERN = LineStyle("stored pattern", "grey", "dotted", (0, (1, 2)), 1.2)
REFERENCE_LINES = {"exact_floor": EXACT_FLOOR, "paper_floor": PAPER_FLOOR, "r_star": R_STAR,
                   "two_r_star": TWO_R_STAR, "mean": MEAN, "median": MEDIAN, "zero": ZERO, "pattern": PATTERN}

# Data series that come in pairs: the same colour, told apart by dash pattern.
TRAIN_LINESTYLE, VALIDATION_LINESTYLE = "-", (0, (4, 2))
CORRECT_LINESTYLE, PRINTED_LINESTYLE = "-", (0, (4, 2))

P = ParamSpec("P")
T = TypeVar("T")


def styled(function: Callable[P, T]) -> Callable[P, T]:
    """Run a figure function under the report's rcParams (fonts, palette, grid, constrained layout)."""

    @functools.wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        with plt.rc_context(RC_PARAMS):
            return function(*args, **kwargs)

    return wrapper


def panels(n: int, *, panel_width: float = 3.6, panel_height: float = 3.0, max_columns: int | None = None,
           sharex: bool | str = False, sharey: bool | str = False) -> tuple[Figure, list[Axes]]:
    """``n`` panels in rows no wider than the page; returns the figure and the first ``n`` axes.

    Unused cells of the last row are removed. Pass ``sharex=True`` for panels that compare the same
    quantity, so they share one x-range."""
    fitting = max(1, int(PAGE_WIDTH_IN // panel_width))
    columns = max(1, min(n, fitting, max_columns or n))
    rows = math.ceil(n / columns)
    width = min(PAGE_WIDTH_IN, columns * panel_width)
    fig, grid = plt.subplots(rows, columns, figsize=(width, rows * panel_height), squeeze=False,
                             sharex=sharex, sharey=sharey)
    axes = list(grid.flat)
    for ax in axes[n:]:
        ax.remove()
    return fig, axes[:n]


def plain_number(value: float) -> str:
    """A tick label without scientific notation for the usual ranges: 0.001, 0.5, 3, 40, 2000."""
    if value == 0:
        return "0"
    if not 1e-4 <= abs(value) < 1e6:
        return f"{value:.0e}".replace("e+0", "e").replace("e-0", "e-").replace("e+", "e")
    return np.format_float_positional(float(f"{value:.3g}"), trim="-")


def _decades(axis: Any) -> float:
    low, high = sorted(axis.get_view_interval())
    return math.log10(high / low) if low > 0 else math.inf


NARROW_LOG_SPAN = 0.5
# (largest span in decades, minor-tick mantissas labelled): fewer minor labels as the axis spans more decades.
MINOR_TICK_LABELS: tuple[tuple[float, set[int]], ...] = ((0.7, set(range(2, 10))), (1.3, {2, 3, 5}), (2.0, {2, 5}))


class PlainLogFormatter(Formatter):
    """Plain tick labels on a log axis. Minor ticks are labelled only when the axis spans too few decades to
    show two major ticks, and then only at mantissas that keep labels apart (all under 0.7 decades, then 2, 3,
    5, then 2, 5 under two decades)."""

    def __init__(self, minor: bool) -> None:
        self.minor = minor

    def __call__(self, value: float, pos: int | None = None) -> str:
        if value <= 0 or not math.isfinite(value):
            return ""
        if self.minor:
            decades = _decades(self.axis) if self.axis is not None else math.inf
            mantissa = round(value / 10 ** math.floor(math.log10(value)), 6)
            keep = next((marks for span, marks in MINOR_TICK_LABELS if decades < span), set())
            if mantissa not in keep:
                return ""
        return plain_number(value)


def plain_log_ticks(ax: Axes) -> None:
    """Replace the '3×10⁰' labels of every log-scaled axis of ``ax`` with plain numbers. Call it once the
    limits are final (``save_figure`` does): an axis spanning under ``NARROW_LOG_SPAN`` decades may hold no
    power-of-ten or integer-mantissa tick at all, so it gets evenly spaced ticks instead."""
    for axis, scale in ((ax.xaxis, ax.get_xscale()), (ax.yaxis, ax.get_yscale())):
        if scale != "log":
            continue
        if _decades(axis) < NARROW_LOG_SPAN:
            axis.set_major_locator(MaxNLocator(nbins=4))
            axis.set_minor_locator(NullLocator())
            axis.set_major_formatter(FuncFormatter(lambda value, _pos: plain_number(value)))
        else:
            axis.set_major_formatter(PlainLogFormatter(minor=False))
            axis.set_minor_formatter(PlainLogFormatter(minor=True))


def legend_outside(fig: Figure, axes: Sequence[Axes] | None = None, *, columns: int | None = None,
                   title: str | None = None) -> Legend | None:
    """One legend for the whole figure, below the panels (outside every data area).

    Entries with the same label on several panels appear once. Needs the constrained layout that
    :func:`styled` switches on, which reserves room for it."""
    handles: dict[str, Any] = {}
    for ax in axes if axes is not None else fig.axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            if not label.startswith("_"):
                handles.setdefault(label, handle)
    if not handles:
        return None
    ncol = columns or legend_columns(list(handles), fig.get_figwidth())
    return fig.legend(list(handles.values()), list(handles.keys()), loc="outside lower center", ncol=ncol,
                      frameon=False, title=title)


def legend_columns(labels: Sequence[str], width_in: float) -> int:
    """As many columns as fit the figure width, then balanced so the rows are as full as possible (matplotlib
    fills a legend column by column, so pairs such as train/validation stay together)."""
    entry_in = 0.5 + 0.075 * float(np.mean([len(label) for label in labels]))
    fitting = max(1, min(len(labels), int(width_in // entry_in)))
    rows = math.ceil(len(labels) / fitting)
    return math.ceil(len(labels) / rows)


def shared_range(values: Sequence[float], *, pad: float = 0.03, include_zero: bool = False) -> tuple[float, float]:
    """A padded (low, high) covering every finite value: one x-range for panels or figures that compare."""
    finite = np.asarray([v for v in values if math.isfinite(v)], dtype=float)
    if finite.size == 0:
        return (0.0, 1.0)
    low, high = float(finite.min()), float(finite.max())
    if include_zero:
        low, high = min(low, 0.0), max(high, 0.0)
    span = (high - low) or max(abs(high), 1.0)
    return (low - pad * span if not (include_zero and low == 0) else 0.0, high + pad * span)


def _write_figure_files(fig: Figure, paths: list[Path]) -> None:
    with plt.rc_context(RC_PARAMS):  # ticks and grid lines are created at draw time, from the rcParams then
        for dest in paths:
            with atomic_path(dest) as tmp:
                # no creation date in the PDF: the same data give byte-identical figures
                metadata = {"CreationDate": None} if dest.suffix == ".pdf" else None
                fig.savefig(tmp, format=dest.suffix[1:], dpi=PNG_DPI, bbox_inches="tight", pad_inches=0.05,
                            metadata=metadata)


def _figure_paths(out_dir: Path, name: str) -> list[Path]:
    return [Path(out_dir) / f"{name}.{ext}" for ext in ("png", "pdf")]


def save_figure(fig: Figure, out_dir: Path, name: str) -> list[Path]:
    """Write ``name``.png and ``name``.pdf atomically (plain log ticks applied first) and close the figure; inside
    :func:`assocmem.report.figure_writer.parallel_figures` a forked process writes them."""
    for ax in fig.axes:
        plain_log_ticks(ax)
    paths = _figure_paths(out_dir, name)
    write_figure(name, functools.partial(_write_figure_files, fig, paths))
    plt.close(fig)
    return paths


def draw_figure(draw: Callable[[], Figure], out_dir: Path, name: str) -> list[Path]:
    """:func:`save_figure` of the figure ``draw`` returns (drawn under the report's rcParams), for a figure whose
    drawing costs as much as its files: inside :func:`assocmem.report.figure_writer.parallel_figures` the forked
    process draws it as well, so the report's own process does neither."""
    paths = _figure_paths(out_dir, name)

    def write() -> None:
        with plt.rc_context(RC_PARAMS):
            fig = draw()
        for ax in fig.axes:
            plain_log_ticks(ax)
        _write_figure_files(fig, paths)
        plt.close(fig)

    write_figure(name, write)
    return paths
