"""The report job runs alone at the end of the DAG, so in a local run it takes every core of --cores (its figures
are written by that many forked processes: assocmem.report.figure_writer); a cluster job requests threads_per_job."""

from __future__ import annotations

import re

import pytest
from conftest import snakemake


@pytest.mark.parametrize("cores", [1, 5])
def test_the_report_job_takes_every_local_core(tmp_path, cores: int) -> None:
    result = snakemake(tmp_path, "-n", "-p", "--cores", str(cores), timeout=300)
    commands = re.findall(r"python -m assocmem report --threads (\d+)", result.stdout + result.stderr)
    assert commands == [str(cores)]
