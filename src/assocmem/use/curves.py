"""Training curves as TensorBoard event files, written from each run's ``metrics.csv`` on request.

The pipeline writes no event files itself: an event file's name and records carry the wall-clock time and host,
so a run's outputs would no longer be byte-identical between two runs, and the writers need packages the pipeline
does not (tensorboardX: a small wheel plus protobuf; or tensorboard itself). ``metrics.csv`` is the curve;
this exports it when one of the writers is installed.
"""

from __future__ import annotations

import os
from contextlib import closing
from pathlib import Path
from typing import Any

import pandas as pd

from assocmem.errors import AssocmemError

CURVES = "metrics.csv"
IN_PROGRESS = "metrics.inprogress.csv"  # the curve of a run still training
EVENT_PREFIX = "events.out.tfevents."
NO_WRITER = ("writing TensorBoard event files needs tensorboardX (`pip install tensorboardX`: an 88 kB wheel and "
             "protobuf) or tensorboard; each run's metrics.csv holds the same curves")


def summary_writer_class() -> Any:
    """tensorboardX's SummaryWriter, else torch's (which needs the tensorboard package)."""
    try:
        from tensorboardX import SummaryWriter
    except ImportError:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as err:
            raise AssocmemError(NO_WRITER) from err
    return SummaryWriter


def curve_files(root: Path) -> list[Path]:
    """Every run's curve under ``root``: its metrics.csv, or the in-progress one of a run still training."""
    if not root.is_dir():
        raise AssocmemError(f"no such directory: {root}")
    finished = sorted(root.rglob(CURVES))
    running = [path for path in sorted(root.rglob(IN_PROGRESS)) if not (path.parent / CURVES).is_file()]
    files = sorted(finished + running)
    if not files:
        raise AssocmemError(f"no training curves ({CURVES}) under {root}")
    return files


def export_curves(root: str | os.PathLike[str], logdir: str | os.PathLike[str]) -> list[Path]:
    """Write one TensorBoard run per training run under ``root`` into ``logdir`` (named by the run directory's
    path below ``root``), replacing that run's earlier event files; return the run directories written."""
    root, logdir = Path(root), Path(logdir)
    writer_class = summary_writer_class()
    written = []
    for file in curve_files(root):
        relative = file.parent.relative_to(root)
        run_dir = logdir / (relative if relative.parts else root.resolve().name)
        for old in run_dir.glob(f"{EVENT_PREFIX}*"):
            old.unlink()
        write_run(writer_class, run_dir, pd.read_csv(file))
        written.append(run_dir)
    return written


def write_run(writer_class: Any, run_dir: Path, metrics: pd.DataFrame) -> None:
    """Every column of ``metrics`` but ``step`` as a scalar curve over the steps."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with closing(writer_class(str(run_dir))) as writer:
        for row in metrics.to_dict(orient="records"):
            for name, value in row.items():
                if name != "step":
                    writer.add_scalar(name, float(value), int(row["step"]))
