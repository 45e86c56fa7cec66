"""End-to-end: the memorisation data (dataset kind facts, issue 25) through the whole DAG on config/facts_test.yaml
(generate_facts, tokenize, subsets, train, activations, neighbours, report) in well under a minute."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import ROOT, snakemake
from helpers import planned_rules

pytestmark = pytest.mark.e2e

CONFIG = ROOT / "config" / "facts_test.yaml"


@pytest.fixture(scope="module")
def facts_run(tmp_path_factory) -> Path:
    workdir = tmp_path_factory.mktemp("facts_run")
    snakemake(workdir, "--cores", "2", config=CONFIG)
    return workdir


def test_the_data_and_its_exact_information_content(facts_run):
    facts = yaml.safe_load(CONFIG.read_text())["experiments"]["facts"]["dataset"]["facts"]
    data = facts_run / "results" / "facts" / "data"
    record = json.loads((data / "facts" / "information.json").read_text())
    bits = facts["count"] * facts["value_length"] * math.log2(facts["value_vocab"])
    assert record["information"]["bits"] == pytest.approx(bits)
    assert record["information"]["nats_per_value_token"] == {"stored": 0.0, "unseen": math.log(facts["value_vocab"])}
    assert record["keys"]["min_distance_train"] >= facts["min_key_distance"]
    assert len((data / "facts" / "train.tsv").read_text().splitlines()) == facts["count"]
    meta = json.loads((data / "tokens" / "meta.json").read_text())
    assert meta["loss_from"] == facts["key_length"] + 2 and meta["roles"]["validation"] == "unseen"
    assert meta["splits"]["unseen"]["n_docs"] == facts["unseen"]
    half = json.loads((data / "subsets" / "pct50" / "meta.json").read_text())
    assert half["subset"]["n_docs"] == facts["count"] // 2 and half["loss_from"] == meta["loss_from"]


def test_training_scores_values_and_no_model_beats_the_unseen_floor(facts_run):
    results = facts_run / "results" / "facts"
    record = json.loads((results / "data" / "facts" / "information.json").read_text())
    floor = record["information"]["nats_per_scored_token"]["unseen"]
    for subset in ("pct100", "pct50"):
        summary = json.loads((results / "train" / "tiny" / subset / "summary.json").read_text())
        assert summary["loss_tokens"].startswith("the value tokens and <eos>")
        metrics = pd.read_csv(results / "train" / "tiny" / subset / "metrics.csv")
        assert (metrics["val_ce"] > 0.9 * floor).all()  # unseen facts: ln V per value token is the floor
        rows = pd.read_parquet(results / "train" / "tiny" / subset / "eval_rows.parquet")
        assert (rows["tokens"] == 1 + yaml.safe_load(CONFIG.read_text())["experiments"]["facts"]["dataset"]["facts"][
            "value_length"]).all()


def test_the_report_states_the_floor_and_every_claim_has_a_verdict(facts_run):
    report = facts_run / "results" / "report"
    markdown = (report / "report.md").read_text()
    assert "## Data: facts (random facts)" in markdown and "information stored, H(values \\| keys) (bits)" in markdown
    assert "| floor, unseen facts (nats per value token = ln V) | 2.07944 |" in markdown
    checks = json.loads((report / "checks.json").read_text())["checks"]
    assert checks and {c["verdict"] for c in checks} <= {"reproduced", "refuted", "corrected", "not-testable"}
    assert (report / "figures" / "training_curves_facts.png").exists()


def test_a_facts_key_reruns_the_data_and_everything_after_it(facts_run, tmp_path):
    config = yaml.safe_load(CONFIG.read_text())
    config["experiments"]["facts"]["dataset"]["facts"]["value_vocab"] = 4
    changed = tmp_path / "changed.yaml"
    changed.write_text(yaml.safe_dump(config))
    plan = planned_rules(snakemake(facts_run, "-n", "--cores", "2", config=changed))
    assert plan == {"generate_facts", "tokenize", "subsets", "train", "activations", "neighbours", "report"}
    assert planned_rules(snakemake(facts_run, "-n", "--cores", "2", config=CONFIG)) == set()
