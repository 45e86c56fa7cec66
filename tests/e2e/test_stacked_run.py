"""``train.stack_replicas`` (issue 41): a grid's seeds of one model and subset train as one stacked job whose
per-replica files the sweep analysis and the report read unchanged, each replica's weights those of its single run."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
import yaml
from conftest import ROOT, snakemake
from test_sweep_run import planned_jobs

from assocmem import layout
from assocmem.codehash import code_digest
from assocmem.train.job import build_job

# tests/unit/train/test_stacked.py's fp32 tolerance, justified there for 8 steps at lr 3e-3 (the settings below)
WEIGHT_ATOL = 1e-5
MODELS, SEEDS = ("m0", "m1"), 2


def tiny_grid(tmp_path: Path, stack, fractions=(1.0,)) -> Path:
    """config/memorisation_test.yaml cut to 2 models x ``fractions`` x 2 seeds, 8 steps (the unit test's regime)."""
    cfg = yaml.safe_load((ROOT / "config" / "memorisation_test.yaml").read_text())
    exp = cfg["experiments"]["memo"]
    exp["models"] = {name: exp["models"][name] for name in MODELS}
    exp["subsets"]["fractions"] = list(fractions)
    exp["sweep"]["seeds"] = SEEDS
    exp["train"].update(max_steps=8, eval_interval=4, lr=3e-3, warmup_steps=3, gemm="native", stack_replicas=stack)
    cfg["results_dir"] = str(tmp_path / "results")
    path = tmp_path / f"grid_{stack}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_stack_replicas_off_plans_one_train_job_per_run_and_true_one_per_cell(tmp_path):
    cells = len(MODELS) * 2
    off = planned_jobs(tmp_path / "off", tiny_grid(tmp_path, False, (1.0, 0.25)))
    on = planned_jobs(tmp_path / "on", tiny_grid(tmp_path, True, (1.0, 0.25)))
    assert off["train"] == cells * SEEDS and "train_stacked_memo" not in off
    assert on["train_stacked_memo"] == cells and "train" not in on
    assert {k: v for k, v in off.items() if k != "train"} == {k: v for k, v in on.items() if k != "train_stacked_memo"}


def single_run_weights(run: Path, params: dict, tmp_path: Path) -> dict[str, torch.Tensor]:
    """The weights one unstacked training job writes for this run's params (its stamp's), trained here in-process."""
    store = run.parents[2] / "data" / "subsets" / run.name
    run_dir = tmp_path / "single" / run.parent.name
    build_job(params["train"], params["model"], params["seed"], store, run_dir, code=code_digest("train"),
              job=params["job"]).run()
    return torch.load(run_dir / "model.pt", weights_only=True)["model"]


@pytest.mark.e2e
def test_a_stacked_grid_runs_one_job_per_cell_and_writes_each_replicas_single_run(tmp_path):
    config = tiny_grid(tmp_path, True)
    out = snakemake(tmp_path, "--cores", "2", config=config, timeout=600)
    text = out.stdout + out.stderr
    jobs = dict(re.findall(r"^([a-z_]+)\s+(\d+)\s*$", text[text.index("Job stats"):], re.M))
    assert jobs["train_stacked_memo"] == "2" and "train" not in jobs  # one job per (model, subset) cell
    results = tmp_path / "results"
    runs = sorted((results / "memo" / "train").glob("*/pct100"))
    assert [r.parent.name for r in runs] == ["m0", "m0.s1", "m1", "m1.s1"]
    for run in runs:
        stamp = json.loads((run / "provenance.json").read_text())
        label = run.parent.name
        assert stamp["job"] == f"train memo/train/{label}/pct100" and stamp["code"] == code_digest("train")
        assert stamp["params"]["job"] == layout.train_job("memo", label, "pct100")
        assert stamp["params"]["seed"] == layout.replicate_seed(5, layout.parse_replicate(label)[1])
        assert set(stamp["files"]) == {"model.pt", "best.pt", "metrics.csv", "summary.json", "eval_rows.parquet"}
        assert json.loads((run / "timing.json").read_text())["gemm_choice"]["how"] == "stacked"
    # the memorisation analysis and the report (which checks every stamp) read the replicas' files unchanged
    assert json.loads((results / "memo" / "memorisation" / "analysis.json").read_text())["n_runs"] == 4
    assert "memorisation" in {c["id"] for c in json.loads((results / "report" / "checks.json").read_text())["checks"]}
    assert (results / "benchmarks" / "memo" / "train_stacked_m1_pct100.tsv").is_file()
    # a rerun is a no-op for m0's stack, and reruns m1's stack, whose settings changed (the same seeds, lr 2e-3)
    changed = yaml.safe_load(config.read_text())
    changed["experiments"]["memo"]["models"]["m1"]["train"] = {"lr": 2e-3}
    config.write_text(yaml.safe_dump(changed))
    plan = snakemake(tmp_path, "-n", "--cores", "2", config=config).stdout
    assert re.findall(r"train_stacked: memo (\S+)/pct100", plan) == ["m1"]
    for run in runs[2:]:  # m1's two seeds against their single runs
        stacked = torch.load(run / "model.pt", weights_only=True)["model"]
        single = single_run_weights(run, json.loads((run / "provenance.json").read_text())["params"], tmp_path)
        assert stacked.keys() == single.keys()
        for name, tensor in single.items():
            torch.testing.assert_close(stacked[name], tensor, rtol=0, atol=WEIGHT_ATOL)
