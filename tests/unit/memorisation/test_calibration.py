"""The critical value calibrated at a design (power_alternatives.calibrated_threshold): the smallest that covers
every truth's grids, its order-statistic sampling interval, and the decision read at other critical values
(decisive.critical_value_sensitivity)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from assocmem.errors import AssocmemError
from assocmem.memorisation import boundary_budget as bb
from assocmem.memorisation import boundary_overhead as bo
from assocmem.memorisation import decisive
from assocmem.memorisation import power_alternatives as pa


def _power_of(gaps_by_truth: list[np.ndarray], seed: int = 0) -> dict:
    """A power record as design_power(keep_gaps=True) writes it, from each truth's (b̂, gap at truth, 3 law gaps)."""
    laws = list(pa.mb.LAWS)
    return {"seed": seed, "n_sim": len(gaps_by_truth[0]),
            "rows": [{"family": "budget", "law": laws[i % 3], "two_budget_gaps": gaps.tolist()}
                     for i, gaps in enumerate(gaps_by_truth)]}


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), scale=st.floats(0.2, 4.0), n_sim=st.integers(20, 120),
       failed=st.floats(0.0, 0.04))
def test_the_calibrated_critical_value_is_the_smallest_that_covers_every_truth(seed: int, scale: float, n_sim: int,
                                                                                failed: float) -> None:
    """At the calibrated value every truth's grids cover in >= 95% (a failed fit never covers); any smaller value
    above χ²'s leaves some truth below 95%; it is never below χ²'s."""
    rng = np.random.default_rng(seed)
    gaps = []
    for t in range(3):
        rows = np.column_stack([rng.normal(1.2, 0.3, n_sim), rng.chisquare(1, n_sim) * scale * (1 + t / 2),
                                rng.chisquare(1, (n_sim, 3)) * 10])
        rows[rng.random(n_sim) < failed, :] = np.nan
        gaps.append(rows)
    calibration = pa.calibrated_threshold(_power_of(gaps, seed))
    c = calibration["threshold"]
    covered = [np.mean(np.nan_to_num(g[:, 1], nan=np.inf) <= c) for g in gaps]
    assert c >= bo.THRESHOLD and min(covered) >= 0.95
    if c > bo.THRESHOLD:
        below = np.nextafter(c, 0)
        assert min(np.mean(np.nan_to_num(g[:, 1], nan=np.inf) <= below) for g in gaps) < 0.95
    assert calibration["worst"]["quantile"] == max(row["quantile"] for row in calibration["per_truth"])


def test_a_critical_value_below_chi_square_is_refused() -> None:
    with pytest.raises(AssocmemError, match="below chi-square's 3.8415"):
        bb.check_threshold(3.0)
    gaps = [np.array([[1.0, 0.5, 9.0, 9.0, 9.0]] * 20)]
    with pytest.raises(AssocmemError, match="below chi-square's"):
        pa.at_threshold(_power_of(gaps), 2.0)



def test_the_sampling_interval_of_the_quantile_covers_it_at_its_confidence() -> None:
    """200 draws a grid, as the decisive record: the order-statistic interval holds the true 95% quantile in >= 90%
    of 400 repetitions (exponential gaps, quantile known), and an interval too short to bound it is open above."""
    rng = np.random.default_rng(3)
    truth = -np.log(0.05)
    held = []
    for _ in range(400):
        gaps = np.column_stack([np.ones(200), rng.exponential(1.0, 200), np.zeros((200, 3))])
        low, high = pa.calibrated_threshold(_power_of([gaps]))["per_truth"][0]["interval"]
        held.append(low <= truth <= high)
    assert np.mean(held) >= 0.9
    few = np.column_stack([np.ones(20), rng.exponential(1.0, 20), np.zeros((20, 3))])
    assert pa.calibrated_threshold(_power_of([few]))["per_truth"][0]["interval"][1] == np.inf


