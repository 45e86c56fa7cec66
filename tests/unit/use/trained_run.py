"""Paths inside the trained results directory of conftest.py's fixtures."""

from __future__ import annotations

from pathlib import Path

JOB = "qf/tiny/pct100"


def run_dir(results: Path) -> Path:
    return results / "qf" / "train" / "tiny" / "pct100"


def store_dir(results: Path) -> Path:
    return results / "qf" / "data" / "tokens"


def dev_file(results: Path) -> Path:
    return results / "qf" / "data" / "raw" / "question.dev"
