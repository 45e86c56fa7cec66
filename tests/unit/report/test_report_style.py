"""The report's figure style: palette, plain log ticks, legends outside the data, shared ranges, captions."""

from __future__ import annotations

import itertools
import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from assocmem.report import figures, style
from assocmem.report.artifacts import Experiment, Run

# Machado, Oliveira & Fernandes (2009), severity 1.0, applied to linear RGB.
CVD_MATRICES = {
    "protanopia": [[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216],
                   [-0.003882, -0.048116, 1.051998]],
    "deuteranopia": [[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413],
                     [-0.011820, 0.042940, 0.968881]],
    "tritanopia": [[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602],
                   [0.004733, 0.691367, 0.303900]],
}
DISTINCT_AT_A_GLANCE = 10.0  # CIE76 colour difference; about 2.3 is just noticeable


def _linear_rgb(hex_colour: str) -> np.ndarray:
    srgb = np.array([int(hex_colour[i:i + 2], 16) / 255 for i in (1, 3, 5)])
    return np.where(srgb <= 0.04045, srgb / 12.92, ((srgb + 0.055) / 1.055) ** 2.4)


def _lab(linear: np.ndarray) -> np.ndarray:
    to_xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]])
    xyz = to_xyz @ np.clip(linear, 0, 1) / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > 0.008856, np.cbrt(xyz), 7.787 * xyz + 16 / 116)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


@pytest.mark.parametrize("vision", ["normal", *CVD_MATRICES])
def test_series_colours_stay_distinct_under_colour_vision_deficiencies(vision):
    matrix = np.eye(3) if vision == "normal" else np.array(CVD_MATRICES[vision])
    labs = [_lab(matrix @ _linear_rgb(colour)) for colour in style.SERIES_COLOURS]
    closest = min(np.linalg.norm(a - b) for a, b in itertools.combinations(labs, 2))
    assert closest > DISTINCT_AT_A_GLANCE, f"{vision}: two series colours differ by only {closest:.1f} (CIE76)"


def test_reference_lines_look_different_and_are_described_by_their_look():
    looks = [(line.colour, str(line.linestyle)) for line in style.REFERENCE_LINES.values()]
    assert len(set(looks)) == len(looks)
    assert style.EXACT_FLOOR.describe() == "solid black line"
    assert style.PAPER_FLOOR.describe() == "dash-dot vermillion line"
    for line in style.REFERENCE_LINES.values():
        assert line.colour_name in line.describe() and line.dash_name in line.describe()
    assert style.PAPER_FLOOR.colour not in style.SERIES_COLOURS and style.EXACT_FLOOR.colour not in style.SERIES_COLOURS


@given(st.floats(min_value=1e-4, max_value=9.99e5))
def test_plain_numbers_never_use_powers_of_ten(value):
    label = style.plain_number(value)
    assert "×" not in label and "^" not in label and "e" not in label
    assert math.isclose(float(label), value, rel_tol=5e-3)


@given(st.floats(min_value=1e-3, max_value=1e3), st.floats(min_value=0.05, max_value=3.0))
@settings(max_examples=25, deadline=None)
def test_log_axis_labels_are_plain_and_present(low, decades):
    fig, ax = plt.subplots()
    ax.plot([low, low * 10**decades], [1, 2])
    ax.set_xscale("log")
    ax.set_xlim(low, low * 10**decades)
    style.plain_log_ticks(ax)
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_xticklabels(minor=False) + ax.get_xticklabels(minor=True)]
    shown = [label for label in labels if label]
    plt.close(fig)
    assert all("×" not in label and "$" not in label and "^" not in label for label in labels)
    visible = [float(label) for label in shown if low <= float(label) <= low * 10**decades]
    assert len(visible) >= 2


