"""The memorisation grid (issue 25) is a sweep of facts in the same DAG: one train job per model x number of facts x
seed, each trained until it stores its facts or its exposure budget, one ``memorisation`` job that fits the storage
boundary N_b(D) with its power at this design, and the report's memorisation section and verdict row."""

import json

import pytest
import yaml
from conftest import ROOT, snakemake

MEMO_TEST = ROOT / "config" / "memorisation_test.yaml"
MEMO = yaml.safe_load(MEMO_TEST.read_text())["experiments"]["memo"]


def test_memorisation_config_plans_one_stacked_train_job_per_cell(tmp_path):
    """Its 3 seeds of every model and number of facts train as one stacked job (train.stack_replicas: auto, within
    the CPU measurement's range: assocmem.stacking)."""
    from test_sweep_run import planned_jobs

    cfg = yaml.safe_load((ROOT / "config" / "memorisation.yaml").read_text())
    (exp,) = cfg["experiments"].values()
    jobs = planned_jobs(tmp_path, ROOT / "config" / "memorisation.yaml")
    assert jobs["train_stacked_memorisation"] == len(exp["models"]) * len(exp["subsets"]["fractions"]) == 32
    assert "train" not in jobs and exp["sweep"]["seeds"] == 3
    assert "activations" not in jobs and "neighbours" not in jobs
    assert jobs["generate_facts"] == 1 and jobs["memorisation"] == 1 and jobs["report"] == 1 and "sweep" not in jobs


@pytest.mark.e2e
def test_tiny_memorisation_grid_end_to_end(tmp_path):
    snakemake(tmp_path, "--cores", "2", config=MEMO_TEST, timeout=1500)
    results = tmp_path / "results"
    summaries = sorted((results / "memo" / "train").glob("*/*/summary.json"))
    assert len(summaries) == 3 * 2 * 2  # models x numbers of facts x seeds
    for path in summaries:
        summary = json.loads(path.read_text())
        assert summary["stop_rule"] in {"recall", "budget"}
        assert summary["stored"] == (summary["recall"] >= MEMO["train"]["stop_at_recall"])
        assert summary["steps"] <= summary["max_steps"]
    assert not (results / "memo" / "sweep").exists()  # two analyses, two rules, two files (issue 38)
    analysis = json.loads((results / "memo" / "memorisation" / "analysis.json").read_text())
    assert analysis["kind"] == "memorisation" and analysis["n_runs"] == 12
    assert sorted(analysis["n_facts"]) == [24, 96]
    info = json.loads((results / "memo" / "data" / "facts" / "information.json").read_text())
    assert analysis["bits_per_fact"] == info["information"]["bits_per_fact"] == 3.0
    checks = {c["id"]: c for c in json.loads((results / "report" / "checks.json").read_text())["checks"]}
    assert checks["memorisation"]["verdict"] in {"reproduced", "refuted", "not-testable"}
    assert "scaling" in checks  # the scaling claim's row stays, with no scaling sweep in this run
    html = (results / "report" / "index.html").read_text()
    assert "Memorisation" in html
    assert not (results / "memo" / "activations").exists()
