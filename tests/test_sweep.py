"""The scaling sweep is one more experiment kind in the same DAG: one train job per model x subset x seed, no
activation or neighbour jobs, analysed by the report (assocmem.scaling, assocmem.report.sweep)."""

import json
import re

import pandas as pd
import pytest
import yaml
from conftest import ROOT, snakemake

from assocmem.report.sweep import budget_limited, measured_noise

SCALING = ROOT / "config" / "scaling.yaml"
SWEEP_TEST = ROOT / "config" / "sweep_test.yaml"
SWEEP_TRAIN = yaml.safe_load(SWEEP_TEST.read_text())["experiments"]["sweep"]["train"]


def planned_jobs(workdir, config) -> dict[str, int]:
    """rule -> job count of a dry run (snakemake's 'Job stats' table)."""
    out = snakemake(workdir, "-n", "--cores", "2", config=config)
    text = out.stdout + out.stderr
    table = text[text.index("Job stats"):]
    return {rule: int(count) for rule, count in re.findall(r"^([a-z_]+)\s+(\d+)\s*$", table, re.M) if rule != "total"}


def test_scaling_config_plans_one_train_job_per_cell_and_seed(tmp_path):
    import yaml

    cfg = yaml.safe_load(SCALING.read_text())
    (exp,) = cfg["experiments"].values()
    cells = len(exp["models"]) * len(exp["subsets"]["fractions"])
    jobs = planned_jobs(tmp_path, SCALING)
    assert jobs["train"] == cells * exp["sweep"]["seeds"]
    assert "activations" not in jobs and "neighbours" not in jobs
    assert jobs["report"] == 1
    # the grid: >= 5 sizes over >= 30x in N, >= 5 data sizes over >= 100x in D
    assert len(exp["models"]) >= 5 and len(exp["subsets"]["fractions"]) >= 5
    fractions = exp["subsets"]["fractions"]
    assert max(fractions) / min(fractions) >= 100


@pytest.mark.e2e
def test_tiny_sweep_end_to_end(tmp_path):
    snakemake(tmp_path, "--cores", "2", config=SWEEP_TEST, timeout=1500)
    results = tmp_path / "results"
    summaries = sorted((results / "sweep" / "train").glob("*/*/summary.json"))
    assert len(summaries) == 3 * 3 * 2  # models x subsets x seeds
    for path in summaries:
        summary = json.loads(path.read_text())
        assert {"best_val_ce", "best_step", "stopped_early"} <= summary.keys()
        assert summary["final"]["train_loss"] > 0
    assert not (results / "sweep" / "activations").exists()

    checks = {c["id"]: c for c in json.loads((results / "report" / "checks.json").read_text())["checks"]}
    scaling = checks["scaling"]
    numbers = scaling["numbers"]
    assert numbers["cells"] == 9 and numbers["runs"] == 18
    assert numbers["boundary_slope_ci_low"] <= numbers["boundary_slope"] <= numbers["boundary_slope_ci_high"]
    assert numbers["E_ci_low"] <= numbers["E"] <= numbers["E_ci_high"]
    assert scaling["verdict"] in {"reproduced", "refuted", "not-testable"}
    limited = sum(1 for path in summaries if budget_limited(json.loads(path.read_text()), SWEEP_TRAIN))
    assert numbers["runs_stopped_early"] == 18 - limited
    assert numbers["boundary_slope_low_end"] <= numbers["boundary_slope"] <= numbers["boundary_slope_high_end"]
    html = (results / "report" / "index.html").read_text()
    assert "Scaling sweep: sweep" in html
    figures = {p.name for p in (results / "report" / "figures").glob("*.png")}
    assert any("sweep" in name for name in figures), figures
    # rerunning changes nothing
    again = snakemake(tmp_path, "-n", "--cores", "2", config=SWEEP_TEST)
    assert "Nothing to be done" in again.stdout + again.stderr
    assert pd.read_csv(results / "sweep" / "train" / "N1.s1" / "pct100" / "metrics.csv")["val_ce"].notna().all()


def test_a_run_is_budget_limited_until_its_early_stopping_rule_is_met():
    train = {"early_stopping_patience": 4, "eval_interval": 200}
    assert budget_limited({"steps": 6000, "best_step": 6000}, train)
    assert budget_limited({"steps": 6000, "best_step": 5400}, train)  # 3 evaluations without a new best
    assert not budget_limited({"steps": 6000, "best_step": 5200}, train)  # the rule is met at the budget
    assert not budget_limited({"steps": 2200, "best_step": 1400}, train)  # stopped early
    no_rule = {"early_stopping_patience": None, "eval_interval": 200}
    assert budget_limited({"steps": 100, "best_step": 100}, no_rule)
    assert not budget_limited({"steps": 100, "best_step": 60}, no_rule)


def test_noise_is_measured_per_training_set_size():
    cells = pd.DataFrame({"n_tokens": [10, 10, 10, 10, 20, 20, 20, 20], "n_params": [1, 1, 2, 2, 1, 1, 2, 2],
                          "seed": [0, 1] * 4, "val_ce": [1.0, 1.2, 2.0, 2.2, 1.0, 1.02, 2.0, 2.02],
                          "late_spread": [0.3, 0.3, 0.3, 0.3, 0.01, 0.01, 0.02, 0.02]})
    noise, source = measured_noise(cells)
    assert noise == pytest.approx({10: 0.1 * 2**0.5, 20: 0.01 * 2**0.5}) and "each D" in source
    single, source = measured_noise(cells[cells["seed"] == 0])
    assert single == pytest.approx({10: 0.3, 20: 0.015}) and "last" in source
    # a cell with a budget-limited run does not count where the D has cells without one
    cells["budget_limited"] = [False, False, True, False, True, False, True, True]
    noise, _ = measured_noise(cells)
    assert noise == pytest.approx({10: 0.1 * 2**0.5, 20: 0.01 * 2**0.5})
    cells["val_ce"] = [1.0, 1.2, 2.0, 2.6, 1.0, 1.02, 2.0, 2.02]
    assert measured_noise(cells)[0][10] == pytest.approx(0.1 * 2**0.5)  # the open cell's 0.6 spread is left out