def test_legend_outside_sits_below_every_panel(tmp_path):
    @style.styled
    def draw():
        fig, axes = style.panels(2, sharex=True)
        for ax in axes:
            ax.plot([0, 1], [0, 1], label="a long series label")
            style.EXACT_FLOOR.hline(ax, 0.5)
        return fig, style.legend_outside(fig)

    fig, legend = draw()
    fig.canvas.draw()
    legend_box = legend.get_window_extent()
    for ax in fig.axes:
        assert not legend_box.overlaps(ax.get_window_extent())
    assert len(legend.get_texts()) == 2  # each label once although both panels have it
    png, pdf = style.save_figure(fig, tmp_path, "legend")
    assert png.stat().st_size > 0 and pdf.stat().st_size > 0 and not list(tmp_path.glob(".*tmp*"))


def test_panels_wrap_to_the_page_width():
    fig, axes = style.panels(4, panel_width=3.0)
    assert len(axes) == 4 and fig.get_figwidth() <= style.PAGE_WIDTH_IN
    assert len(fig.axes) == 4  # the unused cell of the 3 + 1 grid is removed
    plt.close(fig)


@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=20))
def test_shared_range_covers_every_value(values):
    low, high = style.shared_range(values)
    assert low <= min(values) and high >= max(values) and low < high


def test_legend_columns_fill_rows_evenly():
    assert style.legend_columns(["a", "b", "c", "d", "e", "f"], 5.0) in (2, 3, 6)
    assert style.legend_columns(["x"] * 7, 100.0) == 7
    assert style.legend_columns(["a very long legend label indeed"] * 4, 3.0) == 1


# ------------------------------------------------------------------------------ the report's figures


def _run(model: str, subset: str, fraction: float, offset: float) -> Run:
    rng = np.random.default_rng(len(subset))
    steps = np.arange(20, 101, 20)
    metrics = pd.DataFrame({"step": steps, "train_loss": 3.0 - steps / 60 + offset, "train_eval_ce": 2.9 - steps / 60,
                            "val_ce": 3.0 - steps / 70 + offset})
    nn_self = pd.DataFrame([{"fraction": f, "query_row": q, "rank": 1, "neighbour_row": 0,
                             "distance": float(rng.gamma(4, 0.3 / f)), "layer": layer}
                            for f in (0.5, 1.0) for q in range(40) for layer in ("emb", "final_ln")])
    summary = pd.DataFrame([{"protocol": p, "layer": layer, "fraction": 1.0, "mean": 1.0 + offset, "median": 1.0,
                             "n_dim": 32} for p in ("self", "heldout") for layer in ("emb", "final_ln")])
    return Run(exp="qf", model=model, subset=subset, fraction=fraction, metrics=metrics, summary={},
               act_meta={"layers": ["emb", "final_ln"]}, act_dir=None, nn_summary=summary, nn_self=nn_self,
               nn_heldout=nn_self, radius=pd.DataFrame(), radius_meta={}, eval_rows=None)


@pytest.fixture
def experiment() -> Experiment:
    runs = [_run(model, subset, fraction, offset) for model in ("L1", "L4")
            for subset, fraction, offset in (("pct100", 1.0, 0.0), ("pct10", 0.1, 0.3))]
    return Experiment(name="qf", config={}, token_meta={}, source={},
                      floor={"train": {"floor_nats_per_token": 0.9962}}, runs=runs)


def _legend_clear_of_data(png_figure) -> None:
    fig = png_figure
    fig.canvas.draw()
    legend = fig.legends[0].get_window_extent()
    assert all(not legend.overlaps(ax.get_window_extent()) for ax in fig.axes)


