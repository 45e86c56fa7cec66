"""benchmarks/gpu_check.sh passes its CPU dry run: every part runs or says why it is skipped, and the table lists
the arms (issue 41; the GPU run itself needs a GPU machine)."""

from __future__ import annotations

import json
import os
import subprocess

import torch
from helpers import ROOT


def test_the_gpu_check_passes_its_dry_run(tmp_path) -> None:
    """Its processes get this worker's threads (one under pytest-xdist): with torch's default, a thread per core,
    they spun against the other worker, and the dry run took 192 s instead of 115 s beside one busy core."""
    threads = {**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads())}
    result = subprocess.run(["bash", "benchmarks/gpu_check.sh", "--dry-run", "--out", str(tmp_path)], cwd=ROOT,
                            capture_output=True, text=True, timeout=600, env=threads)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    table = lines[next(i for i, line in enumerate(lines) if line.startswith("arm ")):]
    arms = {line.split()[0]: line for line in table[1:] if line.strip() and not line.startswith("==")}
    assert set(arms) == {"gpt2-nanogpt-eager", "l4-graphs"}
    assert "skipped: no --nanogpt DIR given" in arms["gpt2-nanogpt-eager"]
    assert "cpu (dry run)" in arms["l4-graphs"] and "rc=" not in result.stdout
    assert "skip main run: dry run" in result.stdout
    assert "skip GPT-2 pair: no --nanogpt DIR given" in result.stdout  # tests/unit/train/test_paired_ratio.py runs it
    assert "skip the decisive column's floor: dry run" in result.stdout
    assert "decisive column on cpu" in result.stdout and "check D0/8192 bf16, 2 steps for real" in result.stdout
    wall = json.loads((tmp_path / "decisive_wall.json").read_text())
    assert [(c["model"], c["precision"]) for c in wall["costs"]] == [("D0", "bf16")] * 2
    assert "groups sharing the device" in result.stdout
    (evaluation,) = json.loads((tmp_path / "stacked_eval.json").read_text())["rows"]
    assert evaluation["model"] == "D0" and evaluation["stacked_s"] > 0 and evaluation["alone_s"] > 0
    assert wall["stage"] == "complete"
    assert [(t["mode"], t["copies"]) for t in wall["sharing"]["turns"]] == [
        ("processes", 1), ("processes", 2), ("streams", 1), ("streams", 2)]
    assert any(line.startswith(("skip stacked replicas", "== t=")) for line in lines)
    (ops,) = json.loads((tmp_path / "step_ops.json").read_text())  # the project's loop alone: no nanoGPT here
    assert ops["arm"] == "gpt2-project-compile" and ops["device_events_per_step"] is None
    assert "aten::div" not in ops["eager_ops"] and ops["optimizer_ops"]["aten::_fused_adamw_"] == 2
    assert ops["kernels_generated"] > 0 and len(ops["graph_ops"]) == 2  # forward and backward, caches off
    assert "ops outside the compiled graph, per step | gpt2-project-compile" in result.stdout


def test_the_gpu_check_lists_the_main_runs_jobs_longest_first(tmp_path) -> None:
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from main_run_logs import job_times

    header = "s\th:m:s\tmax_rss\tcpu_time\n"
    for name, wall, rss in (("qf/train_L4.tsv", "61.5", "812.4"), ("report.tsv", "30.2", "120.0")):
        (tmp_path / "benchmarks" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "benchmarks" / name).write_text(header + f"{wall}\t0:01:01\t{rss}\t1.0\n")
    lines = job_times(tmp_path).splitlines()
    assert lines[1].split() == ["61.5", "812", "qf/train_L4"]
    assert lines[2].split() == ["30.2", "120", "report"]
    assert "no Snakemake benchmark files" in job_times(tmp_path / "absent")


