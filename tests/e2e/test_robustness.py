"""Never serve a stale or corrupt result: two runs give the same bytes, a pipeline killed at any point and
recovered with the documented command ends byte-identical to an uninterrupted run, and a changed config never
resumes another configuration's checkpoint."""

from __future__ import annotations

import json
import os
import re
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

from assocmem import stamps

pytestmark = pytest.mark.e2e
PCT100_MODEL = "results/qf/train/tiny/pct100/model.pt"


def test_two_runs_are_byte_identical(tiny_run, tmp_path):
    snakemake(tmp_path, "--cores", "2")
    first, second = science_checksums(tiny_run), science_checksums(tmp_path)
    assert first.keys() == second.keys() and len(first) > 40
    differing = sorted(name for name in first if first[name] != second[name])
    assert differing == [], differing
    # the stamps record file times; what they say about content is the same
    assert stamp_contents(tiny_run) == stamp_contents(tmp_path) and len(stamp_contents(tmp_path)) >= 10


def stamp_contents(workdir: Path) -> dict[str, str]:
    """What each job's stamp says about content; the report's aside (it hashes the report's pages, whose provenance
    section carries the build's timings: no science, see conftest.NOT_SCIENCE)."""
    results = workdir / "results"
    return {stamp.relative_to(results).as_posix(): stamps.content_digest(json.loads(stamp.read_text()))
            for stamp in stamps.find_stamps(results) if stamp.parent.name != "report"}


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


def result_files(workdir: Path) -> set[str]:
    """Every file under results/, a temporary file of an atomic write named without its random part
    (``.x.npy.tmp``), logs, timings and the run's claim aside."""
    results = workdir / "results"
    found = set()
    for folder, _, names in os.walk(results):
        rel = Path(folder).relative_to(results).as_posix()
        if not rel.startswith(("logs", "benchmarks", ".cache")):
            found.update(f"{rel}/{TEMPORARY.sub(TEMPORARY_NAME, name)}" for name in names if "assocmem-run" not in name)
    return found


TEMPORARY = re.compile(r"^(\..+)\.[^.]+\.tmp(\.\w+)?$")  # io.atomic_path: .<name>.<random>.tmp<suffix>
TEMPORARY_NAME = r"\1.tmp"


def kill_after_new_files(workdir: Path, seen: set[str], count: int = 3) -> str | None:
    """Run the documented command, `python -m assocmem run` (no `--unlock` before it), and SIGKILL it, jobs
    included, the moment the ``count``-th file appears under results/ that no earlier run showed (``seen``, updated):
    inside a job, mid-write (a temporary file), between a job's outputs and its stamp. Returns that file, or None
    when the run finished first."""
    before = result_files(workdir) | seen
    cmd = [sys.executable, "-m", "assocmem", "run", "-s", str(ROOT / "Snakefile"), "--directory", str(workdir),
           "--configfile", str(ROOT / "config" / "test.yaml"), "--cores", "2"]
    process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
                               text=True)
    appeared: list[str] = []
    deadline = time.monotonic() + 300
    while process.poll() is None and time.monotonic() < deadline:
        appeared += sorted(result_files(workdir) - before - set(appeared))
        if len(appeared) >= count:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            seen.update(appeared)
            return appeared[-1]
        time.sleep(0.005)
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        raise AssertionError("the run neither finished nor wrote a file within 300 s")
    assert process.returncode == 0, f"a rerun after a kill failed: {process.stderr.read()[-3000:]}"
    return None


