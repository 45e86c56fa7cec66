"""The scaling sweep in the report: its cells, the analyses of :mod:`assocmem.report.scaling_fit` and their figures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from assocmem.config import run_settings
from assocmem.report import scaling_fit as scaling
from assocmem.report import style
from assocmem.report.artifacts import Experiment, SweepRun
from assocmem.report.render import Section, markdown_table

LAST_EVALS = 5  # evaluations whose spread measures the noise of a converged run's validation CE


def budget_limited(summary: dict[str, Any], train: dict[str, Any]) -> bool:
    """True when the step budget ended the run before its early-stopping rule was met: fewer than ``patience``
    evaluations since the best one (without early stopping: the best was the last evaluation). Such a run's
    best validation CE is only an upper bound on what its cell reaches."""
    since_best = int(summary["steps"]) - int(summary["best_step"])
    patience = train.get("early_stopping_patience")
    if patience is None:
        return since_best == 0
    return since_best < patience * int(train["eval_interval"])


def cell_row(run: SweepRun, train: dict[str, Any]) -> dict[str, Any]:
    metrics, summary = run.metrics, run.summary
    best = int(metrics["val_ce"].idxmin())
    return {"model": run.model, "seed": run.replicate, "subset": run.subset, "fraction": run.fraction,
            "n_params": summary["n_params"], "n_tokens": summary["subset"]["n_tokens"],
            "val_ce": float(metrics["val_ce"].iloc[best]), "final_val_ce": float(metrics["val_ce"].iloc[-1]),
            "train_ce": float(metrics["train_eval_ce"].iloc[best]), "best_step": int(metrics["step"].iloc[best]),
            "steps": int(summary["steps"]), "stopped_early": bool(summary.get("stopped_early", False)),
            "budget_limited": budget_limited(summary, train),
            "late_spread": float(metrics["val_ce"].iloc[-LAST_EVALS:].std(ddof=1)) if len(metrics) > 2 else np.nan}


def sweep_cells(exp: Experiment) -> pd.DataFrame:
    return pd.DataFrame([cell_row(run, run_settings(exp.config, run.model)[1]) for run in exp.sweep_runs])


def measured_noise(cells: pd.DataFrame) -> tuple[dict[float, float], str]:
    """The noise of one run's validation CE at each D (the comparisons it calibrates, boundary tolerance and
    inverted U, are between the cells of one D, and a memorising small-D run is far noisier than a full-data one):
    the standard deviation over seeds pooled over the cells of that D when there are several seeds, else the
    median spread of the last evaluations of the runs at that D. Budget-limited runs are left out where a D has
    cells without them: how far a still-improving run got is not the noise of a converged cell's CE."""
    usable = cells
    if "budget_limited" in cells.columns:
        open_cells = cells.groupby(["n_tokens", "n_params"])["budget_limited"].transform("any").astype(bool)
        has_closed = (~open_cells).groupby(cells["n_tokens"]).transform("any")
        usable = cells[~open_cells | ~has_closed]
    if cells["seed"].nunique() > 1:
        within = usable.groupby(["n_tokens", "n_params"])["val_ce"].var(ddof=1)
        noise = within.groupby(level="n_tokens").mean() ** 0.5
        source = ("standard deviation of the best validation CE over seeds, pooled over the cells of each D whose "
                  "runs all met their early-stopping rule")
    else:
        noise = usable.groupby("n_tokens")["late_spread"].median()
        source = f"median standard deviation of the validation CE over each run's last {LAST_EVALS} evaluations"
    return {d: float(v) for d, v in noise.items()}, source


def analyse_sweep(exp: Experiment, seed: int) -> dict[str, Any]:
    cells = sweep_cells(exp)
    noise, noise_source = measured_noise(cells)
    config = exp.config["sweep"]
    tolerance = config["tolerance"] or scaling.scaled(noise, 2.0)
    result = scaling.analyse(cells, tolerance=tolerance, noise=noise, n_boot=config["n_boot"], seed=seed)
    result.update(noise_source=noise_source, tolerance_source="config" if config["tolerance"] else "2 x noise",
                  n_cells=int(len(cells.groupby(["n_params", "n_tokens"]))), n_runs=len(cells),
                  n_params_span=float(cells["n_params"].max() / cells["n_params"].min()),
                  n_tokens_span=float(cells["n_tokens"].max() / cells["n_tokens"].min()),
                  sensitivity={f"x{factor:g}": scaling.fit_boundary(
                      scaling.boundary_points(cells, scaling.scaled(tolerance, factor)))["slope"]
                      for factor in (0.5, 2.0)},
                  cells=cells.to_dict(orient="records"))
    return result


