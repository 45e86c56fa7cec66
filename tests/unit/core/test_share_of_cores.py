"""The threads of the neighbours and evaluate jobs (workflow/rules/common_scheduling.smk): an equal share of --cores
among the rule's jobs on the CPU, at least threads_per_job; threads_per_job alone where a job runs on a GPU or jobs
go to a cluster."""

from __future__ import annotations

import pytest

from assocmem.errors import AssocmemError
from assocmem.runtime import job_threads, share_of_cores


@pytest.mark.parametrize(("cores", "jobs", "floor", "threads"), [
    (2, 4, 1, 1),  # the default config's 4 neighbours jobs on 2 cores: one thread each, as before
    (2, 2, 1, 1),  # its 2 evaluate jobs on 2 cores
    (16, 4, 1, 4),  # on 16 cores: 4 neighbours jobs side by side, 4 threads each
    (16, 2, 1, 8),  # 2 evaluate jobs, 8 threads each
    (16, 1, 1, 16),  # a job alone takes every core
    (16, 0, 1, 16),
    (16, 40, 1, 1),  # more jobs than cores: the floor
    (16, 40, 2, 2),  # threads_per_job stays the least a job gets
    (None, 4, 3, 3),  # a cluster run (SLURM): the explicit threads_per_job
])
def test_jobs_share_the_cores(cores: int | None, jobs: int, floor: int, threads: int) -> None:
    assert share_of_cores(cores, jobs, floor) == threads
    if cores is not None and jobs:  # side by side, the jobs never ask for more than the cores (or their floor)
        assert min(jobs, cores) * share_of_cores(cores, jobs, floor) <= max(cores, min(jobs, cores) * floor)


def test_bad_counts_are_refused() -> None:
    with pytest.raises(AssocmemError, match="floor must be >= 1"):
        share_of_cores(4, 2, 0)


@pytest.mark.parametrize(("cores", "cpu_jobs", "floor", "on_gpu", "threads"), [
    (16, 2, 1, False, 8),  # on the CPU: the share, as share_of_cores gives it
    (16, 2, 1, True, 1),  # on a GPU: threads_per_job, whatever the cores
    (16, 2, 3, True, 3),
    (2, 4, 1, True, 1),
    (2, 4, 1, False, 1),
    (None, 4, 2, False, 2),  # a cluster run: the explicit request either way
    (None, 4, 2, True, 2),
])
def test_a_job_on_a_gpu_takes_threads_per_job(cores: int | None, cpu_jobs: int, floor: int, on_gpu: bool,
                                               threads: int) -> None:
    assert job_threads(cores, cpu_jobs, floor, on_gpu) == threads
