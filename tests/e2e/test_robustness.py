"""Never serve a stale or corrupt result: two runs give the same bytes, a pipeline killed at any point and
recovered with the documented command ends byte-identical to an uninterrupted run, and a changed config never
resumes another configuration's checkpoint."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, science_checksums, snakemake
from helpers import planned_rules

pytestmark = pytest.mark.e2e
PCT100_MODEL = "results/qf/train/tiny/pct100/model.pt"


def test_two_runs_are_byte_identical(tiny_run, tmp_path):
    snakemake(tmp_path, "--cores", "2")
    first, second = science_checksums(tiny_run), science_checksums(tmp_path)
    assert first.keys() == second.keys() and len(first) > 40
    differing = sorted(name for name in first if first[name] != second[name])
    assert differing == [], differing


def run_until(workdir: Path, trigger: str, *args: str, config: Path | None = None, timeout: float = 300,
              snakefile: Path | None = None) -> bool:
    """Start snakemake and SIGKILL it, jobs included, as soon as ``workdir/trigger`` exists.

    Returns whether it was killed (False: the run ended before the trigger appeared)."""
    cmd = [sys.executable, "-m", "snakemake", "-s", str(snakefile or ROOT / "Snakefile"), "--directory", str(workdir),
           "--configfile", str(config or ROOT / "config" / "test.yaml"), "--cores", "2", *args]
    process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + timeout
    while process.poll() is None and time.monotonic() < deadline:
        if (workdir / trigger).exists():
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            return True
        time.sleep(0.02)
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        raise AssertionError(f"snakemake did not reach {trigger} within {timeout} s")
    return False


def recover(workdir: Path, *args: str, config: Path | None = None, snakefile: Path | None = None) -> None:
    """The recovery README.md documents after a hard kill: unlock, then rerun the same command."""
    snakemake(workdir, "--unlock", config=config, snakefile=snakefile)
    snakemake(workdir, "--cores", "2", *args, config=config, snakefile=snakefile)


KILL_POINTS = (
    "results/qf/data/raw/manifest.json",  # during data generation / tokenization
    "results/qf/train/tiny/pct100/checkpoint.pt",  # mid-training, a checkpoint on disk
    "results/qf/activations/tiny/pct100/train.npy",  # between the two activation arrays of one job
    "results/qf/neighbours/tiny/pct10/self.parquet",  # mid neighbour search
)


def test_killed_pipeline_recovers_to_the_same_bytes(tiny_run, tmp_path):
    reference = science_checksums(tiny_run)
    kills, corrupt = 0, []
    for trigger in KILL_POINTS:
        if run_until(tmp_path, trigger):
            kills += 1
            # every artifact on disk right after a kill must be complete and correct (atomic writes), so equal to
            # the reference: a half-written file that looks complete would show up here. (Files that are no
            # artifact, a checkpoint or metrics.inprogress.csv, may exist now; they must be gone at the end.)
            now = science_checksums(tmp_path)
            corrupt += [name for name, digest in now.items() if name in reference and reference[name] != digest]
        snakemake(tmp_path, "--unlock")
    recover(tmp_path)
    final = science_checksums(tmp_path)
    differing = sorted(name for name in reference if final.get(name) != reference[name])
    print(f"kills: {kills}, corrupt artifacts after a kill: {len(corrupt)}, differing files at the end: "
          f"{len(differing)} of {len(reference)}")
    assert kills >= 3, "the pipeline finished before most kill points; the test no longer kills anything"
    assert corrupt == [] and differing == [] and final.keys() == reference.keys()


def assocmem_run(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "assocmem", "run", "-s", str(ROOT / "Snakefile"), "--directory", str(workdir),
           "--configfile", str(ROOT / "config" / "test.yaml"), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def test_after_a_kill_assocmem_run_needs_no_manual_unlock(tiny_run, tmp_path):
    """Issue 28: a rerun after a hard kill proceeds with no `--unlock`, and ends byte-identical to a clean run."""
    assert run_until(tmp_path, KILL_POINTS[1]), "the run finished before the kill point"
    assert any((tmp_path / ".snakemake" / "locks").iterdir())
    result = assocmem_run(tmp_path, "--cores", "2")
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert f"removed the lock a killed run left in {tmp_path.resolve()}" in result.stderr
    reference, final = science_checksums(tiny_run), science_checksums(tmp_path)
    assert final == reference


def test_a_live_run_keeps_its_lock(tmp_path):
    """The lock is removed only when no Snakemake works in the directory: a second run beside a live one is refused
    by Snakemake, and the live run finishes."""
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(tmp_path),
           "--configfile", str(ROOT / "config" / "test.yaml"), "--cores", "1"]
    live = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    locks = tmp_path / ".snakemake" / "locks"
    deadline = time.monotonic() + 120
    while not (locks.is_dir() and any(locks.iterdir())) and time.monotonic() < deadline:
        time.sleep(0.05)
    second = assocmem_run(tmp_path, "--cores", "1")
    assert live.wait(timeout=600) == 0
    assert second.returncode != 0 and "removed the lock" not in second.stderr
    assert "cannot be locked" in second.stdout + second.stderr


@pytest.mark.parametrize("change", [{"train": {"lr": 1.0e-3}}, {"train": {"max_steps": 80}}, {"seed": 8}],
                         ids=["lr", "max_steps", "seed"])
def test_a_changed_config_never_resumes_an_old_checkpoint(tmp_path, change):
    """Kill training of config A mid-run (its checkpoint stays on disk), rerun with config B in the same
    directory: the model equals a fresh run of B, byte for byte."""
    base = yaml.safe_load((ROOT / "config" / "test.yaml").read_text())
    changed = yaml.safe_load((ROOT / "config" / "test.yaml").read_text())
    for key, value in change.items():
        if isinstance(value, dict):
            changed["experiments"]["qf"][key].update(value)
        else:
            changed[key] = value
    config_a, config_b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    config_a.write_text(yaml.safe_dump(base))
    config_b.write_text(yaml.safe_dump(changed))
    assert run_until(tmp_path / "run", PCT100_MODEL.replace("model.pt", "checkpoint.pt"), PCT100_MODEL,
                     config=config_a)
    recover(tmp_path / "run", PCT100_MODEL, config=config_b)
    snakemake(tmp_path / "fresh", "--cores", "2", PCT100_MODEL, config=config_b)
    assert (tmp_path / "run" / PCT100_MODEL).read_bytes() == (tmp_path / "fresh" / PCT100_MODEL).read_bytes()


def dry_run(repo: Path, workdir: Path) -> set[str]:
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "-s", str(repo / "Snakefile"), "--directory", str(workdir),
         "--configfile", str(repo / "config" / "test.yaml"), "--cores", "2"],
        capture_output=True, text=True, timeout=300, check=True)
    return planned_rules(result)


def copy_of_the_workflow(repo: Path) -> Path:
    """A copy of this checkout's workflow and package at ``repo``, to edit; its Snakefile runs its own src."""
    repo.mkdir()
    for name in ("Snakefile", "workflow", "config", "src"):
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy2
        copy(ROOT / name, repo / name, **({"ignore": shutil.ignore_patterns("__pycache__")}
                                           if (ROOT / name).is_dir() else {}))
    return repo