@style.styled
def heatmap(cells: pd.DataFrame, floor: float | None, out_dir: Path, name: str) -> tuple[Path, str]:
    means = scaling.cell_means(cells).pivot(index="n_params", columns="n_tokens", values="val_ce")
    fig, (ax,) = style.panels(1, panel_width=6.5, panel_height=4.2)
    limited = set(map(tuple, scaling.budget_limited_cells(cells).to_numpy().tolist()))
    image = ax.imshow(means.to_numpy(), origin="lower", aspect="auto", cmap=style.SEQUENTIAL_CMAP)
    for (i, j), value in np.ndenumerate(means.to_numpy()):
        text = f"{value:.3f}" if floor is None else f"{value:.3f}\n({value - floor:+.3f})"
        if (means.index[i], means.columns[j]) in limited:
            text += "*"
        red, green, blue, _ = image.cmap(image.norm(value))
        dark = 0.299 * red + 0.587 * green + 0.114 * blue < 0.5  # white text on the dark end of the map
        ax.text(j, i, text, ha="center", va="center", fontsize=7, color="white" if dark else "black")
    ax.grid(False)
    ax.set_xticks(range(means.shape[1]), [style.plain_number(d) for d in means.columns], rotation=30)
    ax.set_yticks(range(means.shape[0]), [style.plain_number(n) for n in means.index])
    ax.set_xlabel("training tokens D")
    ax.set_ylabel("parameters N")
    bar = fig.colorbar(image, ax=ax, label="best validation CE (nats/token)")
    if floor is not None:
        style.EXACT_FLOOR.hline(bar.ax, floor)
    caption = ("Best validation cross-entropy of every cell (seed mean); in brackets its distance to the exact "
               "entropy floor of the data" + (f" ({floor:.4f}, the {style.EXACT_FLOOR.describe()} on the colour "
                                              "bar)." if floor is not None else ".")
               + (f" *: {len(limited)} cell(s) where a seed reached its step budget still improving (its value is "
                  "an upper bound)." if limited else ""))
    return style.save_figure(fig, out_dir, name)[0], caption


@style.styled
def boundary_plot(analysis: dict[str, Any], out_dir: Path, name: str) -> tuple[Path, str]:
    points = pd.DataFrame(analysis["boundary_points"])
    fig, (ax,) = style.panels(1, panel_width=6.0, panel_height=4.0)
    colours = style.SERIES_COLOURS
    ax.scatter(points["n_tokens"], points["n_boundary"], color=colours[0], zorder=3, label="boundary N at each D")
    edge = points[points["at_grid_edge"]]
    if len(edge):
        ax.scatter(edge["n_tokens"], edge["n_boundary"], facecolor="none", edgecolor=colours[3], s=120, zorder=4,
                   label="boundary at the largest N (censored)")
    d = np.geomspace(points["n_tokens"].min(), points["n_tokens"].max(), 50)
    fit = analysis["boundary"]
    if np.isfinite(fit["slope"]):
        ax.plot(d, np.exp(fit["intercept"]) * d ** fit["slope"], color=colours[0],
                label=f"fit: slope b = {fit['slope']:.2f}")
        centre = np.exp(np.mean(np.log(points["n_tokens"]))), np.exp(np.mean(np.log(points["n_boundary"])))
        ax.plot(d, centre[1] * (d / centre[0]) ** 2, **style.PAPER_FLOOR.kwargs("the paper's b = 2 (same centre)"))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("training tokens D")
    ax.set_ylabel("smallest sufficient N")
    style.legend_outside(fig)
    low, high = analysis["boundary_slope_ci"]
    caption = (f"For each D, the smallest model whose validation CE is within "
               f"{scaling.describe(analysis['tolerance'], 3)} nats of the best at that D, with the fitted line "
               f"(slope {fit['slope']:.2f}, {100 * analysis['level']:.0f}% "
               f"bootstrap CI [{low:.2f}, {high:.2f}]) and, as the {style.PAPER_FLOOR.describe()}, the slope 2 of "
               "N = O(D^2) through the same centre. Circled points sit at the largest model of the grid: the true "
               "boundary may lie beyond it.")
    return style.save_figure(fig, out_dir, name)[0], caption


