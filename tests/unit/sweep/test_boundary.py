"""The boundary exponent fit: it recovers a known b, its profile-likelihood interval is calibrated at the shipped
sweep's design (the power simulation that gates the verdict), and the gate itself."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers import ROOT, sweep_cells
from hypothesis import given, settings
from hypothesis import strategies as st

from assocmem.errors import AssocmemError
from assocmem.sweep import boundary as bd


@settings(max_examples=20, deadline=None)
@given(b=st.floats(0.0, 3.0), alpha=st.floats(0.4, 1.2), seed=st.integers(0, 999))
def test_the_fit_recovers_a_known_exponent_from_nearly_noiseless_cells(b, alpha, seed) -> None:
    cells = sweep_cells(b, alpha=alpha, noise=1e-6, seed=seed)
    fit = bd.fit_boundary_exponent(cells, dict.fromkeys(map(float, cells["n_tokens"].unique()), 1e-6))
    assert fit.b == pytest.approx(b, abs=0.01) and fit.alpha == pytest.approx(alpha, abs=0.01)
    assert fit.b_low <= fit.b <= fit.b_high and fit.b_high - fit.b_low < 0.01


def test_the_boundary_of_the_simulation_sits_at_the_grid_centre() -> None:
    cells = sweep_cells(2.0, noise=1e-9)
    fit = bd.fit_boundary_exponent(cells, dict.fromkeys(map(float, cells["n_tokens"].unique()), 1e-9))
    centre_d = np.exp(np.mean(np.log([cells["n_tokens"].min(), cells["n_tokens"].max()])))
    centre_n = np.exp(np.mean(np.log([cells["n_params"].min(), cells["n_params"].max()])))
    n_b = np.exp(fit.b * np.log(centre_d) + (fit.log_a - np.log(0.006)) / fit.alpha)
    assert n_b == pytest.approx(centre_n, rel=1e-3)
    n_range = (cells["n_params"].min() * 0.999, cells["n_params"].max() * 1.001)
    assert bd.boundary_in_grid(fit, 0.006, n_range).all()  # slope 2 over 10x in D spans exactly the 100x N grid
    steep = sweep_cells(3.0, noise=1e-9)
    fit = bd.fit_boundary_exponent(steep, dict.fromkeys(map(float, steep["n_tokens"].unique()), 1e-9))
    assert bd.boundary_in_grid(fit, 0.006, n_range).tolist() == [False, True, True, False]


def test_a_flat_profile_gives_an_open_interval() -> None:
    """No excess at any N: b is not identified, and the interval says so instead of inventing a width."""
    cells = sweep_cells(1.0, noise=0.003).assign(val_ce=lambda f: 1.0 + 0.003 * np.random.default_rng(1)
                                                  .standard_normal(len(f)))
    fit = bd.fit_boundary_exponent(cells, dict.fromkeys(map(float, cells["n_tokens"].unique()), 0.003))
    assert not (np.isfinite(fit.b_low) and np.isfinite(fit.b_high))


def test_the_fit_names_what_it_lacks() -> None:
    cells = sweep_cells(1.0)
    with pytest.raises(AssocmemError, match="no noise given"):
        bd.fit_boundary_exponent(cells, {float(cells["n_tokens"].min()): 0.003})
    with pytest.raises(AssocmemError, match="two or more D values"):
        bd.fit_boundary_exponent(cells[cells["n_tokens"] == cells["n_tokens"].min()],
                                 {float(cells["n_tokens"].min()): 0.003})


def _power(coverage: dict[float, float], excludes: dict[float, dict[str, float]]) -> dict:
    return {"n_sim": 200, "by_b": [{"b": b, "coverage": c, "excludes": excludes.get(b, {})}
                                   for b, c in coverage.items()]}


def test_the_gate_needs_calibration_at_every_b_and_power_both_ways() -> None:
    good = {2.0: {"hoffmann": 0.95}, 1.0: {"paper": 0.9}}
    assert bd.can_detect_paper_b(_power({0.5: 0.93, 1.0: 0.95, 2.0: 0.92}, good))[0]
    uncalibrated, reason = bd.can_detect_paper_b(_power({0.5: 0.93, 1.0: 0.95, 2.0: 0.85}, good))
    assert not uncalibrated and "b = 2 (85%)" in reason
    weak, reason = bd.can_detect_paper_b(_power({0.5: 0.93, 1.0: 0.95, 2.0: 0.92},
                                                {2.0: {"hoffmann": 0.95}, 1.0: {"paper": 0.6}}))
    assert not weak and "cannot tell b = 2 from b = 1" in reason
    assert bd.detectable_range(_power({0.5: 0.8, 1.0: 0.95, 2.0: 0.92}, good)) == (1.0, 2.0)
    assert bd.grid_reach((2e3, 2e5), (2.4e4, 2.4e5)) == pytest.approx(2.0)


# --- the power simulation at the shipped design (issue 24: known b recovered, coverage >= 90% at nominal 95%)

QF_VOCAB = 72  # the generated Question-Formation data's vocabulary (70 words and the specials)


def shipped_design(config_file) -> tuple[pd.DataFrame, dict[str, float]]:
    """The (N, D, seed) rows of a shipped sweep config: N from the model specs, D from the subset fractions of the
    training split (the D scale does not matter: it only moves A)."""
    from assocmem.model import DecoderLM, ModelConfig

    exp = next(iter(yaml.safe_load(config_file.read_text())["experiments"].values()))
    n_values = [DecoderLM(ModelConfig.from_dict(spec, vocab_size=QF_VOCAB)).num_parameters()
                for spec in exp["models"].values()]
    d_values = [round(f * exp["dataset"]["sizes"]["train"] * 24.45) for f in exp["subsets"]["fractions"]]
    rows = [{"n_tokens": float(d), "n_params": float(n), "seed": s} for d in d_values for n in n_values
            for s in range(exp["sweep"]["seeds"])]
    return pd.DataFrame(rows), exp


def test_the_shipped_sweep_spans_the_square_of_its_data_range_with_three_seeds() -> None:
    design, exp = shipped_design(ROOT / "config" / "scaling.yaml")
    n_span = design["n_params"].max() / design["n_params"].min()
    d_span = design["n_tokens"].max() / design["n_tokens"].min()
    assert n_span >= d_span**2 and exp["sweep"]["seeds"] >= 3


def test_per_cell_noise_weighs_down_the_cells_whose_seeds_disagree() -> None:
    """One cell whose seeds split (some learn, some do not) dominates chi^2 under one noise per D; with per-cell
    noise it weighs only as much as its own scatter, and where every cell's seeds agree nothing changes."""
    cells = sweep_cells(1.0, noise=0.003, seed=4)
    noise = dict.fromkeys(map(float, cells["n_tokens"].unique()), 0.003)
    split = (cells["n_params"] == cells["n_params"].unique()[2]) & (cells["n_tokens"] == cells["n_tokens"].max())
    shift = np.zeros(len(cells))
    shift[split.to_numpy()] = [0.0, 0.3, -0.1]
    split_cells = cells.assign(val_ce=cells["val_ce"] + shift)
    per_d = bd.fit_boundary_exponent(split_cells, noise)
    per_cell = bd.fit_boundary_exponent(split_cells, noise, per_cell=True)
    assert per_cell.chi2 < per_d.chi2 / 5
    assert bd.fit_boundary_exponent(cells, dict.fromkeys(noise, 10.0), per_cell=True).chi2 == pytest.approx(
        bd.fit_boundary_exponent(cells, dict.fromkeys(noise, 10.0)).chi2)


