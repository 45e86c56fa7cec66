"""The checkpoint of a stacked training group (:mod:`assocmem.train.stacked`): one file the group resumes from.

``stacked_checkpoint.pt`` in the first replica's run directory (no rule declares it, so it survives Snakemake's
deletion of the group's outputs when a killed group reruns), written atomically (temporary file, then rename) and
read with ``torch.load(weights_only=True)``. It holds the stack's weights and AdamW state, the group's step, the
training NLL summed on the device since each replica's last evaluation, each replica's :class:`RunState`, and each
replica's files: a finished replica's outputs (restored where the workflow deleted them; it is not trained or
finished again) and a running replica's in-progress best weights (``best.inprogress.pt`` as it was at the
checkpoint; an evaluation after it is replayed). Nothing else is needed: a replica's batches and evaluation sets
depend only on its seed and the step, and stacks have no dropout.

It is resumed from only by the group that wrote it: the same replicas in the same order (run directories and job
names) with the same fingerprints (model, settings, seed, data and the train stage's code digest,
``build_job(code=...)``); any other file there is logged in one line and deleted, and the group starts at step 0.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from assocmem.io import save_torch, write_bytes
from assocmem.train.files import RunState, run_state, state_fields
from assocmem.train.loop import TrainJob

GROUP_CHECKPOINT = "stacked_checkpoint.pt"
# what TrainJob._finish writes: a finished replica's run directory as a single run leaves it
FINISHED_FILES = ("model.pt", "best.pt", "metrics.csv", "timing.csv", "timing.json", "eval_rows.parquet",
                  "summary.json")
log = logging.getLogger(__name__)


@dataclass
class GroupState:
    """Where a stacked group stands; ``files[i]``: replica i's files by name (``finished[i]``: its outputs; else its
    in-progress best weights where it has any), ``pending``: the (K,) training NLL not yet in a RunState."""

    step: int
    states: list[RunState]
    finished: list[bool]
    files: list[dict[str, bytes]]
    pending: torch.Tensor


def identity(jobs: list[TrainJob]) -> list[dict[str, str]]:
    """What makes a checkpoint this group's: each replica's run directory, job name and fingerprint, in order."""
    return [{"run_dir": str(job.run_dir), "job": job.job, "fingerprint": job.fingerprint} for job in jobs]


def read_files(run_dir: Path, names: tuple[str, ...]) -> dict[str, bytes]:
    return {name: (run_dir / name).read_bytes() for name in names if (run_dir / name).is_file()}


def summary_of(files: dict[str, bytes]) -> dict[str, Any]:
    """A finished replica's summary, as its summary.json holds it."""
    return json.loads(files["summary.json"])


def restore_missing(run_dir: Path, files: dict[str, bytes]) -> list[str]:
    """Write back the files deleted since they were saved (those still there are kept as they are); their names."""
    missing = [name for name in files if not (run_dir / name).is_file()]
    for name in missing:
        write_bytes(run_dir / name, files[name])
    return missing


def _tensor(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)  # a tensor: what weights_only reads back


def save_group(path: Path, jobs: list[TrainJob], stack: torch.nn.Module, optimizer: torch.optim.Optimizer,
               group: GroupState) -> None:
    payload = {"replicas": identity(jobs), "step": group.step, "stack": stack.state_dict(),
               "optimizer": optimizer.state_dict(), "pending": group.pending.detach().cpu(),
               "states": [state_fields(state) for state in group.states], "finished": group.finished,
               "files": [{name: _tensor(data) for name, data in files.items()} for files in group.files]}
    save_torch(path, payload)


def _mismatch(payload: Any, jobs: list[TrainJob]) -> str:
    """Why the checkpoint read is not this group's; empty where it is."""
    if not isinstance(payload, dict) or not isinstance(payload.get("replicas"), list):
        return "it is not a stacked group's checkpoint"
    saved, ours = payload["replicas"], identity(jobs)
    if [(r.get("run_dir"), r.get("job")) for r in saved] != [(r["run_dir"], r["job"]) for r in ours]:
        return f"it was written for other replicas ({len(saved)} run directories and job names, not these {len(ours)})"
    changed = [ours[i]["job"] or ours[i]["run_dir"] for i in range(len(ours))
               if ours[i]["fingerprint"] != saved[i].get("fingerprint")]
    if changed:
        return (f"{', '.join(changed)} changed since: another model, settings, seed, data or code (fingerprints "
                "differ)")
    return ""


def load_group(path: Path, jobs: list[TrainJob], stack: torch.nn.Module,
               optimizer: torch.optim.Optimizer) -> GroupState | None:
    """The group state saved at ``path``, with ``stack`` and ``optimizer`` set to it, where the file is this group's
    (:func:`identity`); None where there is none. Any other file is logged in one line and deleted."""
    if not path.exists():
        return None
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
        why = _mismatch(payload, jobs)
    except Exception as err:  # noqa: BLE001 - any unreadable checkpoint means: start fresh
        why = f"it is unreadable ({type(err).__name__}: {next(iter(str(err).splitlines()), '')})"
    if why:
        log.warning("stacked checkpoint %s not resumed: %s; the group starts at step 0", path, why)
        path.unlink()
        return None
    stack.load_state_dict(payload["stack"])
    optimizer.load_state_dict(payload["optimizer"])
    return GroupState(int(payload["step"]), [run_state(fields) for fields in payload["states"]],
                      [bool(done) for done in payload["finished"]],
                      [{name: t.numpy().tobytes() for name, t in files.items()} for files in payload["files"]],
                      payload["pending"])
