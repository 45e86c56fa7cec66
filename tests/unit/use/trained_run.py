"""Paths inside the trained results directory of conftest.py's fixtures."""

from __future__ import annotations

from pathlib import Path

from assocmem import stamps
from assocmem.codehash import code_digest

JOB = "qf/tiny/pct100"


def run_dir(results: Path) -> Path:
    return results / "qf" / "train" / "tiny" / "pct100"


def store_dir(results: Path) -> Path:
    return results / "qf" / "data" / "tokens"


def dev_file(results: Path) -> Path:
    return results / "qf" / "data" / "raw" / "question.dev"



def stamp_job(directory: Path, rule: str, upstream: list[Path] = ()) -> Path:
    """The provenance stamp the pipeline writes when ``rule``'s job in ``directory`` finishes (assocmem.stamps)."""
    stamp = directory / "provenance.json"
    stamps.write_stamp(stamp, rule, {}, code_digest(rule), sorted(directory.iterdir()), upstream)
    return stamp