def test_the_decision_is_read_at_each_other_critical_value_on_the_judged_grids() -> None:
    """Judged grids whose gaps at the truth are exactly chi-square distributed and at the wrong law 5: χ²'s value
    covers 95% and excludes everything; a critical value above 5 excludes nothing, so it cannot decide."""
    rng = np.random.default_rng(4)

    def power(seed: int) -> dict:
        rows = []
        for law in pa.mb.LAWS:
            gaps = np.column_stack([np.ones(200), rng.chisquare(1, 200) * 1.6, np.full((200, 3), 5.5)])
            gaps[:, 2 + list(pa.mb.LAWS).index(law)] = 0.0
            rows.append({"family": "budget", "law": law, "b": pa.mb.LAWS[law], "two_budget_gaps": gaps.tolist()})
        return {"seed": seed, "n_sim": 200, "rows": rows}

    calibration = power(39)
    stated = pa.calibrated_threshold(calibration)
    rows = {row["choice"]: row for row in decisive.critical_value_sensitivity(power(38), calibration, stated)}
    chi2, stated = rows["chi-square, 95%"], rows["calibrated to 95% coverage (stated)"]
    assert chi2["threshold"] == bo.THRESHOLD and chi2["weakest_paper_exclusion"] == 1.0
    assert stated["threshold"] > 5.5 and stated["weakest_paper_exclusion"] == 0.0 and not stated["can_decide"]
    assert stated["min_coverage"] >= 0.9
    assert rows["calibrated to 90% coverage"]["threshold"] <= stated["threshold"]


def test_the_replication_writes_beside_the_record_at_its_own_seeds(tmp_path, monkeypatch) -> None:
    """``--replication`` calibrates and judges at REPLICATION_SEEDS and writes its own record and gaps, never the
    stated record's; ``--explore K`` the design at K seeds a cell on EXPLORATION_SEEDS, into files named for K; the
    default writes the stated record at SEED and CALIBRATION_SEED; equal seeds and K < 1 are refused."""
    calls = []

    def fake_compute(n_sim: int = decisive.SIMULATIONS, seeds: tuple[int, int] = (0, 0),
                     seeds_per_cell: int = decisive.SEEDS):
        calls.append((n_sim, seeds, seeds_per_cell))
        return ({"can_decide": False, "seed": seeds[0], "seeds": seeds_per_cell},
                pd.DataFrame({"grids": ["judged"], "seed": [seeds[0]]}))

    paths = {name: tmp_path / "docs" / f"{name}.out" for name in ("RECORD", "GAPS", "REPLICATION", "REPLICATION_GAPS")}
    for name, path in paths.items():
        monkeypatch.setattr(decisive, name, path)
    monkeypatch.setattr(decisive, "ROOT", tmp_path)
    monkeypatch.setattr(decisive, "compute", fake_compute)
    assert decisive.main(["--replication"]) == paths["REPLICATION"]
    assert decisive.main([]) == paths["RECORD"]
    explored, explored_gaps = decisive.exploration_paths(6)
    assert decisive.main(["--explore", "6"]) == explored
    assert explored.parent == paths["RECORD"].parent and "exploration_6seeds" in explored.name
    assert json.loads(explored.read_text())["seeds"] == 6 and explored_gaps.exists()
    assert decisive.STATED_SEEDS == (decisive.SEED, decisive.CALIBRATION_SEED)
    assert calls == [(decisive.SIMULATIONS, decisive.REPLICATION_SEEDS, decisive.SEEDS),
                     (decisive.SIMULATIONS, decisive.STATED_SEEDS, decisive.SEEDS),
                     (decisive.EXPLORATION_SIMULATIONS, decisive.EXPLORATION_SEEDS, 6)]
    roles = (decisive.REPLICATION_SEEDS, decisive.STATED_SEEDS, decisive.EXPLORATION_SEEDS)
    assert len({seed for pair in roles for seed in pair}) == 6
    replication = json.loads(paths["REPLICATION"].read_text())
    assert replication["seed"] == decisive.REPLICATION_SEEDS[0] and replication["gaps"] == "docs/REPLICATION_GAPS.out"
    assert paths["REPLICATION_GAPS"].exists() and paths["GAPS"].exists()
    for bad in (["--explore", "0"], ["--explore", "5", "--replication"]):
        with pytest.raises(SystemExit):
            decisive.main(bad)
    with pytest.raises(ValueError, match="must differ"):
        decisive.simulate_both(1, seeds=(40, 40))
