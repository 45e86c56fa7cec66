"""The radius design's power simulation (issue 38, items 1 and 6): it runs the claim's own rules on levels drawn from
known truths, recovers the paper's truth with calibrated intervals, and says "disagrees" far from it.

Tolerances: with 200 designs a share's binomial standard error at 0.95 is 0.015, so a nominal 95% interval's
coverage falls below 0.90 with probability under 0.1% (3.2 standard errors); the seeds are fixed anyway."""

from __future__ import annotations

import numpy as np
import yaml
from helpers import ROOT

from assocmem.checkout import record_commit
from assocmem.io import read_json
from assocmem.report import radius_power as rp
from assocmem.report.radius_rules import AGREES, DISAGREES, UNDECIDED, growth_outcome

HF_WIDTH = {"gpt2": 768, "gpt2-medium": 1024, "gpt2-large": 1280}  # n_embd of the HF checkpoints


def test_the_simulated_design_is_the_configured_one() -> None:
    config = yaml.safe_load((ROOT / "config" / "radius_gpt2.yaml").read_text())
    (experiment,) = config["experiments"].values()
    names = [model["name"] for model in experiment["pretrained"].values()]
    assert tuple(sorted(HF_WIDTH[name] for name in set(names))) == rp.WIDTHS
    assert {names.count(name) for name in set(names)} == {rp.REPLICATES}


def test_growth_rule_is_the_claims() -> None:
    assert growth_outcome(0.1, 0.9) == AGREES
    assert growth_outcome(-0.1, 0.9) == UNDECIDED
    assert growth_outcome(0.6, 0.9) == DISAGREES and growth_outcome(-0.2, 0.4) == DISAGREES


def test_the_paper_truth_is_recovered_with_calibrated_intervals() -> None:
    row = rp.cell(rp.TRUTHS[0], 0.02, 200, np.random.default_rng(1))
    assert row["expected"]["verdict"] == "reproduced" and np.isclose(row["expected"]["exponent"], 0.5)
    assert row["min_coverage"] >= 0.90 and row["calibrated"]
    assert row["detection"] >= 0.80 and row["growth"]["excludes_zero"] >= 0.95


def test_a_level_far_outside_the_tolerance_disagrees() -> None:
    row = rp.cell(rp.Truth("2 x 2r*", scale=2.0), 0.02, 100, np.random.default_rng(2))
    assert row["expected"]["verdict"] == "refuted" and row["verdict"]["refuted"] >= 0.95
    assert all(width[DISAGREES] >= 0.95 for width in row["level"].values())


def test_expected_outcomes_follow_the_truths() -> None:
    widths = np.array(rp.WIDTHS)
    by_name = {truth.name.split(":")[0]: rp.expected(truth, widths) for truth in rp.TRUTHS}
    assert by_name["the paper's Fig. 2"]["verdict"] == "not-testable"  # on the tolerance's edge
    assert set(by_name["the paper's Fig. 2"]["level"].values()) == {UNDECIDED}
    flat = by_name["no growth"]
    assert set(flat["level"].values()) == {AGREES} and flat["growth"] == DISAGREES and abs(flat["exponent"]) < 1e-12
    assert 0.3 < by_name["overhead"]["exponent"] < 0.45  # 2r* + 5 grows slower than sqrt(n)


def test_recorded_cv_reads_a_runs_levels() -> None:
    numbers = {"A/p.mean.level": 1.0, "A/p.mean.level_lo": 0.98, "A/p.mean.level_hi": 1.02,
               "B/p.mean.level": 1.2, "B/p.mean.level_lo": 1.18, "B/p.mean.level_hi": 1.22,
               "A/p.distinct.mean.level": 5.0}
    got = rp.recorded_cv({"commit": "x", "numbers": {"radius": numbers}})
    assert set(got["runs"]) == {"A/p", "B/p"}
    assert np.isclose(got["runs"]["A/p"]["mean"]["query_cv"], 0.02 / 1.959964)
    assert np.isclose(got["cv_across_runs"]["mean"], np.std([1.0, 1.2], ddof=1) / 1.1)


def test_the_row_states_the_designs_power_at_its_replicates_cv() -> None:
    spread = [np.array([0.99, 1.0, 1.01]) * level for level in (13.4, 15.5, 17.3)]  # CV 0.01
    numbers, line = rp.row_power([768, 1024, 1280], 3, spread, seed=0)
    assert np.isclose(numbers["design_power.run_to_run_cv"], 0.01)
    assert numbers["design_power.paper"] >= 0.8 and numbers["design_power.no_growth"] >= 0.8
    assert "0.010" in line and "$2r^*(n)+5$" in line
    assert rp.row_power([768, 1024, 1280], 1, [np.array([13.4])], seed=0) == ({}, "")


def test_the_record_names_the_checkouts_commit_unless_told_another(tmp_path, capsys) -> None:
    """A record computed here names this checkout's commit by itself (a commit typed by hand can be stale)."""
    out = tmp_path / "radius_power.json"
    assert rp.main(["--out", str(out), "--designs", "3"]) == 0
    rec = read_json(out)
    assert rec["commit"] == record_commit()
    assert rec["command"] == f"python -m assocmem.report.radius_power --out {out} --designs 3"
    assert rp.main(["--out", str(out), "--designs", "3", "--commit", "abc1234"]) == 0
    assert read_json(out)["commit"] == "abc1234"