@style.styled
def parametric_plot(cells: pd.DataFrame, analysis: dict[str, Any], floor: float | None, out_dir: Path,
                    name: str) -> tuple[Path, str]:
    fit = scaling.ParametricFit(**analysis["parametric"])
    means = scaling.cell_means(cells)
    fig, (ax,) = style.panels(1, panel_width=6.5, panel_height=4.2)
    d = np.geomspace(means["n_tokens"].min(), means["n_tokens"].max(), 60)
    for colour, (n_params, group) in zip(style.SERIES_COLOURS, means.groupby("n_params"), strict=False):
        ax.scatter(group["n_tokens"], group["val_ce"], color=colour, s=18, zorder=3)
        ax.plot(d, fit.predict(np.full_like(d, n_params), d), color=colour, label=f"N = {style.plain_number(n_params)}")
    low, high = analysis["E_ci"]
    ax.axhspan(low, high, color="grey", alpha=0.2, label=f"fitted E = {fit.E:.3f}, CI [{low:.3f}, {high:.3f}]")
    if floor is not None:
        style.EXACT_FLOOR.hline(ax, floor, label=f"exact entropy floor {floor:.4f}")
    style.PAPER_FLOOR.hline(ax, 1.0)
    ax.set_xscale("log")
    ax.set_xlabel("training tokens D")
    ax.set_ylabel("best validation CE (nats/token)")
    style.legend_outside(fig)
    caption = (f"Parametric fit L(N, D) = E + A/N^alpha + B/D^beta (Hoffmann et al. 2022, approach 3; lines) against "
               f"the cells (points): E = {fit.E:.3f}, alpha = {fit.alpha:.2f}, beta = {fit.beta:.2f}. Grey band: "
               f"the bootstrap CI of E; {style.EXACT_FLOOR.describe()}: the exact entropy floor of the data; "
               f"{style.PAPER_FLOOR.describe()}: the paper's L = 1.")
    return style.save_figure(fig, out_dir, name)[0], caption


def budget_paragraph(analysis: dict[str, Any]) -> str:
    """What the runs that hit their step budget leave open (scaling.analyse's bracket and converged-only fit)."""
    limited = analysis["budget_limited_cells"]
    if not limited:
        return ("**Budget.** Every run met its early-stopping rule (its validation CE had stopped improving): no "
                "cell is limited by the step budget.")
    n_runs = analysis["n_runs"] - analysis["converged_runs"]
    bracket, bracket_ci = analysis["boundary_slope_bracket"], analysis["boundary_slope_bracket_ci"]
    text = (f"**Budget.** {n_runs} run(s) in {len(limited)} cell(s) reached the step budget before their "
            "early-stopping rule was met; their best validation CE is an upper bound. Letting each of them move the "
            "boundary as far as it could "
            f"(into or out of the tolerance), b lies between {bracket['low']:.3f} (CI [{bracket_ci['low'][0]:.3f}, "
            f"{bracket_ci['low'][1]:.3f}]) and {bracket['high']:.3f} (CI [{bracket_ci['high'][0]:.3f}, "
            f"{bracket_ci['high'][1]:.3f}]). ")
    converged = analysis["parametric_converged"]
    if converged is None:
        return text + "Too few runs met it to fit E on them alone."
    e_low, e_high = analysis["E_converged_ci"]
    return text + (f"E fitted on the {analysis['converged_runs']} runs that met it: {converged['E']:.4f}, CI "
                   f"[{e_low:.4f}, {e_high:.4f}] (the estimate the loss-floor verdict uses).")


