"""Every example command in the documentation runs as written: each ``snakemake`` and ``python -m assocmem run``
line as a dry run (the whole DAG built, no job run), the model commands on a tiny model trained at the path they
name, in a copy of the checkout. Commands that need a network, a SLURM cluster or minutes of benchmarking are
listed, each with its reason, and any other command fails the test until it is classified here."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import ROOT

pytestmark = pytest.mark.e2e

DOCS = ("README.md", "config/README.md", "docs/paper_scale.md", "docs/slurm.md", "docs/results.md",
        "benchmarks/README.md")
NOT_RUN = {  # first word(s) of a command -> why this test does not run it
    "pip": "an install step: CI installs from nothing (.ci/run)",
    "python -m pytest": "the test command itself",
    "python benchmarks/": "a benchmark, minutes of timing (benchmarks/README.md)",
    "benchmarks/gpu_check.sh --dry-run": "the GPU check's CPU dry run: tests/unit/train/test_gpu_check.py runs it",
    "OUT=/tmp/gpu-check benchmarks/gpu_check.sh": "the GPU check: needs a CUDA machine (benchmarks/README.md)",
    "mkdir -p .whl": "fetches the GPU machine's wheels from PyPI (an install step for the GPU check)",
    "python3.12 -m venv": "builds a venv of the GPU image's Python and torch (an install step before a GPU session)",
    "/tmp/v312/bin/pip": "installs into that venv (an install step before a GPU session)",
    "export PATH=/tmp/v312/bin": "puts that venv first for the two commands below it (benchmarks/README.md)",
    "bash benchmarks/gpu_check.sh --dry-run": "the GPU check's CPU dry run: tests/unit/train/test_gpu_check.py runs it",
    "PYTHONPATH=$PWD/src:/tmp/gpu-check-site": "the main run under the GPU image's versions: the default run, minutes",
    "python -m assocmem.memorisation.decisive": "rewrites its record in docs/results/ (minutes of simulation); "
                                                "tests/unit/docs/test_decisive_records.py recomputes its cost",
    "python -m assocmem.report.reanalyse": "rewrites its record in docs/results/ (10 minutes of profile fits); "
                                           "tests/unit/docs/test_memorisation_records.py refits it",
    "sinfo": "a SLURM cluster's own command", "sacctmgr": "a SLURM cluster's own command",
    "sbatch": "a SLURM cluster's own command", "squeue": "a SLURM cluster's own command",
    "sacct": "a SLURM cluster's own command", "tail -f": "watches a SLURM driver's log",
    "ls .snakemake/slurm_logs": "lists a SLURM run's logs", "eval": "brings up a SLURM test cluster (root, apt)",
    "tests/slurm/": "a SLURM test cluster's script", "#!": "a batch script (docs/slurm.md)",
    "set -euo": "inside the batch script", "cd \"${SLURM_SUBMIT_DIR}\"": "inside the batch script",
    "exec snakemake": "inside the batch script (its dry run is the line above it in docs/slurm.md)",
}
MODEL_COMMANDS = ("python -m assocmem sample", "python -m assocmem evaluate")


def fenced(text: str, language: str) -> list[str]:
    return [m.group(1) for m in re.finditer(rf"^```{language}\n(.*?)^```", text, re.S | re.M)]


def commands(text: str) -> list[str]:
    """The commands of a document's bash blocks: continuation lines joined, comments dropped."""
    found = []
    for block in fenced(text, "bash"):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip()
            if line.startswith("#!"):
                found.append(line)
            elif line and not line.startswith("#"):
                found.append(" ".join(shlex.split(line, comments=True)) if "#" in line else line)
    return found


def documented() -> list[tuple[str, str]]:
    return [(doc, command) for doc in DOCS for command in commands((ROOT / doc).read_text())]


def reason_not_run(command: str) -> str | None:
    return next((why for start, why in NOT_RUN.items() if command.startswith(start)), None)


def as_run(command: str) -> list[str]:
    """The command with this interpreter for ``python`` and ``snakemake``, and ``-n`` where it runs jobs."""
    words = shlex.split(command)
    if words[0] == "snakemake":
        words = [sys.executable, "-m", "snakemake", *words[1:]]
        dry = "--lint" not in words
    elif words[:4] == ["python", "-m", "assocmem", "run"]:
        words, dry = [sys.executable, *words[1:]], True
    else:
        words, dry = [sys.executable, *words[1:]], False
    return words + (["-n"] if dry and "-n" not in words else [])


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """A copy of this checkout's files (tracked and new, not ignored), as a fresh clone would have them."""
    copy = tmp_path_factory.mktemp("checkout")
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=False)
    if listed.returncode != 0:
        pytest.skip(f"not a git checkout: {listed.stderr.decode()[:200]}")
    for name in filter(None, listed.stdout.decode().split("\0")):
        source, target = ROOT / name, copy / name
        if source.is_symlink() or source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target, follow_symlinks=False)
    return copy


def run(words: list[str], cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(words, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)


def test_every_documented_command_is_run_here_or_listed_with_a_reason() -> None:
    unclassified = [(doc, command) for doc, command in documented()
                    if reason_not_run(command) is None and not command.startswith(("snakemake ", "python -m assocmem"))]
    assert not unclassified, f"classify these example commands in {__file__}: {unclassified}"
    assert any(command.startswith(MODEL_COMMANDS) for _, command in documented())


@pytest.mark.parametrize(("doc", "command"), [
    pytest.param(doc, command, id=f"{doc}: {command[:70]}") for doc, command in documented()
    if reason_not_run(command) is None and not command.startswith(MODEL_COMMANDS)])
def test_a_documented_pipeline_command_builds_its_dag(checkout, doc, command) -> None:
    result = run(as_run(command), checkout)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"{doc}: `{command}` failed:\n{output[-3000:]}"
    assert "Traceback" not in output


def tiny_default(checkout: Path) -> Path:
    """config/test.yaml's sizes with the default config's names for models and subsets, so the model commands
    find a run at the paths they name."""
    config = yaml.safe_load((checkout / "config" / "test.yaml").read_text())
    default = yaml.safe_load((checkout / "config" / "config.yaml").read_text())
    qf, tiny = config["experiments"]["qf"], config["experiments"]["qf"]["models"]["tiny"]
    qf["models"] = {name: tiny for name in default["experiments"]["qf"]["models"]}
    qf["subsets"] = default["experiments"]["qf"]["subsets"]
    path = checkout / "tiny_default.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_the_documented_model_commands_run_on_a_tiny_model(checkout) -> None:
    model_commands = [command for _, command in documented() if command.startswith(MODEL_COMMANDS)]
    runs = sorted({m.group(1) for c in model_commands for m in re.finditer(r"results/qf/train/(\w+/pct\w+)", c)})
    targets = [f"results/qf/train/{run}/model.pt" for run in runs] + ["results/qf/data/raw/question.dev"]
    built = run([sys.executable, "-m", "snakemake", "--cores", "2", *targets,
                 f"--configfile={tiny_default(checkout)}"], checkout, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    for command in model_commands:
        result = run(as_run(command), checkout)
        assert result.returncode == 0, f"`{command}` failed:\n{result.stderr[-3000:]}"
        assert result.stdout.strip(), f"`{command}` printed nothing"
    for block in fenced((checkout / "README.md").read_text(), "python"):
        result = run([sys.executable, "-c", block + "\nprint(type(model).__name__)"], checkout)
        assert result.returncode == 0 and result.stdout.split()[-1] == "DecoderLM", result.stderr[-3000:]
