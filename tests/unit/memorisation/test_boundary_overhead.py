"""The storage boundary with an overhead, N_b = N0 + c D^b (issue 38): the maximum-likelihood fit recovers (N0, c, b)
on simulated grids inside its profile intervals, the profile gap at the truth is small, and the power simulation
against an overhead truth flags the pure power law's bias (its interval never covers the truth)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from helpers import ROOT
from scipy import special

from assocmem.memorisation import boundary as mb
from assocmem.memorisation import boundary_overhead as bo
from assocmem.memorisation import boundary_power as bp
from assocmem.memorisation import power_alternatives as pa
from assocmem.memorisation.cells import stored_at

N_GRID = np.geomspace(600, 2e6, 14)
D_GRID = (128.0, 512.0, 2048.0, 8192.0)


def overhead_grid(n0: float, c: float, b: float, k: float, seeds: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    runs = pd.DataFrame([{"n_params": n, "n_facts": d, "seed": s} for n in N_GRID for d in D_GRID
                         for s in range(seeds)])
    log_nb = np.log(n0 + c * runs["n_facts"].to_numpy() ** b)
    p = special.expit(k * (np.log(runs["n_params"].to_numpy()) - log_nb))
    return runs.assign(stored=rng.random(len(runs)) < p)


@pytest.mark.parametrize(("n0", "c", "b", "seed"), [(2000.0, 4.0, 1.0, 1), (3000.0, 0.05, 2.0, 2),
                                                    (1500.0, 1.0, 1 / 0.74, 3)])
def test_the_overhead_fit_recovers_n0_c_and_b(n0: float, c: float, b: float, seed: int) -> None:
    """A sharp boundary (k = 200, beyond the fit's cap of 100: outcomes nearly deterministic, so the truth lies in
    the set of parameters that separate the runs and every profile interval must hold it)."""
    fit = bo.fit_overhead(overhead_grid(n0, c, b, k=200.0, seeds=3, seed=seed))
    b_low, b_high = fit.b_interval()
    n0_low, n0_high = fit.n0_interval()
    c_low, c_high = np.exp(fit.log_c_interval())
    assert b_low <= b <= b_high and n0_low <= n0 <= n0_high and c_low <= c <= c_high
    assert fit.b == pytest.approx(b, abs=0.2) and fit.gap_at_b(b) < bo.THRESHOLD
    wrong = {1.0: 2.0, 2.0: 1.0}.get(b, 2.0)
    assert fit.gap_at_b(wrong) > bo.THRESHOLD  # this design tells the laws apart


def test_a_noisy_boundary_is_recovered_within_its_b_interval() -> None:
    fit = bo.fit_overhead(overhead_grid(2000.0, 4.0, 1.0, k=8.0, seeds=3, seed=1))
    low, high = fit.b_interval()
    assert low <= 1.0 <= high and fit.b == pytest.approx(1.0, abs=0.2)
    assert fit.n0 == pytest.approx(2000.0, rel=0.5)


def test_bits_at_the_margin_are_bits_per_fact_over_the_cost_of_the_next_fact() -> None:
    fit = bo.fit_overhead(overhead_grid(2000.0, 4.0, 1.0, k=8.0, seeds=3, seed=1))
    value, low, high = bo.bits_at_margin(fit, 8.0, 1024.0)
    assert value == pytest.approx(8.0 / (np.exp(fit.log_c) * fit.b * 1024.0 ** (fit.b - 1)))
    assert low <= value <= high and low <= 2.0 <= high  # 8 bits over 4 parameters a fact


def _recorded_runs() -> pd.DataFrame:
    memo = json.loads((ROOT / "docs" / "results" / "memorisation.json").read_text())["memorisation"]
    return stored_at(pd.DataFrame(memo["runs"]), memo["threshold"])


def test_the_power_simulation_with_an_overhead_truth_flags_the_pure_laws_bias() -> None:
    """Issue 38: grids simulated at the shipped design from overhead truths fitted to its record (b = 1, 1.35, 2);
    the pure power law's interval never covers the truth, the overhead fit's does in most grids."""
    runs = _recorded_runs()
    truth_set = pa.truths(runs)
    overhead = {row["law"]: row for row in truth_set["rows"] if row["family"] == "overhead"}
    assert overhead["allen_zhu"]["n0"] == pytest.approx(2030, rel=0.05)  # the re-analysis at b = 1
    assert overhead["allen_zhu"]["c"] == pytest.approx(3.8, rel=0.05)
    power = pa.design_power(runs[["n_params", "n_facts", "seed"]], truth_set, n_sim=3, seed=5,
                            families=("overhead",))
    for row in power["rows"]:
        assert row["pure"]["coverage"] == 0.0 and row["pure"]["median_b"] < 0.6, row
        assert row["overhead"]["coverage"] >= 2 / 3, row
    assert not pa.can_decide(power, bp.PAPER_PAIRS)[0]


def test_can_decide_needs_coverage_under_every_truth_and_the_wrong_law_excluded() -> None:
    def row(family: str, law: str, coverage: float, share: float) -> dict:
        others = {name: share for name in mb.LAWS if name != law}
        return {"family": family, "law": law, "b": mb.LAWS[law],
                "overhead": {"coverage": coverage, "excludes": others}}

    good = {"n_sim": 10, "rows": [row(f, law, 0.95, 0.9) for f in pa.FAMILIES for law in mb.LAWS]}
    assert pa.can_decide(good)[0]
    uncovered = {"n_sim": 10, "rows": [*good["rows"][1:], row("budget", "paper", 0.8, 0.9)]}
    ok, why = pa.can_decide(uncovered)
    assert not ok and "coverage 80%" in why and "budget" in why
    weak = {"n_sim": 10, "rows": [*good["rows"][:-1], row("budget", "paper", 0.95, 0.5)]}
    ok, why = pa.can_decide(weak, bp.PAPER_PAIRS)
    assert not ok and "excludes" in why and "50%" in why
