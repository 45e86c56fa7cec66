"""A stacked group's checkpoint (issue 41): a killed group resumes where it stood and ends with the files of an
uninterrupted group, bit for bit; a checkpoint of other code or replicas is not resumed from; the file is written
atomically."""

from __future__ import annotations

import logging

import pandas as pd
import pytest
import torch
from test_stacked import REPLICAS, make_job, no_peak_timing  # noqa: F401 - the fixture is autouse here too

from assocmem.errors import AssocmemError
from assocmem.tokenstore import TokenStore, data_fingerprint
from assocmem.train import job_fingerprint
from assocmem.train.stacked import StackedTraining, check_stackable
from assocmem.train.stacked_checkpoint import GROUP_CHECKPOINT

INTERVAL = 3  # checkpoints at steps 3 and 6 of the 8; replica seed 5 stops early at step 4, seed 4 at its budget 5
# and seed 6 never improves on its first evaluation (lr 0: its weights never move), so its best.pt, from step 2,
# comes from the checkpoint's copy of its in-progress best weights, not from a replayed evaluation
GROUP = [*REPLICAS, (6, {"lr": 0.0})]
DECLARED = ("model.pt", "best.pt", "metrics.csv", "summary.json", "eval_rows.parquet")  # the rule's outputs
COMPARED = ("model.pt", "best.pt", "metrics.csv", "summary.json")  # timing.* hold wall-clock seconds


class Killed(Exception):
    """Stands for a kill of the group's process."""


def group(tmp_path, prefix: str) -> list:
    return [make_job(tmp_path, tmp_path / f"{prefix}{seed}", seed, checkpoint_interval=INTERVAL, **kw)
            for seed, kw in GROUP]


def run_until_killed(monkeypatch, jobs, at: int) -> list[int]:
    """Run ``jobs`` as a group killed when it starts step ``at`` (0-based); the steps it started."""
    started, step = [], StackedTraining._step

    def dying(self, stack, optimizer, n, active, autocast):
        started.append(n)
        if n == at:
            raise Killed
        return step(self, stack, optimizer, n, active, autocast)

    with monkeypatch.context() as patch:
        patch.setattr(StackedTraining, "_step", dying)
        with pytest.raises(Killed):
            StackedTraining(jobs).run()
    return started


@pytest.mark.parametrize("kill_at", [5, 7])  # resumes at 3 (seed 5 stops again after it) / at 6 (both had stopped)
def test_a_killed_group_resumes_to_the_files_of_an_uninterrupted_one(tmp_path, monkeypatch, caplog, kill_at):
    StackedTraining(group(tmp_path, "whole")).run()
    run_until_killed(monkeypatch, group(tmp_path, "killed"), kill_at)
    kept = tmp_path / "killed5"  # stopped before the kill: its files survive (a direct caller) ...
    before = {p.name: p.stat().st_mtime_ns for p in kept.iterdir()}
    for seed in (3, 4, 6):  # ... the others' are deleted, as Snakemake does to a rerun job's outputs
        for name in DECLARED:
            (tmp_path / f"killed{seed}" / name).unlink(missing_ok=True)
    with caplog.at_level(logging.INFO):
        summaries = StackedTraining(group(tmp_path, "killed")).run()
    assert f"stacked group resumed at step {kill_at // INTERVAL * INTERVAL}" in caplog.text
    assert [s["steps"] for s in summaries] == [8, 5, 4, 8] and summaries[3]["best_step"] == 2
    for seed, _ in GROUP:
        whole, resumed = tmp_path / f"whole{seed}", tmp_path / f"killed{seed}"
        assert sorted(p.name for p in resumed.iterdir()) == sorted(p.name for p in whole.iterdir())
        for name in COMPARED:  # the same step sequence from the same bits, on the same host and threads: exact
            assert (resumed / name).read_bytes() == (whole / name).read_bytes(), (seed, name)
        pd.testing.assert_frame_equal(pd.read_parquet(resumed / "eval_rows.parquet"),
                                      pd.read_parquet(whole / "eval_rows.parquet"))
    if kill_at == 7:  # both had stopped before the checkpoint and stay frozen: neither is finished again
        assert {p.name: p.stat().st_mtime_ns for p in kept.iterdir()} == before  # kept files: not rewritten
        assert ("killed4 finished at step 5; written back: model.pt, best.pt, metrics.csv, eval_rows.parquet, "
                "summary.json") in caplog.text


def checkpoint_of_other(tmp_path, change: str):
    """The replicas this test runs after a group left its checkpoint, changed as ``change`` says."""
    jobs = group(tmp_path, "g")
    if change == "code":
        train = TokenStore(tmp_path / "tokens", "train")
        for job in jobs:  # build_job(code=...): the train stage's code digest enters the fingerprint
            job.fingerprint = job_fingerprint(job.model_config, job.settings, job.seed, data_fingerprint(train),
                                              code="another digest")
    elif change == "replicas":
        jobs = jobs[:2]
    else:
        (tmp_path / "g3" / GROUP_CHECKPOINT).write_bytes(b"not a checkpoint")
    return jobs


@pytest.mark.parametrize(("change", "why"), [("code", "fingerprints differ"), ("replicas", "other replicas"),
                                             ("unreadable", "unreadable")])
def test_a_checkpoint_of_other_code_or_replicas_is_not_resumed(tmp_path, monkeypatch, caplog, change, why):
    run_until_killed(monkeypatch, group(tmp_path, "g"), 4)
    assert (tmp_path / "g3" / GROUP_CHECKPOINT).is_file()
    jobs = checkpoint_of_other(tmp_path, change)
    with caplog.at_level(logging.WARNING):
        assert run_until_killed(monkeypatch, jobs, 0) == [0]  # a fresh start
    lines = [r.getMessage() for r in caplog.records if "not resumed" in r.getMessage()]
    assert len(lines) == 1 and why in lines[0] and "starts at step 0" in lines[0], lines
    assert not (tmp_path / "g3" / GROUP_CHECKPOINT).exists()
    assert not (tmp_path / "g3" / "best.inprogress.pt").exists()  # an earlier attempt's best weights went too


def test_the_checkpoint_is_written_atomically(tmp_path, monkeypatch):
    save, writes = torch.save, []

    def failing(obj, handle, *args, **kwargs):
        if isinstance(obj, dict) and "replicas" in obj:
            writes.append(obj["step"])
            if len(writes) == 2:  # the second checkpoint dies half-way
                handle.write(b"half a checkpoint")
                raise OSError("the disk went away")
        return save(obj, handle, *args, **kwargs)

    monkeypatch.setattr(torch, "save", failing)
    with pytest.raises(OSError, match="went away"):
        StackedTraining(group(tmp_path, "g")).run()
    assert writes == [3, 6]
    assert torch.load(tmp_path / "g3" / GROUP_CHECKPOINT, weights_only=True)["step"] == 3  # the last whole one
    assert [p.name for p in (tmp_path / "g3").iterdir() if GROUP_CHECKPOINT in p.name] == [GROUP_CHECKPOINT]


def test_replicas_with_other_checkpoint_intervals_are_refused(tmp_path):
    with pytest.raises(AssocmemError, match="train.checkpoint_interval differ"):
        check_stackable([make_job(tmp_path, tmp_path / "a", 1), make_job(tmp_path, tmp_path / "b", 2,
                                                                         checkpoint_interval=7)])
