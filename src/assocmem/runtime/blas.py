"""Which BLAS kernels faiss-cpu's bundled OpenBLAS runs, and choosing them before faiss loads; numpy's and scipy's
BLAS kept to one thread in a job whose threads are processes.

faiss-cpu wheels bundle an OpenBLAS (0.3.15 in faiss-cpu 1.15.1) that can mis-detect a newer CPU and fall back
to slow SSE kernels (measured on one host: 37 against 175 GFLOP/s once OPENBLAS_CORETYPE=SkylakeX was set).
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

log = logging.getLogger(__name__)
# OpenBLAS kernel families, weakest first.
_AVX2_CORES = frozenset({"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids"})
_AVX512_CORES = frozenset({"SkylakeX", "Cooperlake", "SapphireRapids"})
_AVX512_FLAGS = frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd"})


def cpu_openblas_core(cpuinfo: str | None = None) -> str | None:
    """The OpenBLAS core type this CPU supports (``SkylakeX``, ``Zen``, ``Haswell``), from /proc/cpuinfo;
    None when unknown (not Linux x86, or no AVX2)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return None
    flags = set(next((line.split(":", 1)[1].split() for line in cpuinfo.splitlines()
                      if line.startswith("flags")), []))
    if _AVX512_FLAGS.issubset(flags):
        return "SkylakeX"
    if {"avx2", "fma"}.issubset(flags):
        return "Zen" if ("AuthenticAMD" in cpuinfo or "HygonGenuine" in cpuinfo) else "Haswell"
    return None


def choose_openblas_core() -> str | None:
    """Set OPENBLAS_CORETYPE to this CPU's core type for faiss's bundled OpenBLAS; return what was set.

    A value the user set is kept; nothing is set when faiss is already loaded (OpenBLAS has read it then)."""
    if "OPENBLAS_CORETYPE" in os.environ or "faiss" in sys.modules:
        return None
    core = cpu_openblas_core()
    if core is not None:
        os.environ["OPENBLAS_CORETYPE"] = core
    return core


def import_faiss() -> ModuleType:
    """The faiss module. Every faiss user in assocmem imports it through here: the bundled OpenBLAS reads
    OPENBLAS_CORETYPE once, when faiss is first loaded, so the core type must be chosen before that."""
    choose_openblas_core()
    import faiss

    return faiss


def faiss_openblas_library() -> str | None:
    """Path of the OpenBLAS library bundled with faiss-cpu (None: faiss uses another BLAS)."""
    libs = glob.glob(str(Path(import_faiss().__file__).parent.parent / "faiss_cpu.libs" / "libopenblas*"))
    return libs[0] if libs else None


def faiss_blas_core() -> str | None:
    """Core type the OpenBLAS bundled with faiss-cpu runs with (None: faiss uses another BLAS)."""
    library = faiss_openblas_library()
    if library is None:
        return None
    try:
        corename = ctypes.CDLL(library).openblas_get_corename
    except (OSError, AttributeError):
        return None
    corename.restype = ctypes.c_char_p
    return corename().decode()


class BlasCores(NamedTuple):
    """The OpenBLAS core type faiss runs (None: faiss uses another BLAS) and the one this CPU supports (None:
    unknown)."""

    faiss: str | None
    cpu: str | None

    @classmethod
    def detect(cls) -> BlasCores:
        return cls(faiss_blas_core(), cpu_openblas_core())

    @property
    def faiss_is_weaker(self) -> bool:
        """True when faiss's OpenBLAS runs a weaker kernel family than the CPU supports."""
        return self.faiss is not None and (
            (self.cpu == "SkylakeX" and self.faiss not in _AVX512_CORES)
            or (self.cpu in ("Zen", "Haswell") and self.faiss not in _AVX2_CORES))


def check_blas_core(cores: BlasCores | None = None) -> dict[str, str | None]:
    """Warn when faiss's OpenBLAS runs kernels weaker than the CPU supports; return what was found.
    ``cores``: the core types to judge (default: :meth:`BlasCores.detect`)."""
    cores = BlasCores.detect() if cores is None else cores
    if cores.faiss_is_weaker:
        log.warning("faiss's OpenBLAS runs %s kernels but this CPU supports %s: the faiss engine of exact k-NN may "
                    "run several times slower (cpu_engine auto times it against onednn where torch has it). Set "
                    "OPENBLAS_CORETYPE=%s in the environment before Python starts.", cores.faiss, cores.cpu, cores.cpu)
    return {"faiss_openblas_core": cores.faiss, "cpu_supports": cores.cpu,
            "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE")}


@contextlib.contextmanager
def one_blas_thread() -> Iterator[None]:
    """numpy's and scipy's BLAS on one thread inside the block (threadpoolctl; the limits before it come back after).

    For a job that spends its ``threads`` on processes (the report's figure writers) and calls BLAS on small
    operands: Snakemake sets OPENBLAS_NUM_THREADS to the job's threads, and an OpenBLAS worker thread spins on its
    core after each call instead of sleeping, taking cores from the processes the threads were granted for; and a
    product's rounding then depends on the host's core count. ``benchmarks/bench_blas_threads.py`` on the 2-core
    Zen 4 host, 2 threads against 1: a 3 s loop of small products and Python work kept the worker thread busy for
    2.97-2.98 CPU-s, and the report's radius bootstrap was no faster (x1.06) and differed in the last digits
    (1.9e-14 relative). scipy ships its own BLAS: it is loaded here so that the limit reaches it too."""
    import numpy  # noqa: F401 - a library must be loaded for threadpoolctl to limit it
    import scipy.linalg  # noqa: F401
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        yield
