"""What a running job says on the terminal.

A rule sends its stdout and stderr to its log file; the rule environment keeps the terminal open as the status
descriptor (``ASSOCMEM_STATUS_FD``, see ``workflow/rules/common.smk``). Every stage prints one line there when it
finishes (:func:`status_line`), and a long loop prints a progress line at a nanoGPT-like rate (:class:`Ticker`):
at each tenth of the work, but not more often than every ``min_gap`` seconds, and at least every ``max_gap``
seconds, e.g. ``train L4/pct100  step 3500/7000  val 1.021  best 1.019  ETA 2 m``. The progress bars
(:func:`bar`, tqdm) go on to the job's log as before.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from tqdm import tqdm

STATUS_FD = "ASSOCMEM_STATUS_FD"
_job: list[str] = []  # the job this process runs (cli.run_stage), which names every progress line


def set_job(job: str) -> None:
    """Name the job this process runs (e.g. ``neighbours L4/pct100``) so that every progress line says whose it is."""
    _job[:] = [job]


def _labelled(desc: str) -> str:
    """``desc`` prefixed with the job's name, unless it already starts with it (``train L4/pct100``)."""
    job = _job[0] if _job else ""
    return desc if not job or desc.startswith(job) else f"{job}: {desc}"


_last_line = [time.monotonic()]  # when this process last printed a line on the terminal (for Heartbeat)


def status_line(line: str) -> bool:
    """Print ``assocmem: <line>`` on the terminal when the rule environment opened one; False when it did not."""
    fd = os.environ.get(STATUS_FD)
    if fd is None or not fd.isdigit():
        return False
    with contextlib.suppress(OSError):  # not open in this process: the job's log has the line anyway
        os.write(int(fd), f"assocmem: {line}\n".encode())
        _last_line[0] = time.monotonic()
        return True
    return False


class Heartbeat:
    """While a stage runs, a line every ``gap`` seconds in which it printed nothing else (a stage without a progress
    bar, such as the report, or a long step between two bar updates): ``report  running  25 s``. A bar's own lines
    come at least every 20 s (:class:`Ticker`), so a heartbeat never interleaves with them."""

    def __init__(self, job: str, gap: float = 25.0, emit: Callable[[str], Any] = status_line,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.job, self.gap, self.emit, self.clock = job, gap, emit, clock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="assocmem-heartbeat", daemon=True)

    def _beat(self) -> None:
        start = self.clock()
        _last_line[0] = start
        while not self._stop.wait(min(1.0, self.gap / 4)):
            now = self.clock()
            if now - _last_line[0] >= self.gap:
                self.emit(f"{self.job}  running  {format_eta(now - start)}")
                _last_line[0] = now

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def format_eta(seconds: float) -> str:
    """A coarse remaining time: '40 s', '2 m', '1 h 05 m'."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} m"
    hours, minutes = divmod(round(seconds / 60), 60)
    return f"{hours} h {minutes:02d} m"


class Ticker:
    """Decides when a loop's progress line is due and formats it.

    A line is due when the work crossed into a new tenth and ``min_gap`` seconds passed since the last line (or the
    start), or when ``max_gap`` seconds passed whatever the progress; never after the work is done (the stage's
    own final line says that)."""

    def __init__(self, label: str, total: int | None, unit: str, *, initial: int = 0, min_gap: float = 5.0,
                 max_gap: float = 20.0, clock: Callable[[], float] = time.monotonic,
                 emit: Callable[[str], Any] = status_line) -> None:
        self.label, self.total, self.unit = label, total, unit
        self.min_gap, self.max_gap, self.clock, self.emit = min_gap, max_gap, clock, emit
        self.start = self.last = clock()
        self.initial = initial
        self.tenth = self._tenth(initial)

    def _tenth(self, done: int) -> int:
        return 10 * done // self.total if self.total else 0

    def update(self, done: int, fields: Mapping[str, Any] | None = None) -> str | None:
        """The progress line when one is due (and emitted), else None."""
        now = self.clock()
        if self.total and done >= self.total:
            return None
        tenth = self._tenth(done)
        due = (tenth > self.tenth and now - self.last >= self.min_gap) or now - self.last >= self.max_gap
        if not due:
            return None
        self.tenth, self.last = tenth, now
        line = self.line(done, now, fields or {})
        self.emit(line)
        return line

    def line(self, done: int, now: float, fields: Mapping[str, Any]) -> str:
        count = f"{done}/{self.total}" if self.total else f"{done}"
        parts = [self.label, f"{self.unit} {count}", *(f"{key} {value}" for key, value in fields.items())]
        rate = (done - self.initial) / max(now - self.start, 1e-9)
        if self.total and rate > 0:
            parts.append(f"ETA {format_eta((self.total - done) / rate)}")
        return "  ".join(parts)


class _TerminalBar(tqdm):
    """A tqdm bar (to the job's log) that also gives its :class:`Ticker` every update and postfix."""

    def __init__(self, *args: Any, ticker_label: str, ticker_unit: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._fields: dict[str, Any] = {}
        self._ticker = None if self.disable else Ticker(ticker_label, self.total, ticker_unit, initial=self.n)

    def set_postfix(self, ordered_dict: Mapping[str, Any] | None = None, refresh: bool = True,
                    **kwargs: Any) -> None:
        self._fields = {**(ordered_dict or {}), **kwargs}
        super().set_postfix(ordered_dict, refresh=refresh, **kwargs)

    def update(self, n: float | None = 1) -> bool | None:
        shown = super().update(n)
        if self._ticker is not None:
            self._ticker.update(int(self.n), self._fields)
        return shown


def bar(*, total: int | None, desc: str, unit: str, initial: int = 0, disable: bool = False,
        **kwargs: Any) -> tqdm:
    """A progress bar for a long loop: tqdm to the job's log, and progress lines on the terminal
    (:class:`Ticker`), labelled ``desc`` and counted in ``unit``s."""
    return _TerminalBar(total=total, desc=desc, unit=unit, initial=initial, disable=disable, mininterval=5,
                        ticker_label=_labelled(desc), ticker_unit=unit, **kwargs)
