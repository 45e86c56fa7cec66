"""A killed Snakemake run leaves its lock behind (``.snakemake/locks``), and the next run refuses to start until
someone types ``snakemake --unlock``. ``assocmem run`` removes such a lock itself, but only when no Snakemake
process, and no job of one, still works in that directory: a live run keeps its lock, and the second run gets
Snakemake's own refusal.

A process counts as working in the directory when its working directory is that directory, or its command line
names it (``--directory``), and its command line runs Snakemake or an ``assocmem`` stage. Linux only (``/proc``);
elsewhere nothing is removed.

Snakemake's lock lives in the working directory, so two checkouts writing one ``results_dir`` would not see each
other. A run therefore also claims the results directory (``<results_dir>/.assocmem-run.json``: checkout, working
directory, host and PID of the Snakemake main process) from its start to its end, and the workflow refuses to
start while another checkout's or working directory's run on this host holds it. A claim whose process is gone is
stale and overwritten; one from another host cannot be checked and is overwritten too.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from assocmem.errors import AssocmemError

PROC = Path("/proc")
CLAIM = ".assocmem-run.json"


class ResultsDirBusy(AssocmemError):
    """Another checkout's live run holds the results directory."""


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


def claim_file(results_dir: str | os.PathLike[str]) -> Path:
    return Path(results_dir).resolve() / CLAIM


def _start_ticks(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot, ``/proc/<pid>/stat``); None if unknown or a zombie."""
    try:
        fields = (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
        return None if fields[0] == "Z" else int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def pid_alive(pid: int, started: int | None = None) -> bool:
    """Whether process ``pid`` runs on this host; with ``started``, whether it is still the process that
    started then (not a later one that got the same PID)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: alive
    if not PROC.is_dir():
        return True
    ticks = _start_ticks(pid)
    return ticks is not None and (started is None or ticks == started)


def this_run(checkout: str | os.PathLike[str]) -> dict[str, Any]:
    """The claim of this process, the Snakemake main process, working in the current directory."""
    return {"checkout": str(Path(checkout).resolve()), "workdir": str(Path.cwd().resolve()),
            "host": socket.gethostname(), "pid": os.getpid(), "process_start": _start_ticks(os.getpid()),
            "since": datetime.now(UTC).isoformat(timespec="seconds")}


def read_claim(results_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The claim on ``results_dir``; None if there is none or it is unreadable (a stale one to overwrite)."""
    try:
        record = json.loads(claim_file(results_dir).read_text())
    except (OSError, ValueError):
        return None
    fields = ("checkout", "workdir", "host", "pid")
    if not isinstance(record, dict) or not all(key in record for key in fields):
        return None
    pid = record["pid"]
    return record if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 else None


def _same_run(record: dict[str, Any], mine: dict[str, Any]) -> bool:
    """Same checkout and working directory: this run itself, its jobs (local or on a cluster node), or a rerun."""
    return record["checkout"] == mine["checkout"] and record["workdir"] == mine["workdir"]


def _live(record: dict[str, Any]) -> bool:
    """Whether the claiming process still runs; another host's cannot be checked and counts as gone."""
    if record["host"] != socket.gethostname():
        return False
    started = record.get("process_start")
    return pid_alive(record["pid"], started if isinstance(started, int) else None)


def check_claim(results_dir: str | os.PathLike[str], checkout: str | os.PathLike[str]) -> None:
    """Raise ResultsDirBusy when another checkout's or working directory's live run holds ``results_dir``."""
    record = read_claim(results_dir)
    if record is None or _same_run(record, this_run(checkout)) or not _live(record):
        return
    raise ResultsDirBusy(
        f"results directory {Path(results_dir).resolve()} is in use by another run: checkout {record['checkout']} "
        f"(working directory {record['workdir']}), Snakemake process {record['pid']} on this host, since "
        f"{record.get('since', '?')}. Two runs writing one results directory overwrite each other's files. Wait "
        f"until that run ends, or give this one another results_dir (e.g. `--config results_dir=<dir>`). If process "
        f"{record['pid']} is no such run, delete {claim_file(results_dir)}.")


def check_results_dir(results_dir: str, checkout: str | os.PathLike[str]) -> None:
    """Refuse, before anything runs, a ``results_dir`` the run must not or cannot write: empty (it meant the working
    directory), the file system's root, the checkout itself unless written as ``.``, a file, or a place this user
    cannot create files in (probed with a temporary directory, removed at once: a dry run leaves nothing)."""
    key = "results_dir"
    if not results_dir.strip():
        raise AssocmemError(f"{key} is empty: give a directory (default: results)")
    path = Path(results_dir).expanduser().resolve()
    if path == Path(path.anchor):
        raise AssocmemError(f"{key}: {results_dir!r} is the file system's root; give a directory of its own "
                            "(default: results)")
    if path == Path(checkout).resolve() and results_dir.strip() != ".":
        raise AssocmemError(f"{key}: {results_dir!r} is the checkout itself, where the results would mix with the "
                            "code; give a directory of its own (default: results), or write `.` if that is meant")
    existing = next(parent for parent in (path, *path.parents) if parent.exists())
    if not existing.is_dir():
        raise AssocmemError(f"{key}: {existing} is a file, not a directory")
    try:
        tempfile.TemporaryDirectory(dir=existing, prefix=".assocmem-probe-").cleanup()
    except OSError as err:
        raise AssocmemError(f"{key}: cannot create {path} (creating a directory in {existing} fails: "
                            f"{err.strerror or err}); give results_dir a directory this user can write") from None


def claim(results_dir: str | os.PathLike[str], checkout: str | os.PathLike[str]) -> None:
    """Record (atomically) that this run holds ``results_dir``; checked again first, for a run that started
    since this workflow was parsed."""
    from assocmem.io import write_json

    check_claim(results_dir, checkout)
    try:
        write_json(claim_file(results_dir), this_run(checkout))
    except OSError as err:
        raise AssocmemError(f"results_dir {results_dir}: cannot write there ({err.strerror or err}); give "
                            "results_dir a directory this user can write") from err


def release(results_dir: str | os.PathLike[str]) -> None:
    """Remove this process's claim on ``results_dir`` (another's, if any, stays)."""
    record = read_claim(results_dir)
    if record is not None and record["pid"] == os.getpid() and record["host"] == socket.gethostname():
        claim_file(results_dir).unlink(missing_ok=True)
