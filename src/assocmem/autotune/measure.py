"""A choice between libraries made by timing them at the job's own shapes on the host that runs it, and kept.

:func:`time_candidates` calls every candidate ``warmup`` times, then times ``rounds`` rounds in which each candidate
runs once (a sample of ``repeats`` calls), in an order rotated every round (round r starts with candidate r mod n),
so a slow spell of the machine falls on every candidate alike. ``repeats`` is chosen from the last warm-up call so
that the rounds take about ``budget_s``. A candidate's time is the median of its samples, per call; the fastest
wins, a tie going to the first candidate (the library's default). The clock is a parameter, so tests decide which
candidate is faster.

:func:`choose` keeps each answer in a JSON file (:func:`default_cache_file`) under a key that holds everything that
changes it: the operation, the candidates, the shape timed and the host (:func:`host_key`: CPU model, the ISA
extensions the libraries dispatch on, machine, torch version, threads and the libraries' environment variables,
and what the caller adds, e.g. faiss's version and BLAS core). The host's name is not in it: nodes of one type
share an answer. A later job with the same key reuses the answer without timing, so on one host the choice, and
the floating-point results that depend on it, stay the same from run to run. The file is read, timed and written
under an exclusive lock (jobs starting together time one after the other, and the second reuses the first's
answer); an unreadable file, or an entry that does not fit, is logged and ignored, never fatal, and replaced on the
next write.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import math
import os
import platform
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import torch

from assocmem.errors import AssocmemError
from assocmem.io import write_json

log = logging.getLogger(__name__)

Clock = Callable[[], float]
T = TypeVar("T")
CACHE_ENV = "ASSOCMEM_CACHE_DIR"
CACHE_NAME = "choices.json"
CACHE_VERSION = 1
MAX_REPEATS = 1000
# The ISA extensions the GEMM libraries (MKL, oneDNN, OpenBLAS) dispatch on: a CPU with other ones may answer
# differently. x86 from /proc/cpuinfo's "flags", Arm from its "Features".
ISA_FLAGS = ("avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "avx512_fp16",
             "avx_vnni", "amx_tile", "amx_bf16", "amx_int8", "asimd", "sve", "sve2", "bf16", "i8mm")
# Environment variables that steer the libraries' kernels and threads (MKL_ENABLE_INSTRUCTIONS, ONEDNN_MAX_CPU_ISA,
# OPENBLAS_CORETYPE, OMP_PROC_BIND, ...): part of the host key.
LIBRARY_ENV_PREFIXES = ("MKL_", "ONEDNN_", "DNNL_", "OPENBLAS_", "OMP_", "KMP_", "GOMP_")
_KEY_FIELDS = ("op", "candidates", "shape", "host")


@dataclass(frozen=True)
class Choice:
    """What a job runs (``value``) and why (``how``): ``timed`` (measured now), ``cache`` (measured earlier at the
    same key), ``explicit`` (configured), ``checkpoint`` (a resumed run keeps the library it started with),
    ``identical`` (the candidates compute the same products at these shapes), ``small`` (too little work to be
    worth a timing), ``unavailable`` (one candidate only runs here), ``device`` (not a CPU run), ``autocast`` (bf16
    on a CPU: the products are autocast's), ``compile`` (Inductor's products). ``seconds``: the median seconds per
    call of each candidate where timed."""

    value: str
    how: str
    seconds: dict[str, float] = field(default_factory=dict)
    shape: dict[str, Any] | None = None
    host: dict[str, Any] | None = None
    cache: str | None = None

    def record(self) -> dict[str, Any]:
        return asdict(self)


def time_candidates(candidates: Mapping[str, Callable[[], object]], *, clock: Clock = time.perf_counter,
                    rounds: int = 5, warmup: int = 2, budget_s: float = 1.0, limit_s: float | None = None,
                    min_rounds: int = 3) -> dict[str, list[float]]:
    """Seconds per call of each candidate, one sample per round, in rotating order (see the module's docstring).

    On a machine that slows down after the warm-up (another process takes the cores), the rounds stop once they
    have run ``limit_s`` (default 4 x ``budget_s``): a sample ends early, after at least one call, and no round
    starts after the limit once ``min_rounds`` are done."""
    names = list(candidates)
    last_call = {name: _warm(candidates[name], warmup, clock) for name in names}
    repeats = max(1, min(MAX_REPEATS, int(budget_s / (rounds * max(sum(last_call.values()), 1e-9)))))
    deadline = clock() + (4 * budget_s if limit_s is None else limit_s)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for index in range(rounds):
        if index >= min_rounds and clock() > deadline:
            break
        for name in rotated(names, index):
            samples[name].append(_sample(candidates[name], repeats, clock, deadline))
    return samples


def rotated(items: Sequence[T], round_: int) -> list[T]:
    """``items`` in round ``round_``'s order: starting at item ``round_`` mod n and wrapping, so that over n rounds
    each item runs once in each position (a drift of the machine between positions is shared by every item)."""
    shift = round_ % len(items) if items else 0
    return [*items[shift:], *items[:shift]]


def _warm(candidate: Callable[[], object], calls: int, clock: Clock) -> float:
    """Call ``candidate`` ``calls`` times (at least once); the seconds of the last call."""
    for _ in range(calls - 1):
        candidate()
    return _sample(candidate, 1, clock, math.inf)


def _sample(candidate: Callable[[], object], repeats: int, clock: Clock, deadline: float) -> float:
    """Seconds per call of up to ``repeats`` calls, fewer (at least one) where the clock passes ``deadline``."""
    start, calls = clock(), 0
    while calls < repeats and (calls == 0 or clock() < deadline):
        candidate()
        calls += 1
    return (clock() - start) / calls


def fastest(seconds: Mapping[str, float]) -> str:
    """The candidate with the least seconds; a tie goes to the first."""
    names = list(seconds)
    return min(names, key=lambda name: (seconds[name], names.index(name)))


def choose(op: str, shape: Mapping[str, Any], candidates: Mapping[str, Callable[[], object]], *,
           host: Mapping[str, Any], cache_file: Path | None = None, clock: Clock = time.perf_counter,
           rounds: int = 5, warmup: int = 2, budget_s: float = 1.0) -> Choice:
    """The fastest of ``candidates`` (name -> one call of the operation at ``shape``) on ``host``: from the cache
    when it holds this key, else timed (:func:`time_candidates`) and stored. ``cache_file``: default
    :func:`default_cache_file`."""
    path = default_cache_file() if cache_file is None else Path(cache_file)
    key = _normalised({"op": op, "candidates": list(candidates), "shape": shape, "host": host})
    with _locked(path) as usable:
        entries = _read_entries(path) if usable else []
        hit = next((entry for entry in entries if _key_of(entry) == key and entry["choice"] in candidates), None)
        if hit is not None:
            log.info("%s: %s, as timed on %s (cache %s)", op, hit["choice"], hit.get("timed_at", "?"), path)
            return Choice(hit["choice"], "cache", dict(hit["seconds"]), key["shape"], key["host"], str(path))
        samples = time_candidates(candidates, clock=clock, rounds=rounds, warmup=warmup, budget_s=budget_s)
        seconds = {name: statistics.median(values) for name, values in samples.items()}
        value = fastest(seconds)
        if usable:
            entry = {**key, "choice": value, "seconds": seconds, "samples": samples,
                     "timed_at": datetime.now(UTC).isoformat(timespec="seconds")}
            _write_entries(path, [e for e in entries if _key_of(e) != key] + [entry])
    log.info("%s: %s, timed at %s: %s", op, value, dict(shape),
             ", ".join(f"{name} {1e3 * s:.3f} ms" for name, s in seconds.items()))
    return Choice(value, "timed", seconds, key["shape"], key["host"], str(path) if usable else None)


def default_cache_file() -> Path:
    """``$ASSOCMEM_CACHE_DIR/choices.json`` (the pipeline sets it to ``<results_dir>/.cache``), else the user's
    cache directory (``$XDG_CACHE_HOME`` or ``~/.cache``) ``/assocmem/choices.json``."""
    directory = os.environ.get(CACHE_ENV, "").strip()
    if directory:
        return Path(directory) / CACHE_NAME
    return Path(os.environ.get("XDG_CACHE_HOME", "").strip() or Path.home() / ".cache") / "assocmem" / CACHE_NAME


def host_key(cpuinfo: str | None = None, **extra: Any) -> dict[str, Any]:
    """What about this host changes which library is faster: CPU model, ISA extensions, machine, torch version,
    thread count and the libraries' environment variables (:data:`LIBRARY_ENV_PREFIXES`), plus ``extra``.
    ``cpuinfo``: the text of /proc/cpuinfo (default: read it)."""
    model, flags = cpu_model_and_flags(cpuinfo)
    env = {name: value for name, value in sorted(os.environ.items()) if name.startswith(LIBRARY_ENV_PREFIXES)}
    return {"cpu": model, "isa": flags, "machine": platform.machine(), "torch": torch.__version__,
            "threads": torch.get_num_threads(), "env": env, **extra}


def cpu_model_and_flags(cpuinfo: str | None = None) -> tuple[str, list[str]]:
    """The CPU's model name, with its vendor, family, model and stepping where /proc/cpuinfo gives them (a virtual
    machine may name a Zen 4 and a Zen 5 EPYC alike), and those of its ISA flags in :data:`ISA_FLAGS` (sorted)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            cpuinfo = ""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        name, _, value = line.partition(":")
        fields.setdefault(name.strip(), value.strip())
    model = fields.get("model name") or fields.get("Model") or platform.processor() or platform.machine()
    ids = [f"{name} {fields[name]}" for name in ("vendor_id", "cpu family", "model", "stepping") if fields.get(name)]
    model = f"{model} ({', '.join(ids)})" if ids else model
    flags = set((fields.get("flags") or fields.get("Features") or "").split())
    return model, sorted(flags.intersection(ISA_FLAGS))