def test_the_gpu_check_lists_the_jobs_start_up_and_cpu_split_from_their_logs(tmp_path) -> None:
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from main_run_logs import job_cpu

    logs = tmp_path / "logs"
    (logs / "qf").mkdir(parents=True)
    (logs / "report.log").write_text(
        "x INFO assocmem: report: began 1.4 s after its process started; CPU 20.0 s in 10.0 s of wall (2.00 cores): "
        "main thread 8.0 s, the process's other threads 2.0 s, child processes waited for 10.0 s\n")
    (logs / "qf" / "train_L4.log").write_text(
        "x INFO assocmem: CUDA: context on cuda (NVIDIA H200) created in 1.27 s\n"
        "x INFO assocmem.train.loop: qf/L4/pct100 set-up: 7.6 s: imports 3.10 s, data 0.20 s, device 1.30 s, "
        "model 0.10 s, optimizer 1.00 s, GEMM choice 0.00 s, peak FLOP/s 1.90 s before the first step\n"
        "progress\nx INFO assocmem: train L4/pct100: CPU 30.0 s in 28.8 s of wall (1.04 cores): this process 30.0 s, "
        "child processes waited for 0.0 s\n")
    (logs / "qf" / "tokenize.log").write_text("an older job's log without the line\n")
    lines = job_cpu(tmp_path).splitlines()
    assert lines[3] == ("set-up 7.6 s before the work of qf/train_L4: imports 3.10, data 0.20, device 1.30, "
                        "model 0.10, optimizer 1.00, GEMM choice 0.00, peak FLOP/s 1.90")
    lines = lines[:3]
    assert len(lines) == 3
    assert lines[1].split() == ["-", "1.3", "28.8", "30.0", "1.0", "-", "-", "0.0", "qf/train_L4"]
    assert lines[2].split() == ["1.4", "-", "10.0", "20.0", "2.0", "8.0", "2.0", "10.0", "report"]
    assert "no job logs" in job_cpu(tmp_path / "absent")


SNAKEMAKE_LOG = """Building DAG of jobs...
[Fri Nov 27 03:08:38 2026]
Job 3: generate data: qf (log: results/logs/qf/generate_data.log)
[Fri Nov 27 03:08:39 2026]
Finished jobid: 3 (Rule: generate_data)
[Fri Nov 27 03:09:14 2026]
Job 10: evaluate: qf L4/pct100 (log: results/logs/qf/evaluate_L4_pct100.log)
[Fri Nov 27 03:09:30 2026]
Job 1: report (log: results/logs/report.log)
[Fri Nov 27 03:09:31 2026]
Finished jobid: 10 (Rule: evaluate)
"""


def test_the_gpu_check_prints_the_main_runs_jobs_by_start(tmp_path) -> None:
    """Where a job waited (the evaluate jobs held back by their cores in the second GPU run) shows as its start."""
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from main_run_logs import job_timeline

    (tmp_path / "run.log").write_text(SNAKEMAKE_LOG)
    lines = job_timeline(tmp_path / "run.log").splitlines()
    assert [line.split()[:3] for line in lines[1:]] == [["0", "1", "1"], ["36", "53", "17"], ["52", "-", "-"]]
    assert lines[1].endswith("generate data: qf") and lines[3].endswith("report")
    assert "no Snakemake log" in job_timeline(tmp_path / "absent.log")


def test_each_arms_ratio_is_against_its_own_base() -> None:
    """The project's GPT-2 arms against nanoGPT in the same mode, the L4 arms against the eager step; nanoGPT's own
    arms get no ratio (the first GPU run's table printed nanoGPT against the L4 step)."""
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gpu_check import table

    def row(arm: str, tokens: float) -> dict:
        return {"arm": arm, "tokens_per_s": tokens, "ms_per_step": 1.0, "mfu": 0.5, "device": "d", "loss": 1.0}

    rows = [row("gpt2-project-compile", 450.0), row("gpt2-nanogpt-compile", 500.0), row("l4-eager", 100.0),
            row("l4-graphs", 800.0)]
    ratios = {line.split()[0]: line.split()[4] for line in table(rows).splitlines()[1:]}
    assert ratios == {"gpt2-project-compile": "0.90", "gpt2-nanogpt-compile": "nan", "l4-eager": "1.00",
                      "l4-graphs": "8.00"}
