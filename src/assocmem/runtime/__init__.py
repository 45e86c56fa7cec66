"""Devices and threads, decided in one place for torch and faiss alike (faiss's BLAS kernels: :mod:`.blas`)."""

from __future__ import annotations

import math
import os
import sys
from typing import Any

from assocmem.errors import AssocmemError
from assocmem.runtime.blas import import_faiss

DEVICE_NAMES = ("auto", "cpu", "cuda")


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def faiss_gpu_count() -> int:
    """CUDA devices faiss can use; 0 for a CPU-only faiss build or when no CUDA device is visible."""
    faiss = import_faiss()
    if not hasattr(faiss, "StandardGpuResources"):
        return 0
    try:
        return int(faiss.get_num_gpus())
    except (AttributeError, RuntimeError):
        return 0


def check_device(name: str | None, key: str = "device") -> str:
    """A configured device in the one spelling the config uses (lower case ``auto``, ``cpu``, ``cuda``, ``cuda:N``);
    the old ``gpu`` is refused with the word to write instead."""
    wanted = "auto" if name is None else str(name).lower()
    base, _, index = wanted.partition(":")
    if base == "gpu":
        raise AssocmemError(f"{key}: 'gpu' is no longer a device name; write cuda (or cuda:N)")
    if base not in DEVICE_NAMES or (":" in wanted and (base != "cuda" or not index.isdigit())):
        raise AssocmemError(f"{key}: unknown device {name!r}; use one of {', '.join(DEVICE_NAMES)} (or cuda:N)")
    return wanted


def resolve_device(name: str | None = "auto", *, key: str = "device") -> str:
    """Map a configured device (:func:`check_device`) to ``"cpu"`` or ``"cuda"`` (``"cuda:N"`` is kept).

    ``auto`` (or None) picks CUDA when torch can use it. Asking for an absent GPU is an error naming ``key``."""
    wanted = check_device(name, key)
    if wanted == "cpu":
        return "cpu"
    if wanted == "auto":
        return "cuda" if cuda_available() else "cpu"
    if not cuda_available():
        raise AssocmemError(f"{key}: {name!r} requested but CUDA is not available")
    return wanted


def share_of_cores(cores: int | None, jobs: int, floor: int = 1) -> int:
    """Threads of each of a rule's ``jobs`` jobs on ``cores`` cores (Snakemake's --cores): an equal share, so that the
    jobs can all run side by side, and a job left alone at the end of the DAG gets the cores the others leave idle;
    at least ``floor`` (the config's threads_per_job). Snakemake schedules by these threads and never runs more
    than --cores together, so nothing is oversubscribed. ``cores`` None (jobs sent to a cluster): ``floor``, the
    explicit request."""
    if floor < 1 or jobs < 0:
        raise AssocmemError(f"share_of_cores: floor must be >= 1 and jobs >= 0, got {floor} and {jobs}")
    if cores is None:
        return floor
    return max(floor, int(cores) // max(1, jobs))


def job_threads(cores: int | None, cpu_jobs: int, floor: int, on_gpu: bool) -> int:
    """Threads of one evaluate or neighbours job: ``floor`` (threads_per_job) where it runs on a GPU, else its equal
    share of ``cores`` among the rule's ``cpu_jobs`` jobs that run on the CPU (:func:`share_of_cores`).

    On a GPU these jobs keep about one core busy whatever they are granted: in the second GPU run (one H200, 16
    cores; benchmarks/README.md) the twelve evaluate and neighbours jobs, granted 8 and 4 threads, ran at a mean load
    of 0.89 to 1.04 cores, and the second evaluate job waited 13 s for its 8 cores while the first held them."""
    return share_of_cores(None if on_gpu else cores, cpu_jobs, floor)  # None: the explicit floor, as on a cluster


def run_priority(model: dict[str, Any], train: dict[str, Any], fraction: float) -> float:
    """Snakemake priority of one trained run's chain of jobs (train, its activations and neighbours): the
    logarithm of its training's expected cost, steps x batch x the multiply-adds of its blocks, plus a tenth of its
    subset fraction (at equal cost a larger subset trains longer: small ones over-fit and stop early). Among the jobs
    ready to start, Snakemake starts the higher priority first, so the longest chain of the DAG starts at once
    instead of waiting behind short jobs (the default run on 2 cores: 7 min 34 s; 9 min 40 s without priorities, when
    Snakemake happened to start its longest training 3 min 54 s in)."""
    d_model = int(model["d_model"])
    d_ff = int(model.get("d_ff") or 4 * d_model)
    per_token = int(model["n_layer"]) * d_model * (4 * d_model + 2 * d_ff)
    cost = float(train["max_steps"]) * float(train["batch_size"]) * per_token
    return round(math.log10(max(cost, 1.0)) + 0.1 * float(fraction), 6)


def granted_threads(requested: int) -> int:
    """The job's threads (Snakemake's {threads}, or more if SLURM granted more CPUs), split over the processes
    of a torchrun job."""
    if requested < 1:
        raise AssocmemError(f"threads must be >= 1, got {requested}")
    granted = max(requested, int(os.environ.get("SLURM_CPUS_PER_TASK", "0") or 0))
    return max(1, granted // int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))


def default_threads() -> int:
    """Threads when none are requested: $OMP_NUM_THREADS (as :func:`set_threads` leaves it) or all cores."""
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    if env:
        try:
            value = int(env)
        except ValueError as err:
            raise AssocmemError(f"environment variable OMP_NUM_THREADS={env!r} is not an integer") from err
        if value >= 1:
            return value
    return os.cpu_count() or 1


def set_threads(requested: int | None = None) -> int:
    """Give OpenMP ($OMP_NUM_THREADS), torch and faiss (if loaded) the same thread count; return it.

    A count is widened to what the job was granted (:func:`granted_threads`); None keeps the count already
    chosen (:func:`default_threads`, not granted again: a torchrun process would split its share twice)."""
    import torch

    count = default_threads() if requested is None else granted_threads(int(requested))
    os.environ["OMP_NUM_THREADS"] = str(count)
    if torch.get_num_threads() != count:
        torch.set_num_threads(count)
    if "faiss" in sys.modules:
        sys.modules["faiss"].omp_set_num_threads(count)
    return count


def seed_device(seed: int, device) -> None:
    """Seed the random generators a training step on ``device`` draws from (the CPU one, and the device's own on a
    GPU): what ``torch.manual_seed`` does for that device, without its calls into every other backend, which cost
    ~50 us a step, a few per cent of a tiny model's step."""
    import torch

    torch.default_generator.manual_seed(seed)
    if getattr(device, "type", str(device)) == "cuda":
        torch.cuda.manual_seed(seed)
