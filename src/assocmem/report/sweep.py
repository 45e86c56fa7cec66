"""The scaling sweep in the report: the sweep stage's analyses (:mod:`assocmem.sweep.analysis`), their tables and
figures. Nothing here fits or simulates: the numbers are the sweep job's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from assocmem.report import style
from assocmem.report.artifacts import Experiment
from assocmem.report.render import Section, markdown_table
from assocmem.sweep import boundary as bd
from assocmem.sweep import laws as scaling
from assocmem.sweep.cells import LAST_EVALS


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
    parametric = analysis["parametric_boundary"]
    fig, (ax,) = style.panels(1, panel_width=6.0, panel_height=4.0)
    colours = style.SERIES_COLOURS
    ax.scatter(points["n_tokens"], points["n_boundary"], color=colours[0], zorder=3,
               label="threshold boundary N at each D")
    for column, colour, text in (("at_grid_edge", colours[3], "at the largest N (censored above)"),
                                 ("at_smallest_n", colours[2], "at the smallest N (censored below)")):
        edge = points[points[column]]
        if len(edge):
            ax.scatter(edge["n_tokens"], edge["n_boundary"], facecolor="none", edgecolor=colour, s=120, zorder=4,
                       label=text)
    d = np.sort(points["n_tokens"].to_numpy(float))
    fit = parametric["fit"]
    if fit is not None:
        ax.plot(d, parametric["n_boundary"], color=colours[1], marker="s", label=(
            f"parametric N_b(D): b = {fit['b']:.2f}, CI [{fit['b_low']:.2f}, {fit['b_high']:.2f}]"))
    n_range = (float(pd.DataFrame(analysis["cells"])["n_params"].min()),
               float(pd.DataFrame(analysis["cells"])["n_params"].max()))
    ax.axhspan(*n_range, color="grey", alpha=0.12, label="the grid's N range")
    centre = np.exp(np.mean(np.log(d))), np.exp(np.mean(np.log(n_range)))
    ax.plot(d, centre[1] * (d / centre[0]) ** 2, **style.PAPER_FLOOR.kwargs("the paper's b = 2 (grid centre)"))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("training tokens D")
    ax.set_ylabel("smallest sufficient N")
    style.legend_outside(fig)
    low, high = analysis["boundary_slope_ci"]
    caption = (f"For each D, the smallest model whose validation CE is within "
               f"{scaling.describe(analysis['tolerance'], 3)} nats of the best at that D (points; threshold "
               f"estimator, slope {analysis['boundary']['slope']:.2f}, bootstrap CI [{low:.2f}, {high:.2f}], not "
               "calibrated), the parametric fit's boundary at the median tolerance (squares; its interval is the "
               "one checked by simulation) and, as the "
               f"{style.PAPER_FLOOR.describe()}, slope 2 through the centre of the grid. Circled points are censored: "
               "the boundary may lie beyond the grid's largest or below its smallest model.")
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


def power_table(parametric: dict[str, Any]) -> str:
    """The power at this design, under the fitted model and (where simulated) with the grid's own misfit added and
    with each cell raised by its budget-limited runs' shortfall."""
    laws = parametric["laws"]
    names = {"paper": "2 (paper)", "kaplan": "1.35 (Kaplan)", "hoffmann": "1 (Hoffmann)"}
    powers = [parametric["power"], *(parametric[key] for key in ("power_misfit", "power_budget") if key in parametric)]
    rows = [[power.get("truth", "fitted model"), row["b"], row["coverage"], row["mean_estimate"], row["median_width"],
             *(row["excludes"].get(name, "(truth)") for name in laws)] for power in powers for row in power["by_b"]]
    return markdown_table(["truth", "true b", "coverage of the 95% interval", "mean estimate", "median width",
                           *(f"share excluding {names[name]}" for name in laws)], rows)


def sensitivity_table(parametric: dict[str, Any]) -> str:
    return markdown_table(["choice", "b", "95% interval", "interval checked by simulation"],
                          [[row["choice"], row["b"], f"[{row['low']:.2f}, {row['high']:.2f}]"
                            if np.isfinite(row["low"]) or np.isfinite(row["high"]) else "-", row["calibrated"]]
                           for row in parametric["sensitivity"]])