def test_training_curves_caption_names_both_horizontal_lines(experiment, tmp_path, monkeypatch):
    drawn = []
    monkeypatch.setattr(figures, "save_figure", lambda fig, out, name: drawn.append(fig) or [out / f"{name}.png"])
    path, caption = figures.training_curves(experiment, tmp_path)
    assert path.name == "training_curves_qf.png"
    assert f"{style.EXACT_FLOOR.describe()}: exact entropy floor" in caption and "0.9962" in caption
    assert f"{style.PAPER_FLOOR.describe()}: the paper's floor" in caption
    assert "grey" not in caption and "red" not in caption
    fig = drawn[0]
    _legend_clear_of_data(fig)
    left, right = fig.axes[0], fig.axes[1]
    assert left.get_xlim() == right.get_xlim() and left.get_ylim() == right.get_ylim()
    for ax in fig.axes:
        style.plain_log_ticks(ax)
    fig.canvas.draw()
    labels = [t.get_text() for t in left.get_yticklabels() + left.get_yticklabels(minor=True)]
    assert any(labels) and not any("×" in label or "$" in label for label in labels)
    lines = {line.get_label(): line for line in left.get_lines()}
    floor, paper = lines["exact entropy floor 0.9962 (loss incl. <eos>)"], lines[style.PAPER_FLOOR.label]
    assert (floor.get_color(), floor.get_linestyle()) != (paper.get_color(), paper.get_linestyle())
    plt.close(fig)


def _converged(run: Run, floor: float, end: float) -> Run:
    """``run`` with curves that fall from 3 to ``end`` (train) and ``end`` + 0.004 (validation) near ``floor``."""
    steps = run.metrics["step"].to_numpy()
    fall = np.exp(-(steps - steps[0]) / 15.0)
    train = end + (3 - end) * fall
    metrics = pd.DataFrame({"step": steps, "train_loss": train, "train_eval_ce": train, "val_ce": train + 0.004})
    return Run(**{**run.__dict__, "metrics": metrics})


def _drawn_training_curves(experiment, tmp_path, monkeypatch):
    drawn = []
    monkeypatch.setattr(figures, "save_figure", lambda fig, out, name: drawn.append(fig) or [out / f"{name}.png"])
    _, caption = figures.training_curves(experiment, tmp_path)
    return drawn[0], caption


def test_training_curves_zoom_on_the_floor_shows_the_floor_and_1_apart(experiment, tmp_path, monkeypatch):
    """Issue 29: on the log axis the floor (0.9917 in the default run) and the paper's 1 are one line; the zoom panel
    (linear) holds both, the converged curves' ends, and puts them a visible fraction of the axis apart."""
    floor = 0.9917
    runs = [_converged(run, floor, floor + 0.001) if run.subset == "pct100" else run for run in experiment.runs]
    exp = Experiment(**{**experiment.__dict__, "runs": runs, "floor": {"train": {"floor_nats_per_token": floor}}})
    fig, caption = _drawn_training_curves(exp, tmp_path, monkeypatch)
    zooms = [ax for ax in fig.axes if ax.get_label() == figures.FLOOR_ZOOM]
    assert len(zooms) == 2 and all(ax.get_yscale() == "linear" for ax in zooms)
    low, high = zooms[0].get_ylim()
    assert low < floor < 1.0 < high and (1.0 - floor) / (high - low) > 0.15
    ends = [float(run.metrics[c].iloc[-1]) for run in runs if run.subset == "pct100" for c in ("train_loss", "val_ce")]
    assert all(low < end < high for end in ends)
    assert zooms[0].get_ylim() == zooms[1].get_ylim() and "bottom row" in caption
    assert f"1 are {(1.0 - floor) / (high - low):.0%} of the axis apart" in caption
    texts = {t.get_text() for ax in zooms for t in ax.texts}
    assert {"exact floor 0.9917", "paper's L = 1"} <= texts and "no curve ends inside this range" not in texts
    plt.close(fig)


def test_floor_zoom_limits_ignore_curves_far_from_the_floor():
    assert figures.floor_zoom_limits(0.9917, [0.45, 2.05]) == pytest.approx((0.9817, 1.02))
    low, high = figures.floor_zoom_limits(0.9917, [0.985, 1.03, 1.8])
    assert low == pytest.approx(0.975) and high == pytest.approx(1.05)
    assert figures.floor_zoom_limits(1.2, [1.25]) == pytest.approx((0.99, 1.27))  # a floor above 1: 1 still shown