def test_the_kill_matrix_recovers_with_no_manual_step_to_the_same_bytes(tiny_run, tmp_path):
    """Issue 28: SIGKILL the run (jobs included) every 7 new files, all through the pipeline (12 kills: each restart
    costs a Snakemake start, so 20 kills at every 4 files took 3.5 min of CI), and rerun the same
    `python -m assocmem run` command, nothing else, each time. After every kill, every artifact on disk is complete
    and correct (atomic writes: equal to an uninterrupted run's) and every stamp agrees with its files; at the end
    the results are byte-identical to the uninterrupted run and no lock or claim is left."""
    reference = science_checksums(tiny_run)
    kills, corrupt, unstamped, seen = [], [], [], set()
    while len(kills) < 12 and (killed_at := kill_after_new_files(tmp_path, seen, count=7)) is not None:
        kills.append(killed_at)
        # files that are no artifact (a checkpoint, metrics.inprogress.csv) may exist now; they must be gone at the end
        now = science_checksums(tmp_path)
        corrupt += [f"{killed_at}: {name}" for name, digest in now.items()
                    if name in reference and reference[name] != digest]
        unstamped += [f"{killed_at}: {problem}" for problem in stamps.scan(tmp_path / "results")]
    finish = assocmem_run(tmp_path, "--cores", "2")
    assert finish.returncode == 0, (finish.stdout + finish.stderr)[-3000:]
    final = science_checksums(tmp_path)
    differing = sorted(name for name in reference if final.get(name) != reference[name])
    print(f"kills: {len(kills)}, corrupt artifacts after a kill: {len(corrupt)}, stamp problems after a kill: "
          f"{len(unstamped)}, manual steps: 0, differing files at the end: {len(differing)} of {len(reference)}")
    print("killed at: " + ", ".join(kills))
    assert len(kills) >= 12, f"only {len(kills)} kills: the matrix no longer kills enough"
    assert {kill.split("/")[1] for kill in kills if kill.startswith("qf/")} >= {"data", "train", "activations"}
    assert corrupt == [] and unstamped == [] and differing == [] and final.keys() == reference.keys()
    locks = tmp_path / ".snakemake" / "locks"
    assert not (locks.is_dir() and any(locks.iterdir())) and not (tmp_path / "results" / ".assocmem-run.json").exists()


def assocmem_run(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "assocmem", "run", "-s", str(ROOT / "Snakefile"), "--directory", str(workdir),
           "--configfile", str(ROOT / "config" / "test.yaml"), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def test_after_a_kill_assocmem_run_says_it_removed_the_stale_lock(tmp_path):
    assert run_until(tmp_path, "results/qf/train/tiny/pct100/checkpoint.pt"), "the run finished before the kill"
    assert any((tmp_path / ".snakemake" / "locks").iterdir())
    result = assocmem_run(tmp_path, "--cores", "2", "--until", "subsets")
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert f"removed the lock a killed run left in {tmp_path.resolve()}" in result.stderr


def test_a_live_run_keeps_its_lock(tmp_path):
    """The lock is removed only when no Snakemake works in the directory: a second run beside a live one is refused
    by Snakemake, and the live run finishes."""
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(tmp_path),
           "--configfile", str(ROOT / "config" / "test.yaml"), "--cores", "1", "--until", "train"]
    live = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    locks = tmp_path / ".snakemake" / "locks"
    deadline = time.monotonic() + 120
    while not (locks.is_dir() and any(locks.iterdir())) and time.monotonic() < deadline:
        time.sleep(0.05)
    second = assocmem_run(tmp_path, "--cores", "1")
    assert live.wait(timeout=600) == 0
    assert second.returncode != 0 and "removed the lock" not in second.stderr
    assert "cannot be locked" in second.stdout + second.stderr


def test_another_checkout_is_refused_the_results_dir_a_live_run_holds(tmp_path):
    """Issue 28: Snakemake's lock lives in each checkout's working directory, so the results directory carries its
    own claim: a run in checkout B is refused, naming checkout A, while A's run writes the shared results_dir, and
    proceeds once that run is gone (a SIGKILL leaves A's claim behind, stale)."""
    checkout_a, checkout_b = copy_of_the_workflow(tmp_path / "A"), copy_of_the_workflow(tmp_path / "B")
    results = tmp_path / "shared results"
    config = tmp_path / "shared.yaml"
    config.write_text(yaml.safe_dump({**yaml.safe_load((ROOT / "config" / "test.yaml").read_text()),
                                      "results_dir": str(results)}))
    claim = results / ".assocmem-run.json"
    cmd = [sys.executable, "-m", "snakemake", "-s", str(checkout_a / "Snakefile"), "--directory", str(checkout_a),
           "--configfile", str(config), "--cores", "1"]
    live = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not claim.exists() and live.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert claim.exists(), "checkout A's run did not claim the results directory"
        refused = snakemake(checkout_b, "-n", config=config, snakefile=checkout_b / "Snakefile", check=False,
                            timeout=120)
    finally:
        os.killpg(live.pid, signal.SIGKILL)
        live.wait()
    text = refused.stdout + refused.stderr
    assert refused.returncode != 0 and "Traceback" not in text, text[-3000:]
    assert f"results directory {results.resolve()} is in use" in text
    assert f"checkout {checkout_a.resolve()}" in text and f"process {live.pid}" in text
    snakemake(checkout_b, "-n", config=config, snakefile=checkout_b / "Snakefile", timeout=120)
    assert json.loads(claim.read_text())["checkout"] == str(checkout_a.resolve())  # a dry run claims nothing


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
    trainer = repo / "src" / "assocmem" / "train" / "loop.py"
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


