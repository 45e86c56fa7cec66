"""The scaling sweep is one more experiment kind in the same DAG: one train job per model x subset x seed, no
activation or neighbour jobs, one ``sweep`` job that analyses the grid (assocmem.sweep), and the report."""

import json
import re

import pandas as pd
import pytest
import yaml
from conftest import ROOT, snakemake

from assocmem.sweep.cells import budget_limited

SCALING = ROOT / "config" / "scaling.yaml"
SWEEP_TEST = ROOT / "config" / "sweep_test.yaml"
SWEEP = yaml.safe_load(SWEEP_TEST.read_text())["experiments"]["sweep"]


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
    assert jobs["report"] == 1 and jobs["sweep"] == 1 and "memorisation" not in jobs
    # the grid's power (N span >= D span squared, >= 3 seeds) is checked in tests/unit/sweep/test_boundary.py


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
    analysis = json.loads((results / "sweep" / "sweep" / "analysis.json").read_text())
    assert len(analysis["cells"]) == 18
    if analysis["parametric_boundary"]["fit"] is not None:
        assert numbers["b_ci_low"] <= numbers["b"] <= numbers["b_ci_high"]
        assert numbers["power_sims"] == SWEEP["sweep"]["power_sims"]
        assert numbers["E_ci_low"] <= numbers["E"] <= numbers["E_ci_high"]
        train = SWEEP["train"]
        limited = sum(1 for path in summaries if budget_limited(
            json.loads(path.read_text()), train["early_stopping_patience"], train["eval_interval"]))
        assert numbers["runs_stopped_early"] == 18 - limited
    else:  # too small a grid for the fit: said so
        assert "No boundary fit" in scaling["evidence"]
    assert scaling["verdict"] in {"reproduced", "refuted", "not-testable"}
    html = (results / "report" / "index.html").read_text()
    assert "Scaling sweep: sweep" in html
    figures = {p.name for p in (results / "report" / "figures").glob("*.png")}
    assert any("sweep" in name for name in figures), figures
    # rerunning changes nothing
    again = snakemake(tmp_path, "-n", "--cores", "2", config=SWEEP_TEST)
    assert "Nothing to be done" in again.stdout + again.stderr
    assert pd.read_csv(results / "sweep" / "train" / "N1.s1" / "pct100" / "metrics.csv")["val_ce"].notna().all()