def test_the_power_with_the_recorded_sweeps_misfit_cannot_tell_2_from_1() -> None:
    """Issue 38: the recorded sweep's power simulation drew only from the model it fits ("calibrated", 100% of grids
    tell 2 from 1); with the misfit the real grid shows added to every simulated cell, the interval is open and
    tells nothing apart."""
    import json

    sweep = json.loads((ROOT / "docs" / "results" / "scaling.json").read_text())["sweep"]
    cells = pd.DataFrame(sweep["cells"])
    noise = {float(d): sd for d, sd in sweep["noise"].items()}
    boundary = sweep["parametric_boundary"]
    misfit = bd.fit_misfit(bd.fit_boundary_exponent(cells, noise), cells)
    assert max(abs(v) for v in misfit.values()) > 2 * max(noise.values())  # beyond the seed noise at every D
    power = bd.design_power(cells[["n_tokens", "n_params", "seed"]], noise, boundary["tolerance"],
                            alpha=boundary["power"]["alpha"], exponents=(2.0,), n_sim=2, seed=1, misfit=misfit)
    (row,) = power["by_b"]
    assert row["excludes"]["hoffmann"] == 0.0 and power["truth"].endswith("misfit")
    recorded = next(r for r in boundary["power"]["by_b"] if r["b"] == 2.0)
    assert recorded["excludes"]["hoffmann"] >= 0.8  # under the fitted model alone it looked decisive


def test_the_budget_limited_truth_raises_the_cells_where_budgets_bind() -> None:
    """Issue 38: the budget truth draws each cell that much above the model by the shortfall its budget-limited runs
    show (DESCENT_RANGE x late spread), and leaves the cells whose runs stopped early on the model."""
    cells = sweep_cells(1.0)
    small = cells["n_params"] == cells["n_params"].min()
    cells = cells.assign(budget_limited=small, late_spread=np.where(small, 0.01, 0.003))
    shortfall = bd.budget_shortfall(cells)
    assert [v for (_, n), v in shortfall.items() if n == cells["n_params"].min()] == pytest.approx(
        [bd.DESCENT_RANGE * 0.01] * cells["n_tokens"].nunique())
    assert all(v == 0.0 for (_, n), v in shortfall.items() if n != cells["n_params"].min())
    design, noise = cells[["n_tokens", "n_params", "seed"]], dict.fromkeys(map(float, cells["n_tokens"]), 0.003)
    model = bd.simulate_cells(design, noise, 2.0, 0.8, 0.006, np.random.default_rng(5))
    budget = bd.simulate_cells(design, noise, 2.0, 0.8, 0.006, np.random.default_rng(5), shortfall)
    raised = (budget["val_ce"] - model["val_ce"]).to_numpy()
    assert np.all(raised[small.to_numpy()] > 0.02) and np.allclose(raised[~small.to_numpy()], 0.0)
    power = bd.design_power(design, noise, 0.006, alpha=0.8, exponents=(2.0,), n_sim=2, seed=1, misfit=shortfall,
                            truth=bd.BUDGET_TRUTH)
    assert power["truth"] == bd.BUDGET_TRUTH and power["n_sim"] == 2