def _normalised(value: Any) -> Any:
    """``value`` as it reads back from JSON (tuples become lists), so a key compares equal to its stored copy."""
    return json.loads(json.dumps(value, sort_keys=True))


def _key_of(entry: Mapping[str, Any]) -> dict[str, Any]:
    return {name: entry[name] for name in _KEY_FIELDS}


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[bool]:
    """Hold an exclusive lock beside the cache file; yields False (no cache) where it cannot be taken."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path.with_name(path.name + ".lock"), "a")  # noqa: SIM115 - closed below
    except OSError as err:
        log.warning("choice cache %s is not usable (%s): timing without it", path, err)
        yield False
        return
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _read_entries(path: Path) -> list[dict[str, Any]]:
    """The cache's well-formed entries; an unreadable file, or an entry without its fields, is logged and skipped."""
    if not path.exists():
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("version") != CACHE_VERSION or not isinstance(data["entries"], list):
            raise ValueError(f"not a version-{CACHE_VERSION} choice cache")
    except (OSError, ValueError, KeyError, UnicodeDecodeError) as err:
        log.warning("choice cache %s is unreadable (%s): ignored; choices are timed again and the file rewritten",
                    path, err)
        return []
    entries = [entry for entry in data["entries"] if _well_formed(entry)]
    if len(entries) < len(data["entries"]):
        log.warning("choice cache %s: %d malformed entries ignored", path, len(data["entries"]) - len(entries))
    return entries


def _well_formed(entry: Any) -> bool:
    return (isinstance(entry, dict) and all(name in entry for name in _KEY_FIELDS)
            and isinstance(entry.get("choice"), str) and isinstance(entry.get("seconds"), dict))


def _write_entries(path: Path, entries: list[dict[str, Any]]) -> None:
    try:
        write_json(path, {"version": CACHE_VERSION, "entries": entries})
    except (OSError, AssocmemError) as err:
        log.warning("choice cache %s could not be written (%s): the choice is used but not kept", path, err)