def test_changed_code_never_resumes_an_old_checkpoint(tmp_path):
    """Kill training mid-run (its checkpoint stays on disk), change the trainer, rerun: the model equals a fresh
    run of the new code, byte for byte, because a checkpoint resumes only under the code digest that wrote it.
    The change (another initialisation seed) makes a resumed model differ from a fresh one."""
    repo = copy_of_the_workflow(tmp_path / "repo")
    snakefile, checkpoint = repo / "Snakefile", PCT100_MODEL.replace("model.pt", "checkpoint.pt")
    assert run_until(tmp_path / "run", checkpoint, PCT100_MODEL, snakefile=snakefile)
    trainer = repo / "src" / "assocmem" / "train.py"
    old = "torch.manual_seed(self.seed)\n"
    assert trainer.read_text().count(old) == 1
    trainer.write_text(trainer.read_text().replace(old, "torch.manual_seed(self.seed + 1)\n"))
    recover(tmp_path / "run", PCT100_MODEL, snakefile=snakefile)
    snakemake(tmp_path / "fresh", "--cores", "2", PCT100_MODEL, snakefile=snakefile)
    assert (tmp_path / "run" / PCT100_MODEL).read_bytes() == (tmp_path / "fresh" / PCT100_MODEL).read_bytes()
    log = (tmp_path / "run" / "results" / "logs" / "qf" / "train_tiny_pct100.log").read_text()
    assert "another configuration, data, seed or code" in log


def test_a_deleted_output_reruns_its_job_and_its_dependants(tiny_copy):
    """Snakemake leaves a deleted intermediate alone while its consumers are up to date; every artifact is a
    target of the default rule, so deleting one reruns its job (to the same bytes) and then its dependants."""
    model = tiny_copy / "results" / "qf" / "train" / "tiny" / "pct10" / "model.pt"
    before = model.read_bytes()
    model.unlink()
    assert dry_run(ROOT, tiny_copy) == {"train", "activations", "neighbours", "report"}
    snakemake(tiny_copy, "--cores", "2")
    assert model.read_bytes() == before and dry_run(ROOT, tiny_copy) == set()


def test_changed_code_reruns_its_jobs_and_their_dependants(tiny_copy, tmp_path):
    repo = copy_of_the_workflow(tmp_path / "repo")
    assert dry_run(repo, tiny_copy) == set()  # same code: nothing to do
    package = repo / "src" / "assocmem"
    for code in ("report/render.py", "model.py"):
        (package / code).write_text((package / code).read_text() + "\n# changed\n")
        if code == "report/render.py":
            assert dry_run(repo, tiny_copy) == {"report"}
    assert dry_run(repo, tiny_copy) == {"train", "activations", "neighbours", "evaluate", "report"}