def trained_seed(workdir: Path) -> int:
    stamp = workdir / "results" / "qf" / "train" / "tiny" / "pct100" / "provenance.json"
    return json.loads(stamp.read_text())["params"]["seed"]


def test_results_snakemake_has_no_record_of_are_checked_against_the_config(tiny_run, tiny_copy, tmp_path):
    """Snakemake's rerun triggers read its records in .snakemake/metadata, keyed by path: with them lost (a fresh
    clone beside old results) a changed seed reran nothing, and a results directory copied from a run of another
    config was kept whole, with no word from the run or from `assocmem verify`. The stamps say what each job ran
    with: such jobs run again, the run names them, and the next run has nothing to do."""
    seed8 = tmp_path / "seed8.yaml"
    seed8.write_text(re.sub(r"(?m)^seed: .*$", "seed: 8", (ROOT / "config" / "test.yaml").read_text()))
    shutil.rmtree(tiny_copy / ".snakemake" / "metadata")
    plan = snakemake(tiny_copy, "-n", "--cores", "2", config=seed8)
    assert planned_rules(plan) >= {"generate_data", "tokenize", "train", "activations", "neighbours", "report"}
    said = [line for line in plan.stderr.splitlines() if "made with other settings or code" in line]
    assert len(said) == 1 and said[0].startswith("assocmem: 11 jobs of this config hold results made with other "
                                                 "settings"), plan.stderr[-2000:]  # 10 jobs and the report
    assert "results/qf/data/fresh (other settings)" in said[0] and said[0].endswith("and 8 more.")
    snakemake(tiny_copy, "--cores", "2", config=seed8)
    assert trained_seed(tiny_copy) == 8
    assert planned_rules(snakemake(tiny_copy, "-n", "--cores", "2", config=seed8)) == set()

    # the seed-8 results copied over a seed-7 run's, whose records Snakemake keeps: the seed-7 config reruns them
    other = tmp_path / "other"
    shutil.copytree(tiny_run, other, symlinks=True, ignore=shutil.ignore_patterns("locks", "incomplete"))
    assert planned_rules(snakemake(other, "-n", "--cores", "2")) == set()  # its own, seed-7 results: up to date
    shutil.rmtree(other / "results")
    shutil.copytree(tiny_copy / "results", other / "results", symlinks=True)
    assert trained_seed(other) == 8
    assert planned_rules(snakemake(other, "-n", "--cores", "2")) >= {"train", "activations", "report"}


def test_changed_code_reruns_its_jobs_and_their_dependants(tiny_copy, tmp_path):
    repo = copy_of_the_workflow(tmp_path / "repo")
    assert dry_run(repo, tiny_copy) == set()  # same code: nothing to do
    package = repo / "src" / "assocmem"
    for code in ("report/render.py", "model.py"):
        (package / code).write_text((package / code).read_text() + "\n# changed\n")
        if code == "report/render.py":
            assert dry_run(repo, tiny_copy) == {"report"}
    assert dry_run(repo, tiny_copy) == {"train", "activations", "neighbours", "evaluate", "report"}


def test_ctrl_c_during_the_report_keeps_the_previous_one_and_ends_with_one_line(tiny_copy):
    """Issue 39: Ctrl-C (SIGINT to the process group) during the report printed a KeyboardInterrupt traceback and
    deleted the previous report; a second Ctrl-C printed Snakemake's "Cannot close a running event loop" traceback;
    the run ended with the false "a job failed ... names the file or config key" and "run --unlock" hints."""
    report = tiny_copy / "results" / "report"
    previous = (report / "checks.json").read_bytes()
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(tiny_copy),
           "--configfile", str(ROOT / "config" / "test.yaml"), "--cores", "1", "--forcerun", "report"]
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
    deadline = time.monotonic() + 120
    while process.poll() is None and time.monotonic() < deadline and not list(
            (tiny_copy / "results").glob(".report.*.tmp")):  # the report job is building (assocmem.report.swap)
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGINT)
    time.sleep(0.2)
    os.kill(process.pid, signal.SIGINT)
    output = process.communicate(timeout=300)[0]
    assert process.returncode == 130, output[-3000:]
    for wrong in ("Traceback", "event loop", "a job failed", "--unlock"):
        assert wrong not in output, output[-3000:]
    assert output.rstrip().splitlines()[-1].startswith("assocmem: interrupted (Ctrl-C): the run stopped and keeps")
    assert "--forcerun report` resumes from there." in output
    assert (report / "checks.json").read_bytes() == previous and (report / "index.html").stat().st_mtime == 0
    assert not (tiny_copy / ".snakemake" / "locks").exists() or not any((tiny_copy / ".snakemake" / "locks").iterdir())
