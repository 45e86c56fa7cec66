"""record-results' memorisation section: a fitted grid's summary, a grid without a boundary (the stage's reason
instead of a fit, e.g. one D where every run stored), and a foreign or stale analysis named."""

from __future__ import annotations

import pytest

from assocmem.errors import AssocmemError
from assocmem.report.record import MEMORISATION_KEYS, UNFITTED_KEYS, memorisation_summary


def test_a_fitted_grid_keeps_every_quoted_key() -> None:
    analysis = {key: f"value of {key}" for key in MEMORISATION_KEYS} | {"grid": [], "reason": ""}
    assert memorisation_summary(analysis) == {key: f"value of {key}" for key in MEMORISATION_KEYS}


def test_a_grid_without_a_boundary_keeps_its_runs_and_the_reason() -> None:
    reason = "storage boundary: needs two or more distinct fact counts (n_facts), got 1"
    analysis = {key: [key] for key in UNFITTED_KEYS} | {"fit": None, "reason": reason, "grid": []}
    summary = memorisation_summary(analysis)
    assert set(summary) == set(UNFITTED_KEYS) and summary["reason"] == reason and summary["runs"] == ["runs"]
    why = "storage boundary: every run stored its facts"
    assert memorisation_summary(analysis | {"overhead_reason": why})["overhead_reason"] == why


@pytest.mark.parametrize("analysis", [
    {"fit": {"b": 1.0}, "runs": []},           # fitted, but without the power and verdict keys
    {"fit": None, "reason": "one D", "runs": []},  # unfitted, without its design
    {"fit": None, "runs": []},                 # neither a fit nor a reason
])
def test_an_incomplete_analysis_is_named(analysis) -> None:
    with pytest.raises(AssocmemError, match="memorisation analysis.json lacks .*threshold"):
        memorisation_summary(analysis)
