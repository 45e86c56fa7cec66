"""The engine of an exact k-NN job, chosen once: which library computes the float32 candidate search, where, with how
many threads and how large a block, and why it was chosen (recorded in the neighbours job's ``timing.json``).

:func:`resolve_engine` maps ``neighbours.device`` (``auto``, ``cpu``, ``cuda``, ``cuda:N``) and
``neighbours.cpu_engine`` to one :class:`Engine`; the stage resolves it once and hands it to every search
(:func:`assocmem.knn.exact.knn`, the memorisation grid's pattern distances)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from assocmem import runtime
from assocmem.autotune import Choice
from assocmem.errors import AssocmemError

# faiss-cpu, the oneDNN distance product, torch (on "cpu" or "cuda[:N]"), faiss's GpuIndexFlatL2.
KINDS = ("faiss", "onednn", "torch", "faiss-gpu")
# faiss GPU brute force supports k up to this (GPU_MAX_SELECTION_K in faiss 1.7.3+).
GPU_MAX_K = 2048
# Bytes one block of scores may take when the engine names none: on the CPU a fixed budget (the blocks stay far from
# the RAM a job requests), on CUDA this share of the device's free memory.
CPU_BLOCK_BYTES = 256 << 20
GPU_FREE_SHARE = 0.5


@dataclass(frozen=True)
class Engine:
    """One resolved k-NN engine.

    ``kind``: one of :data:`KINDS`; ``device``: where it computes (``cpu``, ``cuda`` or ``cuda:N``);
    ``gpu_ids``: faiss-gpu's devices; ``threads``: for :func:`assocmem.runtime.set_threads` (None keeps the
    job's); ``block_bytes``: the bytes one block of float32 scores may take on the torch engine (None: a share of
    the device's free memory on CUDA, :data:`assocmem.knn.torch_engine.CPU_BLOCK_BYTES` on the CPU);
    ``reason``: why this engine; ``cpu_choice``: the timed CPU engine choice, where one was made."""

    kind: str = "faiss"
    device: str = "cpu"
    gpu_ids: tuple[int, ...] = ()
    threads: int | None = None
    block_bytes: int | None = None
    reason: str = "explicit"
    cpu_choice: Choice | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise AssocmemError(f"k-NN engine {self.kind!r} is not one of {', '.join(KINDS)}")

    @property
    def on_gpu(self) -> bool:
        return self.device != "cpu"

    @property
    def max_pool(self) -> int | None:
        """The largest candidate pool the engine can search (None: any)."""
        return GPU_MAX_K if self.kind == "faiss-gpu" else None

    @property
    def torch_device(self) -> str:
        """Where torch computes for this engine (the torch engine's device; the first GPU of faiss-gpu)."""
        if self.kind == "faiss-gpu":
            return f"cuda:{self.gpu_ids[0]}" if self.gpu_ids else "cuda"
        return self.device if self.kind == "torch" else "cpu"

    def block_budget(self) -> int:
        """Bytes one block of temporaries may take now: ``block_bytes``, else :data:`CPU_BLOCK_BYTES` on the CPU,
        else :data:`GPU_FREE_SHARE` of the device's free memory."""
        if self.block_bytes is not None:
            return int(self.block_bytes)
        if self.torch_device == "cpu":
            return CPU_BLOCK_BYTES
        import torch

        free, _ = torch.cuda.mem_get_info(torch.device(self.torch_device))
        return max(1 << 20, int(free * GPU_FREE_SHARE))

    def record(self) -> dict[str, Any]:
        """What the job's ``timing.json`` keeps (the CPU engine choice apart: :attr:`cpu_choice`)."""
        record = asdict(self)
        record["gpu_ids"] = list(self.gpu_ids)
        del record["cpu_choice"]
        return record


def resolve_engine(device: str | None = "auto", cpu_engine: str = "auto",
                   search: tuple[int, int, int, int] | None = None, *, threads: int | None = None,
                   key: str = "neighbours") -> Engine:
    """The engine for ``device`` and, on the CPU, ``cpu_engine`` (timed at ``search`` = (queries, rows, dim, k):
    :func:`assocmem.knn.engines.choose_cpu_engine`).

    ``auto`` takes the GPU when torch sees one: faiss's GPU index if faiss has GPU support, else the torch
    engine; otherwise the CPU. ``cuda`` asks for a GPU (an error without one)."""
    wanted = runtime.check_device(device, f"{key}.device")
    base = wanted.split(":", 1)[0]
    if base == "cpu":
        return _cpu_engine(cpu_engine, search, threads, key, "cpu requested")
    torch_gpus = runtime.cuda_available()
    faiss_gpus = runtime.faiss_gpu_count()
    if not torch_gpus and not faiss_gpus:
        if base == "cuda":
            raise AssocmemError(f"{key}.device: {device!r} requested but CUDA is not available")
        return _cpu_engine(cpu_engine, search, threads, key, "auto: no CUDA device")
    if faiss_gpus:
        ids = tuple(range(faiss_gpus)) if ":" not in wanted else (int(wanted.split(":", 1)[1]),)
        bad = [g for g in ids if not 0 <= g < faiss_gpus]
        if bad:
            raise AssocmemError(f"{key}.device: GPU {bad[0]} out of range: faiss sees {faiss_gpus} GPU(s)")
        return Engine("faiss-gpu", "cuda", ids, threads, reason=f"{base}: faiss has GPU support ({faiss_gpus} GPU(s))",
                      cpu_choice=Choice(cpu_engine, "device"))
    return Engine("torch", "cuda" if base == "auto" else wanted, threads=threads,
                  reason=f"{base}: torch sees CUDA; faiss has no GPU support",
                  cpu_choice=Choice(cpu_engine, "device"))


def _cpu_engine(cpu_engine: str, search: tuple[int, int, int, int] | None, threads: int | None, key: str,
                why: str) -> Engine:
    from assocmem.knn.engines import choose_cpu_engine

    choice = choose_cpu_engine(cpu_engine, search, key=f"{key}.cpu_engine")
    return Engine(choice.value, "cpu", threads=threads, reason=f"{why}; cpu_engine {choice.how}", cpu_choice=choice)
