import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers import ROOT, once_per_test_run, remove_scontrol_stub, stub_scontrol  # noqa: E402 - after the tests directory is importable

# Files that legitimately differ between two runs: logs, wall-clock timings (the timed library choices of
# assocmem.autotune included), the choice cache itself, the report pages, whose provenance section lists the stage
# timings, and the jobs' stamps, which record file times (assocmem.stamps.content_digest compares what they say
# about content). Everything else is a science artifact and must be identical.
NOT_SCIENCE = ("logs/", "benchmarks/", "timing.", ".cache/", "report/index.html", "report/report.md",
               "provenance.json")



def _one_thread_per_worker() -> None:
    """Under pytest-xdist (one worker per core) numpy's and scipy's OpenBLAS, and torch, would start a thread per
    core in every worker: spinning threads on busy cores made a scipy least-squares test 15x slower in CI (206 s
    against 14 s alone) and a torch training test 3x (130 s in one CI run, 43 s in another). Limits this process
    only; the pipeline jobs the tests start set their own threads (Snakemake's per-job thread variables), and a test
    that needs more threads sets them (:func:`_threads_as_the_worker_started` puts them back)."""
    import numpy  # noqa: F401 - the libraries must be loaded for threadpoolctl to limit them
    import scipy.linalg  # noqa: F401
    import torch
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")
    torch.set_num_threads(1)


_WORKER_THREADS: tuple[str | None, int] = (None, 1)  # $OMP_NUM_THREADS and torch's threads; read when the worker starts


def pytest_configure(config: pytest.Config) -> None:
    stub_scontrol()  # before any test starts Snakemake (whose SLURM plugin probes scontrol at each start)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        _one_thread_per_worker()
    global _WORKER_THREADS
    import torch

    _WORKER_THREADS = os.environ.get("OMP_NUM_THREADS"), torch.get_num_threads()


def pytest_unconfigure(config: pytest.Config) -> None:
    remove_scontrol_stub()


def _worker_threads() -> None:
    """Put $OMP_NUM_THREADS, torch's and faiss's threads (one OpenMP count) back to what the worker started with."""
    import torch

    env, threads = _WORKER_THREADS
    if env is None:
        os.environ.pop("OMP_NUM_THREADS", None)
    else:
        os.environ["OMP_NUM_THREADS"] = env
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    if "faiss" in sys.modules and sys.modules["faiss"].omp_get_max_threads() != threads:
        sys.modules["faiss"].omp_set_num_threads(threads)


@pytest.fixture(autouse=True)
def _threads_as_the_worker_started():
    """Every test starts and ends with the worker's thread settings: a stage called in-process
    (``assocmem.runtime.set_threads``) sets $OMP_NUM_THREADS, torch's and faiss's threads. Restored after each test,
    a result that depends on the thread count (products round differently) hung on test order; restored to what the
    next test saw at its start, a module-scoped fixture's stage (which runs before it) set two threads for the rest
    of the worker's tests, which then spun against the other worker (a 54 s bf16 training test took over 300 s in
    CI). So the worker's own settings, read once at its start, are set before each test and after it."""
    _worker_threads()
    yield
    _worker_threads()


def snakemake(workdir: Path, *args: str, config: Path | None = None, check: bool = True,
              timeout: int = 900, snakefile: Path | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "snakemake", "-s", str(snakefile or ROOT / "Snakefile"), "--directory", str(workdir),
           "--configfile", str(config or ROOT / "config" / "test.yaml"), *args]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        tail = f"{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
        raise AssertionError(f"snakemake failed ({result.returncode}):\n{tail}")
    return result


def science_checksums(workdir: Path) -> dict[str, str]:
    """sha256 of every science artifact under workdir/results (see NOT_SCIENCE)."""
    results = workdir / "results"
    sums = {}
    for path in sorted(results.rglob("*")):
        rel = path.relative_to(results).as_posix()
        if path.is_file() and not any(part in rel for part in NOT_SCIENCE) and not path.name.startswith("."):
            sums[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return sums


@pytest.fixture(scope="session")
def tiny_run_terminal(tmp_path_factory) -> tuple[Path, str]:
    """One finished pipeline on config/test.yaml and what it printed (stdout + stderr); one run for all the
    pytest-xdist workers."""

    def run(workdir: Path) -> str:
        result = snakemake(workdir, "--cores", "2")
        return result.stdout + result.stderr

    return once_per_test_run(tmp_path_factory, "tiny_run", run)


@pytest.fixture(scope="session")
def tiny_run(tiny_run_terminal) -> Path:
    """The finished tiny pipeline, shared read-only by the end-to-end tests (copy it before changing anything: see
    `tiny_copy`)."""
    return tiny_run_terminal[0]


@pytest.fixture
def tiny_copy(tiny_run, tmp_path) -> Path:
    """A private copy of the finished tiny pipeline (results and snakemake's metadata) to modify."""
    workdir = tmp_path / "run"
    shutil.copytree(tiny_run, workdir, symlinks=True, ignore=shutil.ignore_patterns("locks", "incomplete"))
    return workdir
