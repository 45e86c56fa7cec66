"""End-to-end (a dry run, seconds): `assocmem run --set` reaches the jobs' params through Snakemake."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import ROOT

pytestmark = pytest.mark.e2e


def test_a_nested_override_reaches_the_jobs(tmp_path) -> None:
    cmd = [sys.executable, "-m", "assocmem", "run", "-s", str(ROOT / "Snakefile"), "--directory", str(tmp_path),
           "--workflow-profile", "none", "-n", "-p", "--configfile", str(ROOT / "config" / "test.yaml"),
           "--set", "experiments.qf.train.max_steps=80"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    output = result.stdout + result.stderr
    assert '"max_steps": 80' in output and '"max_steps": 60' not in output  # test.yaml's own value is 60
    assert len(list((tmp_path / ".snakemake" / "assocmem").glob("overrides-*.yaml"))) == 1
