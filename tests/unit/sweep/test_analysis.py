"""The sweep stage's analysis: every part present, the per-D values surviving the JSON round trip, a grid too
small for the boundary fit reported rather than failed."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import sweep_cells

from assocmem.sweep.analysis import analyse, from_json, to_json

CONFIG = {"tolerance": None, "n_boot": 40, "power_sims": 20}


@pytest.fixture(scope="module")
def analysis() -> dict:
    return analyse(sweep_cells(1.0), CONFIG, seed=3)


def test_the_analysis_has_both_estimators_the_power_and_the_sensitivity(analysis) -> None:
    parametric = analysis["parametric_boundary"]
    fit = parametric["fit"]
    assert fit["b_low"] <= 1.0 <= fit["b_high"] and abs(fit["b"] - 1.0) < 0.3
    assert [row["b"] for row in parametric["power"]["by_b"]] == [0.5, 1.0, 2.0]
    assert parametric["power"]["n_sim"] == 20 and len(parametric["in_grid"]) == 4
    assert parametric["grid_reach"] == pytest.approx(2.0, rel=0.01)  # 100x in N over 10x in D
    choices = [row["choice"] for row in parametric["sensitivity"]]
    assert choices[0].endswith("(primary)") and sum(row["calibrated"] for row in parametric["sensitivity"]) == 6
    assert analysis["n_cells"] == 24 and analysis["n_runs"] == 72
    assert set(analysis["noise"]) == set(float(d) for d in sweep_cells(1.0)["n_tokens"].unique())


def test_per_d_values_survive_the_json_round_trip(analysis) -> None:
    loaded = from_json(json.loads(json.dumps(to_json(analysis))))
    assert loaded["noise"] == analysis["noise"] and loaded["tolerance"] == analysis["tolerance"]
    assert all(isinstance(d, float) for d in loaded["noise"])


def test_a_grid_too_small_for_the_boundary_fit_is_reported_not_failed() -> None:
    cells = sweep_cells(1.0)
    small = cells[cells["n_params"].isin(sorted(cells["n_params"].unique())[:2])
                  & cells["n_tokens"].isin(sorted(cells["n_tokens"].unique())[:2])]
    result = analyse(small, CONFIG, seed=0)
    assert result["parametric_boundary"]["fit"] is None
    assert "more cell means than parameters" in result["parametric_boundary"]["reason"]
    assert np.isfinite(result["boundary"]["slope"])
