"""assocmem.runtime: device names, thread counts (the environment, SLURM's grant) and the BLAS kernels faiss's
bundled OpenBLAS runs on this CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from assocmem.errors import AssocmemError
from assocmem.runtime import default_threads, resolve_device, set_threads
from assocmem.runtime.blas import BlasCores, check_blas_core, cpu_openblas_core, import_faiss

faiss = import_faiss()


@pytest.fixture(autouse=True)
def no_grant_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No SLURM grant or torchrun world of the machine running the tests widens a test's explicit counts."""
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)


# --------------------------------------------------------------------------- devices and threads


def test_resolve_device() -> None:
    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(AssocmemError, match="train.device: unknown device 'mps'"):
        resolve_device("mps", key="train.device")
    with pytest.raises(AssocmemError, match="train.device: 'gpu' is no longer a device name; write cuda"):
        resolve_device("gpu", key="train.device")


def test_thread_count_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    original = faiss.omp_get_max_threads()
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert default_threads() == 1 and set_threads() == 1
    assert faiss.omp_get_max_threads() == 1 and torch.get_num_threads() == 1
    set_threads(original)
    assert os.environ["OMP_NUM_THREADS"] == str(original) and faiss.omp_get_max_threads() == original
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert default_threads() == (os.cpu_count() or 1)
    monkeypatch.setenv("OMP_NUM_THREADS", "lots")
    with pytest.raises(AssocmemError, match="OMP_NUM_THREADS"):
        default_threads()
    with pytest.raises(AssocmemError, match="threads must be >= 1"):
        set_threads(0)


def test_thread_count_is_granted_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A count widens to SLURM's grant, split over a torchrun job's processes; None (every knn call) keeps it."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "4")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert set_threads(1) == 2 and os.environ["OMP_NUM_THREADS"] == "2"
    assert set_threads() == 2 and faiss.omp_get_max_threads() == 2 and torch.get_num_threads() == 2
    monkeypatch.delenv("SLURM_CPUS_PER_TASK")
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    assert set_threads(1) == 1


# --------------------------------------------------------------------------- the BLAS kernels faiss runs

CPUINFO = "vendor_id\t: {vendor}\nflags\t\t: fpu sse2 {flags}\n"


@pytest.mark.parametrize(("vendor", "flags", "core"), [
    ("GenuineIntel", "avx avx2 fma avx512f avx512bw avx512vl avx512dq avx512cd", "SkylakeX"),
    ("AuthenticAMD", "avx avx2 fma avx512f avx512bw avx512vl avx512dq avx512cd", "SkylakeX"),
    ("AuthenticAMD", "avx avx2 fma", "Zen"),
    ("GenuineIntel", "avx avx2 fma", "Haswell"),
    ("GenuineIntel", "avx", None),
])
def test_cpu_openblas_core_from_flags(vendor: str, flags: str, core: str | None) -> None:
    assert cpu_openblas_core(CPUINFO.format(vendor=vendor, flags=flags)) == core


def test_weaker_blas_core_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="assocmem.runtime.blas"):
        found = check_blas_core(BlasCores(faiss="Prescott", cpu="SkylakeX"))
    assert found["faiss_openblas_core"] == "Prescott" and "OPENBLAS_CORETYPE=SkylakeX" in caplog.text
    caplog.clear()
    check_blas_core(BlasCores(faiss="SkylakeX", cpu="SkylakeX"))
    assert "OPENBLAS_CORETYPE" not in caplog.text


def test_faiss_openblas_core_matches_this_cpu() -> None:
    """faiss-cpu's bundled OpenBLAS runs kernels as strong as this CPU supports (OPENBLAS_CORETYPE is chosen
    before faiss loads when the user has not set it). A fresh process that loads faiss as the k-NN does."""
    env = {key: value for key, value in os.environ.items() if key != "OPENBLAS_CORETYPE"}
    script = ("import json, assocmem.knn; from assocmem.runtime.blas import check_blas_core; "
              "print(json.dumps(check_blas_core()))")
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    found = json.loads(run.stdout.strip().splitlines()[-1])
    if found["faiss_openblas_core"] is None or found["cpu_supports"] is None:
        pytest.skip(f"no bundled OpenBLAS or unknown CPU: {found}")
    strong = {"SkylakeX": {"SkylakeX", "Cooperlake", "SapphireRapids"}}.get(
        found["cpu_supports"], {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids"})
    assert found["faiss_openblas_core"] in strong