def sweep_section(exp: Experiment, analysis: dict[str, Any], floor: float | None, fig_dir: Path) -> Section:
    cells = pd.DataFrame(analysis["cells"])
    section = Section(f"Scaling sweep: {exp.name}", toc_label=f"Scaling sweep: {exp.name}")
    low, high = analysis["boundary_slope_ci"]
    e_low, e_high = analysis["E_ci"]
    section.paragraphs.append(
        f"{analysis['n_cells']} cells ({cells['model'].nunique()} model sizes spanning "
        f"{analysis['n_params_span']:.0f}x in N, {cells['subset'].nunique()} training-set sizes spanning "
        f"{analysis['n_tokens_span']:.0f}x in D), {analysis['n_runs']} runs. Every run trains until its validation "
        f"CE stops improving (early stopping, patience {exp.config['train']['early_stopping_patience']} "
        f"evaluations) or its budget of {exp.config['train']['max_steps']} steps. Noise of one cell: "
        f"{scaling.describe(analysis['noise'])} nats ({analysis['noise_source']}); boundary tolerance "
        f"{scaling.describe(analysis['tolerance'])} "
        f"nats ({analysis['tolerance_source']}). Intervals: {100 * analysis['level']:.0f}% percentile bootstrap over "
        f"{analysis['n_boot']} replicates (seeds within cells, then cells or boundary points).")
    section.paragraphs.append(
        f"**Boundary exponent** b = {analysis['boundary']['slope']:.3f}, CI [{low:.3f}, {high:.3f}] "
        "(the paper: b = 2). "
        f"With half / twice the tolerance: {analysis['sensitivity']['x0.5']:.3f} / "
        f"{analysis['sensitivity']['x2']:.3f}. **Irreducible loss** E = {analysis['parametric']['E']:.4f}, CI "
        f"[{e_low:.4f}, {e_high:.4f}]" + (f" against the exact floor {floor:.4f}" if floor is not None else "")
        + " and the paper's 1.")
    if floor is not None and not e_low <= floor <= e_high:
        section.paragraphs.append(
            f"The interval of E excludes the exact entropy floor {floor:.4f}, which no model can beat in "
            "expectation: the parametric law does not describe this grid (for example its memorising small-D "
            "cells), so its E is not an estimate of the irreducible loss here.")
    section.paragraphs.append(budget_paragraph(analysis))
    u_shape = pd.DataFrame(analysis["inverted_u"])
    section.tables.append(markdown_table(
        ["D (tokens)", "best N", "best val CE (nats/token)", "largest N's val CE (nats/token)", "rise (nats)",
         "minimum inside the grid", "noise at this D (nats)", "rise > noise"],
        u_shape[["n_tokens", "n_best", "best_val_ce", "largest_val_ce", "rise", "interior_minimum", "noise", "rises"]]
        .values.tolist()))
    points = pd.DataFrame(analysis["boundary_points"])
    section.tables.append(markdown_table(
        ["D (tokens)", "boundary N", "tolerance (nats)", "best val CE (nats/token)", "at the largest N (censored)",
         "budget-limited cells", "boundary range they leave"],
        [[row.n_tokens, row.n_boundary, row.tolerance, row.best_val_ce, row.at_grid_edge, row.budget_limited_cells,
          f"{row.n_low:g}-{row.n_high:g}"] for row in points.itertuples()]))
    section.details.append(markdown_table(
        ["model", "seed", "subset", "N", "D (tokens)", "best val CE (nats/token)", "train CE at best (nats/token)",
         "final val CE (nats/token)", "best step", "steps", "stopped early", "budget-limited"],
        cells[["model", "seed", "subset", "n_params", "n_tokens", "val_ce", "train_ce", "final_val_ce", "best_step",
               "steps", "stopped_early", "budget_limited"]].values.tolist()))
    for make in (lambda: heatmap(cells, floor, fig_dir, f"sweep_heatmap_{exp.name}"),
                 lambda: boundary_plot(analysis, fig_dir, f"sweep_boundary_{exp.name}"),
                 lambda: parametric_plot(cells, analysis, floor, fig_dir, f"sweep_parametric_{exp.name}")):
        section.figures.append(make())
    return section
