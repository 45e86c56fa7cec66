"""A killed Snakemake run leaves its lock behind (``.snakemake/locks``), and the next run refuses to start until
someone types ``snakemake --unlock``. ``assocmem run`` removes such a lock itself, but only when no Snakemake
process, and no job of one, still works in that directory: a live run keeps its lock, and the second run gets
Snakemake's own refusal.

A process counts as working in the directory when its working directory is that directory, or its command line
names it (``--directory``), and its command line runs Snakemake or an ``assocmem`` stage. Linux only (``/proc``);
elsewhere nothing is removed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

PROC = Path("/proc")


def work_directory(snakemake_args: list[str]) -> Path:
    """The directory Snakemake will run in: ``--directory``/``-d`` if given, else the current one."""
    for i, arg in enumerate(snakemake_args):
        if arg.startswith("--directory="):
            return Path(arg.split("=", 1)[1]).resolve()
        if arg in ("--directory", "-d") and i + 1 < len(snakemake_args):
            return Path(snakemake_args[i + 1]).resolve()
    return Path.cwd().resolve()


def has_locks(workdir: Path) -> bool:
    locks = workdir / ".snakemake" / "locks"
    return locks.is_dir() and any(locks.iterdir())


def _processes() -> Iterator[tuple[int, list[str], Path | None]]:
    """(pid, argv, working directory) of every process this user may inspect."""
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            cwd: Path | None = Path(os.readlink(entry / "cwd")).resolve()
        except OSError:
            continue
        yield int(entry.name), [arg for arg in argv if arg], cwd


def _runs_workflow(argv: list[str]) -> bool:
    names = {Path(arg).name for arg in argv}
    return "snakemake" in names or ("-m" in argv and "assocmem" in argv)


def live_runs(workdir: Path, exclude: set[int]) -> list[int]:
    """PIDs of Snakemake processes or assocmem jobs working in ``workdir``."""
    found = []
    for pid, argv, cwd in _processes():
        if pid in exclude or not _runs_workflow(argv):
            continue
        paths = (arg.split("=", 1)[-1] for arg in argv)
        named = any(Path(path).resolve() == workdir for path in paths if path.startswith(("/", ".")))
        if cwd == workdir or named:
            found.append(pid)
    return found


def stale_lock(workdir: Path, looks: int = 5, interval: float = 0.5) -> bool:
    """Whether ``workdir`` holds a Snakemake lock that no live process can own (a killed run's).

    A run killed a moment ago may still have jobs on their way out, so this looks up to ``looks`` times,
    ``interval`` seconds apart: a live run is there every time, a killed one soon is not."""
    workdir = workdir.resolve()
    if not PROC.is_dir() or not has_locks(workdir):
        return False
    for look in range(looks):
        if not live_runs(workdir, exclude={os.getpid(), os.getppid()}):
            return True
        if look + 1 < looks:
            time.sleep(interval)
    return False
