"""A target naming what the config lacks fails before any job with one line listing the valid names, through plain
``snakemake`` and ``python -m assocmem run`` (dry runs, seconds each); a target written after ``--configfile``
is a target under ``assocmem run``."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import ROOT

pytestmark = pytest.mark.e2e

TEST_CONFIG = str(ROOT / "config" / "test.yaml")


def dry_run(tmp_path, *args: str, wrapper: bool = False) -> subprocess.CompletedProcess:
    program = [sys.executable, "-m", "assocmem", "run"] if wrapper else [sys.executable, "-m", "snakemake"]
    return subprocess.run([*program, "-s", str(ROOT / "Snakefile"), "--directory", str(tmp_path), "-n", "--cores",
                           "2", *args], capture_output=True, text=True, timeout=300, cwd=tmp_path, check=False)


@pytest.mark.parametrize(("target", "expected"), [
    ("results/qf/train/L2/pct1/model.pt", "no model 'L2' in experiment 'qf'; models: tiny"),
    ("results/qf/train/tny/pct100/model.pt", "no model 'tny' in experiment 'qf'; models: tiny"),
    ("results/qf/train/tiny/pct1/model.pt",
     "no subset 'pct1' for model 'tiny' in experiment 'qf'; subsets: pct100, pct10"),
    ("results/owt/train/tiny/pct100/model.pt", "no experiment 'owt' in this config; experiments: qf"),
    ("reprt", "no rule or output of that name; rules: activations, all,"),
])
@pytest.mark.parametrize("wrapper", [False, True], ids=["snakemake", "assocmem-run"])
def test_a_bad_target_is_one_line_naming_the_valid_choices(tmp_path, target, expected, wrapper) -> None:
    result = dry_run(tmp_path, target, f"--configfile={TEST_CONFIG}", wrapper=wrapper)
    assert result.returncode != 0
    ours = [line for line in result.stderr.splitlines() if line.startswith("assocmem: target")]
    assert len(ours) == 1 and expected in ours[0] and "test.yaml" in ours[0], result.stderr[-2000:]
    assert "Traceback" not in result.stderr and "KeyError" not in result.stderr
    assert not (tmp_path / "results").exists()


def test_a_target_after_configfile_is_a_target_under_assocmem_run(tmp_path) -> None:
    result = dry_run(tmp_path, "--configfile", TEST_CONFIG, "results/qf/train/tiny/pct10/model.pt", wrapper=True)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "taken as a target" in result.stderr
    assert "train" in result.stdout and "neighbours" not in result.stdout  # that model's jobs only, not the report's