def parametric_paragraphs(parametric: dict[str, Any]) -> list[str]:
    fit, power = parametric["fit"], parametric["power"]
    inside = sum(parametric["in_grid"])
    reach = parametric["grid_reach"]
    detectable = parametric["detectable_range"]
    return [
        f"**Boundary exponent (parametric fit, the estimate the verdict uses).** L = E_D + A (D^b / N)^alpha fitted "
        f"to the cell means: b = {fit['b']:.3f}, 95% profile-likelihood interval [{fit['b_low']:.3f}, "
        f"{fit['b_high']:.3f}] (Wald [{fit['wald_low']:.3f}, {fit['wald_high']:.3f}]); alpha = {fit['alpha']:.3f}; "
        f"chi^2 = {fit['chi2']:.1f} on {fit['dof']} degrees of freedom"
        + (f" (the interval is widened by sqrt({fit['scale']:.2f}) for the excess scatter)" if fit["scale"] > 1
           else "")
        + f". Its boundary at the tolerance {parametric['tolerance']:.4f} nats lies inside the grid's N range at "
        f"{inside} of {len(parametric['in_grid'])} data sizes. Beside the paper's 2: Kaplan et al.'s N^0.74/D "
        "(b = 1.35) and compute-optimal scaling (Hoffmann et al., b = 1).",
        f"**Power at this design.** {power['n_sim']} simulated grids per true b, with this sweep's N and D values, "
        f"seeds and measured noise, alpha = {power['alpha']:.2f} (the fitted value) and the boundary at the centre "
        f"of the grid: {parametric['power_reason']}. Calibrated for b in "
        + (f"[{detectable[0]:g}, {detectable[1]:g}]" if detectable else "none of the simulated values")
        + f"; a boundary of slope up to {reach:.2f} (log N span / log D span) stays inside the grid."
        + (f" With this grid's own misfit added to every simulated cell ({parametric['power_misfit']['n_sim']} "
           "grids per b; a truth the fitted model does not describe): "
           + ("calibrated and able to tell 2 from 1." if parametric["can_detect_with_misfit"] else
              "not calibrated or not able to tell 2 from 1, so the verdict cannot rest on the fit.")
           if "power_misfit" in parametric else "")
        + (budget_sentence(parametric) if "power_budget" in parametric else ""),
    ]


def budget_sentence(parametric: dict[str, Any]) -> str:
    """What the budget-limited truth is and whether the design decides under it."""
    budget = parametric["power_budget"]
    return (" Budget-limited truth: each cell raised by the shortfall its step budget left, the mean over its runs "
            f"of {bd.DESCENT_RANGE:.2f} x the spread of the last {LAST_EVALS} evaluations of a run that hit its "
            "budget still improving (the fall a steady descent shows in that window, which one more such window "
            f"would repeat; 0 for a run that stopped early), at most {budget['max_shortfall']:.4f} nats here ("
            f"{budget['n_sim']} grids per b): "
            + ("calibrated and able to tell 2 from 1." if parametric["can_detect_with_budget"] else
               "not calibrated or not able to tell 2 from 1, so the verdict cannot rest on the fit."))


def sweep_section(exp: Experiment, analysis: dict[str, Any], floor: float | None, fig_dir: Path) -> Section:
    cells = pd.DataFrame(analysis["cells"])
    parametric = analysis["parametric_boundary"]
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
        f"{scaling.describe(analysis['tolerance'])} nats ({analysis['tolerance_source']}).")
    if parametric["fit"] is None:
        section.paragraphs.append(f"**Boundary exponent (parametric fit).** Not fitted: {parametric['reason']}.")
    else:
        section.paragraphs += parametric_paragraphs(parametric)
        section.tables.append(power_table(parametric))
        section.tables.append(sensitivity_table(parametric))
    section.paragraphs.append(
        f"**Threshold estimator (descriptive).** Per D the smallest N within the tolerance of the best: slope "
        f"{analysis['boundary']['slope']:.3f}, {100 * analysis['level']:.0f}% bootstrap CI [{low:.3f}, {high:.3f}] "
        f"over {analysis['n_boot']} replicates; with half / twice the tolerance {analysis['sensitivity']['x0.5']:.3f}"
        f" / {analysis['sensitivity']['x2']:.3f}. Its bootstrap resamples one point per D, so its interval is not "
        "shown to be calibrated, and a boundary at either end of the N grid is censored.")
    section.paragraphs.append(
        f"**Irreducible loss** E = {analysis['parametric']['E']:.4f}, CI [{e_low:.4f}, {e_high:.4f}]"
        + (f" against the exact floor {floor:.4f}" if floor is not None else "") + " and the paper's 1.")
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
        ["D (tokens)", "threshold boundary N", "tolerance (nats)", "best val CE (nats/token)",
         "at the largest N (censored above)", "at the smallest N (censored below)", "budget-limited cells",
         "boundary range they leave", "parametric $N_b$", "parametric $N_b$ inside the grid"],
        [[row.n_tokens, row.n_boundary, row.tolerance, row.best_val_ce, row.at_grid_edge, row.at_smallest_n,
          row.budget_limited_cells, f"{row.n_low:g}-{row.n_high:g}", n_b, inside]
         for row, n_b, inside in zip(points.itertuples(), parametric.get("n_boundary", [np.nan] * len(points)),
                                     parametric.get("in_grid", ["-"] * len(points)), strict=True)]))
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
