"""Workflows on a real single-node SLURM cluster (tests/slurm/cluster_up.sh), driven through the profile.

Opt-in (it starts daemons and takes minutes): ``pytest -m slurm tests/e2e/test_slurm.py`` or
ASSOCMEM_SLURM_TESTS=1. Skips with the reason when the machine cannot host the cluster (not root,
no apt-get, packages not installable). The cluster is always torn down, by PID files, never by name.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
from helpers import ROOT, real_slurm_env

from assocmem.io import write_text

pytestmark = pytest.mark.slurm

REPO = ROOT
SCRIPTS = REPO / "tests" / "slurm"
PROFILE = REPO / "workflow" / "profiles" / "slurm"
DOCS = REPO / "docs" / "slurm.md"
UNAVAILABLE_EXIT = 3        # cluster_up.sh: this machine cannot host the cluster
SNAKEMAKE_TIMEOUT_S = 900
NODE_MEM_CAP_MB = 4000      # profile requests sized for real clusters, capped to fit this small node
NODE_CPU_CAP = 1


@dataclass(frozen=True)
class Cluster:
    dir: Path
    env: dict[str, str]
    partition: str
    account: str


@dataclass(frozen=True)
class SlurmJob:
    job_id: str
    rule: str
    state: str
    partition: str
    account: str
    alloc_tres: str


def _opted_in(config: pytest.Config) -> bool:
    return os.environ.get("ASSOCMEM_SLURM_TESTS") == "1" or "slurm" in (config.getoption("-m") or "")


def _parse_exports(text: str) -> dict[str, str]:
    return dict(re.findall(r"^export (\w+)=(.*)$", text, re.M))


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Cluster:
    if not _opted_in(request.config):
        pytest.skip("opt-in: run with `-m slurm` or ASSOCMEM_SLURM_TESTS=1 (starts SLURM daemons, minutes)")
    if os.geteuid() != 0:
        pytest.skip("needs root to start munge/slurm daemons")
    # Not under pytest's basetemp: munged needs every directory above its socket to be world-executable.
    cluster_dir = Path(tempfile.mkdtemp(prefix="assocmem-slurm."))
    keep_logs = tmp_path_factory.mktemp("slurm_logs")
    request.addfinalizer(lambda: _tear_down(cluster_dir, keep_logs))
    up = subprocess.run([SCRIPTS / "cluster_up.sh", cluster_dir], capture_output=True, text=True, timeout=900,
                        env=real_slurm_env())
    if up.returncode == UNAVAILABLE_EXIT:
        pytest.skip(f"cannot host a SLURM cluster here: {up.stderr.strip().splitlines()[-1]}")
    assert up.returncode == 0, f"cluster_up.sh failed:\n{up.stderr[-3000:]}"
    exports = _parse_exports(up.stdout)
    return Cluster(
        dir=cluster_dir,
        env=real_slurm_env(exports),
        partition=exports["ASSOCMEM_SLURM_PARTITION"],
        account=exports["ASSOCMEM_SLURM_ACCOUNT"],
    )


def _tear_down(cluster_dir: Path, keep_logs: Path) -> None:
    down = subprocess.run([SCRIPTS / "cluster_down.sh", cluster_dir], capture_output=True, text=True,
                          timeout=120, env=real_slurm_env())
    if (cluster_dir / "log").is_dir():
        shutil.copytree(cluster_dir / "log", keep_logs, dirs_exist_ok=True)
    write_text(keep_logs / "cluster_down.log", down.stderr)
    if down.returncode == 0:
        subprocess.run([SCRIPTS / "cluster_down.sh", cluster_dir, "--purge"], capture_output=True, timeout=60,
                       env=real_slurm_env())
    if cluster_dir.is_dir() and not any(cluster_dir.iterdir()):
        cluster_dir.rmdir()   # cluster_up.sh gave up before using it


# --- driving snakemake ---------------------------------------------------------------------------------


def _profile_lists() -> dict[str, list[str]]:
    from snakemake.profiles import ProfileConfigFileParser

    with (PROFILE / "config.yaml").open() as stream:
        parsed = ProfileConfigFileParser().parse(stream)
    return {key: value for key, value in parsed.items() if isinstance(value, list)}


def _cap(entry: str) -> str:
    """'rule:mem_mb=64000' -> 'rule:mem_mb=4000': the profile's sizes, shrunk to fit a 2-CPU node."""
    head, value = entry.rsplit("=", 1)
    name = head.rsplit(":", 1)[-1]
    caps = {"mem_mb": NODE_MEM_CAP_MB, "cpus_per_task": NODE_CPU_CAP}
    if name in caps and value.isdigit():
        value = str(min(int(value), caps[name]))
    return f"{head}={value}"


