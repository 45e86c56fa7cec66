"""assocmem.use.curves: every run's metrics.csv as a TensorBoard run, where a writer (tensorboardX or tensorboard)
is installed; a one-line error that says so where none is."""

from __future__ import annotations

import shutil
import struct
import sys
from pathlib import Path

import pandas as pd
import pytest
from trained_run import run_dir

from assocmem.errors import AssocmemError
from assocmem.use.curves import EVENT_PREFIX, curve_files, export_curves, summary_writer_class


def read_scalars(run: Path) -> dict[str, list[tuple[int, float]]]:
    """tag -> (step, value) of every scalar in a run's event files (TFRecord framing: length, its CRC, the
    serialized Event, its CRC)."""
    from tensorboardX.proto import event_pb2

    scalars: dict[str, list[tuple[int, float]]] = {}
    for file in sorted(run.glob(f"{EVENT_PREFIX}*")):
        data, position = file.read_bytes(), 0
        while position < len(data):
            (length,) = struct.unpack("<Q", data[position:position + 8])
            event = event_pb2.Event.FromString(data[position + 12:position + 12 + length])
            position += 12 + length + 4
            for value in event.summary.value:
                scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return scalars


def test_every_finished_or_running_run_has_its_curve(results) -> None:
    running = run_dir(results).parent / "pct10"
    running.mkdir()
    shutil.copy(run_dir(results) / "metrics.csv", running / "metrics.inprogress.csv")
    (run_dir(results) / "metrics.inprogress.csv").write_text("step\n")  # a leftover beside a finished curve
    assert curve_files(results) == [running / "metrics.inprogress.csv", run_dir(results) / "metrics.csv"]
    with pytest.raises(AssocmemError, match="no training curves"):
        curve_files(results / "qf" / "data")


def test_without_a_writer_the_error_says_what_to_install(results, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorboardX", None)
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    with pytest.raises(AssocmemError, match="needs tensorboardX .* metrics.csv holds the same curves") as err:
        summary_writer_class()
    assert "\n" not in str(err.value)


def test_the_curves_become_event_files(results, tmp_path) -> None:
    pytest.importorskip("tensorboardX", reason="tensorboardX is not installed (optional)")
    logdir = tmp_path / "runs"
    assert export_curves(results, logdir) == [logdir / "qf" / "train" / "tiny" / "pct100"]
    export_curves(results, logdir)  # again: the run's earlier event files are replaced, not added to
    run = logdir / "qf" / "train" / "tiny" / "pct100"
    assert len(list(run.glob(f"{EVENT_PREFIX}*"))) == 1
    metrics = pd.read_csv(run_dir(results) / "metrics.csv")
    scalars = read_scalars(run)
    assert set(scalars) == set(metrics.columns) - {"step"}
    assert [step for step, _ in scalars["val_ce"]] == metrics["step"].tolist()
    assert [value for _, value in scalars["val_ce"]] == pytest.approx(metrics["val_ce"].tolist(), rel=1e-6)
    assert export_curves(run_dir(results), tmp_path / "one") == [tmp_path / "one" / "pct100"]