def test_a_zoom_no_curve_reaches_says_so(experiment, tmp_path, monkeypatch):
    fig, _ = _drawn_training_curves(experiment, tmp_path, monkeypatch)  # curves end at 1.3 and above
    zooms = [ax for ax in fig.axes if ax.get_label() == figures.FLOOR_ZOOM]
    assert all("no curve ends inside this range" in {t.get_text() for t in ax.texts} for ax in zooms)
    plt.close(fig)


def test_training_curves_without_a_floor_have_no_zoom(experiment, tmp_path, monkeypatch):
    exp = Experiment(**{**experiment.__dict__, "floor": None})
    fig, caption = _drawn_training_curves(exp, tmp_path, monkeypatch)
    assert len(fig.axes) == 2 and not any(ax.get_label() == figures.FLOOR_ZOOM for ax in fig.axes)
    assert "bottom row" not in caption
    plt.close(fig)


def _scaled(run: Run, scale: float, outliers: int = 0) -> Run:
    """``run`` with its NN distances times ``scale`` and its first ``outliers`` rank-1 distances made 20x longer."""
    nn_self = run.nn_self.assign(distance=run.nn_self["distance"] * scale)
    nn_self.loc[nn_self.index[:outliers], "distance"] *= 20
    return Run(**{**run.__dict__, "nn_self": nn_self})


def test_nn_histograms_fill_each_runs_own_panels(experiment, tmp_path, monkeypatch):
    """Issue 29: a full-data run's distances (here 0-3) are not squeezed into another run's range (0-60); a few long
    distances neither: the run's x-range ends at the 99% quantile and the longer ones are counted in the last bin."""
    drawn = []
    monkeypatch.setattr(figures.style, "draw_figure",
                        lambda draw, out, name: drawn.append(draw()) or [out / f"{name}.png"])
    small, large = _scaled(experiment.runs[0], 1.0, outliers=2), _scaled(experiment.runs[1], 20.0)
    (_, caption_small), (_, caption_large) = (figures.nn_histograms(run, tmp_path) for run in (small, large))
    assert "axes differ between runs" in caption_small
    for fig, run in zip(drawn, (small, large), strict=True):
        frame = run.nn_self[(run.nn_self["rank"] == 1) & (run.nn_self["layer"] == "final_ln")]
        bulk = float(frame["distance"].quantile(0.99))
        two_r_star = 2 * figures.radius_star(32)
        for ax in fig.axes:
            low, high = ax.get_xlim()
            assert low == 0 and bulk <= high <= 1.1 * max(bulk, two_r_star)
            counts = sum(patch.get_height() for patch in ax.patches)
            assert counts == len(frame) / 2  # every distance counted, the long ones in the last bin
    assert drawn[0].axes[0].get_xlim()[1] < drawn[1].axes[0].get_xlim()[1] / 5
    assert "beyond" in drawn[0].axes[0].get_title() or "beyond" in drawn[0].axes[1].get_title()
    for fig in drawn:
        plt.close(fig)


def test_nn_histograms_take_a_given_range(experiment, tmp_path):
    x_range = figures.nn_distance_range(experiment.runs)
    path, caption = figures.nn_histograms(experiment.runs[0], tmp_path, x_range)
    assert path.exists() and path.with_suffix(".pdf").exists()
    assert style.R_STAR.describe() in caption and style.TWO_R_STAR.describe() in caption
    longest = max(float(run.nn_self["distance"].max()) for run in experiment.runs)
    assert x_range[0] <= 0 and x_range[1] >= longest


def test_nn_by_layer_and_theory_figures_render(experiment, tmp_path):
    path, caption = figures.nn_by_layer(experiment, tmp_path)
    assert path.exists() and "$r^*" in caption
    fig, caption = figures.fig1_landscapes(num=21)
    _legend_clear_of_data(fig)
    assert style.PATTERN.describe() in caption
    plt.close(fig)
    fig, caption = figures.eq12_ball_integral(radii=np.linspace(1, 30, 7))
    _legend_clear_of_data(fig)
    assert style.ZERO.describe().capitalize() in caption
    plt.close(fig)