def slurm_args(cluster: Cluster, with_profile: bool = True) -> list[str]:
    """--profile plus partition/account on the command line.

    A command-line --default-resources/--set-resources replaces the profile's list, so the profile's
    own entries are repeated (this is the recipe docs/slurm.md gives users).
    """
    lists = _profile_lists()
    defaults = [_cap(e) for e in lists.get("default-resources", [])]
    per_rule = [_cap(e) for e in lists.get("set-resources", [])]
    return [
        *(["--profile", str(PROFILE)] if with_profile else []),
        "--default-resources", *defaults,
        f"slurm_partition={cluster.partition}", f"slurm_account={cluster.account}",
        *(["--set-resources", *per_rule] if per_rule else []),
        "--slurm-init-seconds-before-status-checks", "2",
    ]


def run_snakemake(
    args: list[str], workdir: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Snakemake in a subprocess from the repo root; its output is also kept in workdir/snakemake.out."""
    workdir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "snakemake", "-d", str(workdir), *args]
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO,
                            timeout=SNAKEMAKE_TIMEOUT_S)
    write_text(workdir / "snakemake.out", f"$ {' '.join(cmd)}\n{result.stdout}\n{result.stderr}")
    return result


def submitted_job_ids(output: str) -> list[str]:
    return re.findall(r"has been submitted with SLURM jobid (\d+)", output)


def sacct_jobs(cluster: Cluster, job_ids: list[str]) -> list[SlurmJob]:
    fields = "JobID,Comment%200,State,Partition,Account,AllocTRES%200"
    out = subprocess.run(
        ["sacct", "-n", "-P", "-X", "-j", ",".join(job_ids), "-o", fields],
        capture_output=True, text=True, env=cluster.env, check=True, timeout=60,
    ).stdout
    jobs = []
    for line in out.strip().splitlines():
        job_id, comment, state, partition, account, tres = line.split("|")
        jobs.append(SlurmJob(job_id, comment.removeprefix("rule_").split("_wildcards_")[0], state,
                             partition, account, tres))
    return sorted(jobs, key=lambda job: int(job.job_id))


def scontrol_field(cluster: Cluster, job_id: str, field: str) -> str:
    out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True,
                         env=cluster.env, check=True, timeout=60).stdout
    match = re.search(rf"\b{field}=(\S+)", out)
    assert match, f"scontrol show job {job_id} has no {field}: {out}"
    return match.group(1)


def job_counts(output: str) -> dict[str, int]:
    """Snakemake's 'Job stats' table, without the local target rule."""
    table = output.split("Job stats:", 1)[1].split("\n\n", 1)[0]
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", table, re.M))
    return {rule: int(n) for rule, n in counts.items() if rule not in {"total", "all"}}


def sha256_tree(root: Path, relative: list[str]) -> dict[str, str]:
    return {name: hashlib.sha256((root / name).read_bytes()).hexdigest() for name in relative}


def assert_ran_as_slurm_jobs(cluster: Cluster, output: str, expected: dict[str, int]) -> list[SlurmJob]:
    jobs = sacct_jobs(cluster, submitted_job_ids(output))
    per_rule: dict[str, int] = {}
    for job in jobs:
        per_rule[job.rule] = per_rule.get(job.rule, 0) + 1
    assert per_rule == expected, f"sacct rules {per_rule} != snakemake's jobs {expected}"
    assert {job.state for job in jobs} == {"COMPLETED"}, jobs
    assert {(job.partition, job.account) for job in jobs} == {(cluster.partition, cluster.account)}
    return jobs


# --- a tiny three-rule workflow: SLURM vs local, and a GPU rule as a single task ------------------------

TINY_SNAKEFILE = textwrap.dedent(
    """
    localrules: all

    rule all:
        input: "report.txt"

    rule generate_data:
        output: "data.txt"
        params: code="import random as r; r.seed(7); print(*(r.random() for _ in range(2000)), sep=chr(10))"
        shell: "python -c {params.code:q} > {output}"

    rule train:
        # Like the pipeline's train rule: the GPU count is a rule resource. The fake GPUs have no CUDA.
        input: "data.txt"
        output: "model.txt"
        log: "logs/train.env"
        resources: gpu=4
        shell:
            "sort -g {input} | sha256sum > {output}; "
            "echo CUDA_VISIBLE_DEVICES=${{CUDA_VISIBLE_DEVICES:-unset}} "
            "SLURM_NTASKS=${{SLURM_NTASKS:-unset}} > {log}"

    rule report:
        input: data="data.txt", model="model.txt"
        output: "report.txt"
        shell: "wc -l < {input.data} > {output}; cat {input.model} >> {output}"
    """
)
TINY_OUTPUTS = ["data.txt", "model.txt", "report.txt"]


@pytest.fixture(scope="module")
def tiny_runs(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("tiny")
    snakefile = root / "Snakefile"
    write_text(snakefile, TINY_SNAKEFILE)
    local = run_snakemake(["-s", str(snakefile), "--cores", "1"], root / "local")
    assert local.returncode == 0, local.stderr[-3000:]
    on_slurm = run_snakemake(["-s", str(snakefile), *slurm_args(cluster)], root / "slurm", env=cluster.env)
    assert on_slurm.returncode == 0, on_slurm.stderr[-5000:]
    return {"root": root, "local": local, "slurm": on_slurm}


def test_tiny_workflow_runs_every_rule_as_a_slurm_job(cluster, tiny_runs):
    expected = job_counts(tiny_runs["local"].stderr)
    assert expected == {"generate_data": 1, "train": 1, "report": 1}
    assert_ran_as_slurm_jobs(cluster, tiny_runs["slurm"].stderr, expected)


def test_tiny_workflow_outputs_match_a_local_run(tiny_runs):
    root = tiny_runs["root"]
    assert sha256_tree(root / "slurm", TINY_OUTPUTS) == sha256_tree(root / "local", TINY_OUTPUTS)


def test_gpu_rule_is_one_task_holding_all_its_gpus(cluster, tiny_runs):
    jobs = sacct_jobs(cluster, submitted_job_ids(tiny_runs["slurm"].stderr))
    (train,) = [job for job in jobs if job.rule == "train"]
    assert "gres/gpu=4" in train.alloc_tres
    assert scontrol_field(cluster, train.job_id, "NumTasks") == "1"
    # The job step (srun -n1 --gpus=4 inside the allocation) is one process that sees all four GPUs.
    env = (tiny_runs["root"] / "slurm" / "logs" / "train.env").read_text().split()
    assert env == ["CUDA_VISIBLE_DEVICES=0,1,2,3", "SLURM_NTASKS=1"]


# --- failure reporting and --retries --------------------------------------------------------------------

FLAKY_SNAKEFILE = textwrap.dedent(
    """
    rule flaky:
        output: "flaky.txt"
        resources: attempt_seen=lambda wildcards, attempt: attempt
        shell:
            "if [ {resources.attempt_seen} -lt 2 ]; then echo 'failing on purpose' >&2; exit 3; fi; "
            "echo attempt {resources.attempt_seen} > {output}"
    """
)


def test_failed_job_is_reported_and_resubmitted_with_retries(cluster, tmp_path):
    snakefile = tmp_path / "Snakefile"
    write_text(snakefile, FLAKY_SNAKEFILE)
    result = run_snakemake(["-s", str(snakefile), *slurm_args(cluster), "--retries", "1", "flaky.txt"],
                           tmp_path / "run", env=cluster.env)
    assert result.returncode == 0, result.stderr[-5000:]
    failure = re.search(r"SLURM-job '\d+' failed, SLURM status is: 'FAILED'", result.stderr)
    assert failure, result.stderr[-5000:]
    assert "Error in rule flaky" in result.stderr
    jobs = sacct_jobs(cluster, submitted_job_ids(result.stderr))
    assert [(job.rule, job.state) for job in jobs] == [("flaky", "FAILED"), ("flaky", "COMPLETED")]
    assert (tmp_path / "run" / "flaky.txt").read_text() == "attempt 2\n"


# --- snakemake itself as a SLURM job (the sbatch wrapper in docs/slurm.md) -------------------------------


def driver_script_from_docs() -> str:
    match = re.search(r"```bash\n(#!/bin/bash\n#SBATCH.*?)```", DOCS.read_text(), re.S)
    assert match, f"no '#!/bin/bash' + '#SBATCH' code block in {DOCS}"
    return match.group(1)


def test_snakemake_runs_inside_a_job_with_the_documented_wrapper(cluster, tiny_runs, tmp_path):
    wrapper = tmp_path / "run_snakemake.sbatch"
    write_text(wrapper, driver_script_from_docs())
    snakefile = tiny_runs["root"] / "Snakefile"
    workdir = tmp_path / "driven"
    driver_log = tmp_path / "driver-%j.log"
    # The wrapper resolves the profile from the submit directory, as a user would submit it from the repo.
    submit = subprocess.run(
        ["sbatch", "--parsable", "--wait", f"--partition={cluster.partition}", f"--output={driver_log}",
         str(wrapper), "-s", str(snakefile), "-d", str(workdir), *slurm_args(cluster, with_profile=False)],
        capture_output=True, text=True, env=cluster.env, cwd=REPO, timeout=SNAKEMAKE_TIMEOUT_S,
    )
    driver_id = submit.stdout.strip().splitlines()[0]
    log = Path(str(driver_log).replace("%j", driver_id)).read_text()
    assert submit.returncode == 0, log[-5000:]
    assert "SLURM job context" in log
    (driver,) = sacct_jobs(cluster, [driver_id])
    assert driver.state == "COMPLETED"
    inner = assert_ran_as_slurm_jobs(cluster, log, {"generate_data": 1, "train": 1, "report": 1})
    assert all(int(job.job_id) > int(driver_id) for job in inner)
    assert sha256_tree(workdir, TINY_OUTPUTS) == sha256_tree(tiny_runs["root"] / "local", TINY_OUTPUTS)


# --- the pipeline's tiny config: SLURM vs local ---------------------------------------------------------

# Outputs that must be byte-identical between a local and a SLURM run of config/test.yaml. Left out:
# logs/ and benchmarks/ (timings), train/*/metrics.csv and summary.json (throughput columns), model.pt and
# checkpoint.pt (torch.save writes a random serialization id; the weights are compared instead), the report's
# PDFs (creation date) and text (it quotes those timings).
DETERMINISTIC_GLOBS = ["*/data/**/*", "*/activations/**/*", "*/neighbours/**/*", "report/figures/*.png"]
METRIC_COLUMNS = ["step", "lr", "train_loss", "train_eval_ce", "val_ce"]


def deterministic_outputs(results: Path) -> list[str]:
    """The byte-reproducible outputs; provenance stamps record file times, so stamp_contents compares them, and a
    neighbours job's timing.json records its timed engine choice."""
    found = {p for pattern in DETERMINISTIC_GLOBS for p in results.glob(pattern)
             if p.is_file() and not p.name.endswith("provenance.json") and not p.name.startswith("timing.")}
    return sorted(str(p.relative_to(results)) for p in found)


def stamp_contents(results: Path) -> dict[str, tuple]:
    """What each stamp says about its job and files (its settings name paths under the results directory, which
    differs between the two runs)."""
    from assocmem import stamps

    records = {stamp.relative_to(results).as_posix(): json.loads(stamp.read_text())
               for stamp in stamps.find_stamps(results)
               if stamp.relative_to(results).parts[1] in ("data", "activations", "neighbours")}
    return {name: (record["job"], record["code"], {file: entry["sha256"] for file, entry in record["files"].items()})
            for name, record in records.items()}


def model_weights_equal(a: Path, b: Path) -> bool:
    import torch

    state_a = torch.load(a, weights_only=True)["model"]
    state_b = torch.load(b, weights_only=True)["model"]
    return state_a.keys() == state_b.keys() and all(torch.equal(state_a[k], state_b[k]) for k in state_a)


@pytest.mark.e2e
def test_pipeline_test_config_on_slurm_matches_a_local_run(cluster, tmp_path):
    config = ["-s", str(REPO / "Snakefile"), "--configfile", str(REPO / "config" / "test.yaml")]
    # one core: every local job then runs threads_per_job threads, as each SLURM job does (a local run on more cores
    # gives evaluate and neighbours jobs a share of them, assocmem.runtime.share_of_cores)
    local = run_snakemake([*config, "--config", f"results_dir={tmp_path / 'local'}", "--cores", "1"],
                          tmp_path / "local_run")
    assert local.returncode == 0, f"local reference run failed:\n{local.stderr[-5000:]}"
    on_slurm = run_snakemake([*config, "--config", f"results_dir={tmp_path / 'slurm'}", *slurm_args(cluster)],
                             tmp_path / "slurm_run", env=cluster.env)
    assert on_slurm.returncode == 0, on_slurm.stderr[-5000:]

    assert_ran_as_slurm_jobs(cluster, on_slurm.stderr, job_counts(local.stderr))
    names = deterministic_outputs(tmp_path / "local")
    assert len(names) >= 20 and names == deterministic_outputs(tmp_path / "slurm")
    assert sha256_tree(tmp_path / "slurm", names) == sha256_tree(tmp_path / "local", names)
    assert stamp_contents(tmp_path / "slurm") == stamp_contents(tmp_path / "local")
    models = sorted((tmp_path / "local").glob("*/train/*/*/model.pt"))
    assert models
    for model in models:
        twin = tmp_path / "slurm" / model.relative_to(tmp_path / "local")
        assert model_weights_equal(model, twin), model
        metrics = model.with_name("metrics.csv")
        local_metrics = pd.read_csv(metrics)[METRIC_COLUMNS]
        slurm_metrics = pd.read_csv(twin.with_name("metrics.csv"))[METRIC_COLUMNS]
        pd.testing.assert_frame_equal(local_metrics, slurm_metrics)


def cut_grid(config_name: str, exp_name: str, models: tuple[str, ...], fractions: list[float],
             seeds: int | None = None) -> dict:
    """One experiment of a shipped grid config cut to ``models`` x ``fractions`` (x ``seeds``, default its own)."""
    import yaml

    exp = yaml.safe_load((REPO / "config" / config_name).read_text())["experiments"][exp_name]
    exp["models"] = {name: exp["models"][name] for name in models}
    exp["subsets"]["fractions"] = fractions
    exp["sweep"]["seeds"] = seeds or exp["sweep"]["seeds"]
    return exp


@pytest.mark.e2e
def test_a_scaling_sweep_and_a_memorisation_grid_run_through_the_slurm_profile(cluster, tmp_path):
    """One config with both grid kinds, cut down: a 2 x 2 x 2-seed scaling sweep (config/sweep_test.yaml; the
    parametric fit needs at least 5 runs) and a 2 x 2 x 1-seed memorisation grid (config/memorisation_test.yaml).
    Every run is its own SLURM job; the report analyses the sweep and the grid, each in its own section."""
    import yaml

    cfg = {"seed": 7, "threads_per_job": 1, "results_dir": str(tmp_path / "results"), "report": {"toy": True},
           "experiments": {"sweep": cut_grid("sweep_test.yaml", "sweep", ("N1", "N3"), [1.0, 0.3]),
                           "memo": cut_grid("memorisation_test.yaml", "memo", ("m0", "m2"), [1.0, 0.25], seeds=1)}}
    config_file = tmp_path / "grids_slurm.yaml"
    config_file.write_text(yaml.safe_dump(cfg))
    config = ["-s", str(REPO / "Snakefile"), "--configfile", str(config_file)]
    plan = run_snakemake([*config, "-n", "--cores", "1"], tmp_path / "plan")
    assert plan.returncode == 0, plan.stderr[-3000:]
    expected = job_counts(plan.stdout + plan.stderr)
    assert expected["train"] == 2 * 2 * 2 + 2 * 2 and expected["generate_facts"] == 1
    assert expected["sweep"] == 1 and expected["memorisation"] == 1  # two analyses, each its own rule
    assert "activations" not in expected
    on_slurm = run_snakemake([*config, *slurm_args(cluster)], tmp_path / "slurm_run", env=cluster.env)
    assert on_slurm.returncode == 0, on_slurm.stderr[-5000:]
    assert_ran_as_slurm_jobs(cluster, on_slurm.stderr, expected)
    results = tmp_path / "results"
    checks = {c["id"]: c for c in json.loads((results / "report" / "checks.json").read_text())["checks"]}
    numbers = checks["scaling"]["numbers"]
    assert numbers["cells"] == 4 and numbers["runs"] == 8 and numbers["n_tokens_span"] > 3
    analysis = json.loads((results / "memo" / "memorisation" / "analysis.json").read_text())
    assert analysis["n_runs"] == 4 and not (results / "memo" / "sweep").exists()
    for claim in ("scaling", "memorisation"):
        assert checks[claim]["verdict"] in {"reproduced", "refuted", "not-testable"}
    html = (results / "report" / "index.html").read_text()
    assert "Scaling sweep: sweep" in html and "Memorisation grid: memo" in html
