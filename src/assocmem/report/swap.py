"""The report is replaced whole or not at all (issue 39): it is built in a directory beside its place and swapped
in when complete, and a copy of the last complete report is kept, so that a report job that fails or is interrupted
(Snakemake deletes a job's outputs when it starts it, and again when it fails) can be put back. The copy lies
with the results directory's caches (``results/.cache/report-previous``), apart from the science. The copy put back
is dated 1970, so that the next run sees it as out of date and builds the report again.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

PREVIOUS = ".cache/{}-previous"  # the copy, beside the report's directory: results/.cache/report-previous
OUT_OF_DATE = 0  # the modification time of a report put back: older than any input


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def swapped_in(out_dir: Path) -> Iterator[Path]:
    """A fresh directory to build the report in; on success it replaces ``out_dir`` (the previous report stays
    whole until then), on failure it is removed and ``out_dir`` is left as it was."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    for left in [*out_dir.parent.glob(f".{out_dir.name}.*.tmp"), *out_dir.parent.glob(f".{out_dir.name}.*.old")]:
        shutil.rmtree(left, ignore_errors=True)  # a build killed with SIGKILL (one report job runs at a time)
    stage = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".tmp", dir=out_dir.parent))
    try:
        yield stage
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    stage.chmod(0o777 & ~_umask())
    old = stage.with_suffix(".old")
    if out_dir.exists():
        out_dir.rename(old)
    stage.rename(out_dir)
    shutil.rmtree(old, ignore_errors=True)


def previous_copy(out_dir: Path) -> Path:
    return out_dir.parent / PREVIOUS.format(out_dir.name)


def keep_copy(out_dir: Path) -> None:
    """Keep a copy of the complete report at ``out_dir`` beside it, for :func:`put_back`."""
    with swapped_in(previous_copy(out_dir)) as stage:
        shutil.copytree(out_dir, stage, dirs_exist_ok=True)


def put_back(out_dir: Path) -> bool:
    """After a report job that failed or was interrupted: the last complete report back at ``out_dir``, dated
    1970 (so the next run rebuilds it). False when there was no report missing, or no copy to put back."""
    previous = previous_copy(out_dir)
    if (out_dir / "index.html").exists() or not (previous / "index.html").is_file():
        return False
    with swapped_in(out_dir) as stage:
        shutil.copytree(previous, stage, dirs_exist_ok=True)
        for path in [stage, *stage.rglob("*")]:
            os.utime(path, (OUT_OF_DATE, OUT_OF_DATE))
    os.utime(out_dir, (OUT_OF_DATE, OUT_OF_DATE))
    return True
