"""The threads Snakemake gives the jobs of a local run (workflow/rules/common_scheduling.smk). The report runs alone at
the end of the DAG, so it takes every core of --cores (its figures are written by that many forked processes:
assocmem.report.figure_writer). An evaluate or neighbours job takes an equal share of --cores among its rule's jobs
that run on the CPU, and threads_per_job where it runs on a GPU (assocmem.runtime.job_threads: there it keeps one
core busy, and a share would hold cores other jobs wait for)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, snakemake


def threads_of(result, stage: str) -> list[int]:
    return [int(n) for n in re.findall(rf"python -m assocmem {stage} --threads (\d+)", result.stdout + result.stderr)]


def config_with_devices(tmp_path: Path, evaluate: str, neighbours: str) -> Path:
    """config/test.yaml (one evaluate job, two neighbours jobs) with the devices of its evaluate and neighbours jobs
    (evaluate runs where activations.device says)."""
    config = yaml.safe_load((ROOT / "config" / "test.yaml").read_text())
    for experiment in config["experiments"].values():
        experiment.setdefault("activations", {})["device"] = evaluate
        experiment.setdefault("neighbours", {})["device"] = neighbours
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.parametrize("cores", [1, 5])
def test_the_report_job_takes_every_local_core(tmp_path, cores: int) -> None:
    result = snakemake(tmp_path, "-n", "-p", "--cores", str(cores), timeout=300)
    assert threads_of(result, "report") == [cores]


@pytest.mark.parametrize(("evaluate", "neighbours", "evaluate_threads", "neighbour_threads"), [
    ("cpu", "cpu", [16], [8, 8]),  # on the CPU: the one evaluate job takes all 16 cores, the two k-NN jobs half each
    ("cuda", "cuda", [1], [1, 1]),  # on a GPU: threads_per_job
    ("cpu", "cuda", [16], [1, 1]),  # each rule by its own device
    ("cuda", "cpu", [1], [8, 8]),
])
def test_jobs_on_a_gpu_take_threads_per_job_and_the_cpu_jobs_share_the_cores(
        tmp_path, evaluate: str, neighbours: str, evaluate_threads: list[int], neighbour_threads: list[int]) -> None:
    config = config_with_devices(tmp_path, evaluate, neighbours)
    result = snakemake(tmp_path, "-n", "-p", "--cores", "16", config=config, timeout=300)
    assert threads_of(result, "evaluate") == evaluate_threads
    assert threads_of(result, "neighbours") == neighbour_threads


def test_auto_with_every_gpu_hidden_shares_the_cores(tmp_path, monkeypatch) -> None:
    """device auto: the GPU probe (assocmem.runtime.gpu_probe) decides; CUDA_VISIBLE_DEVICES='' hides every GPU, so
    the jobs run on the CPU on any host and take their share."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    config = config_with_devices(tmp_path, "auto", "auto")
    result = snakemake(tmp_path, "-n", "-p", "--cores", "16", config=config, timeout=300)
    assert threads_of(result, "evaluate") == [16]
    assert threads_of(result, "neighbours") == [8, 8]
