"""Figures written by forked processes while the report goes on: rendering a figure's PNG and PDF took 21 of the
default report's 47 s (cProfile, 2-core Intel model 207 host), and no later step needs the files until the HTML
embeds them. Inside :func:`parallel_figures` each saved figure is handed to a forked child (it inherits the figure:
nothing is pickled), at most ``workers`` at a time; leaving the block waits for them all and raises, naming the
figure, if one failed. Outside the block, or where the platform cannot fork, figures are written in place.

A figure that needs no run's data (the theory figures) can be drawn whole in a child from the block's start
(:func:`early_figure`): its drawing, not only its rendering, then overlaps the report's own work; the child sends
back what the drawing function returned."""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any, Generic, TypeVar

from assocmem.errors import AssocmemError

T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass
class _Child:
    name: str
    process: BaseProcess
    receiver: Connection | None = None  # an early figure's: what its drawing function returned
    result: Any = None
    reaped: bool = False

    def reap(self) -> bool:
        """Wait for the child (its result first, so a full pipe cannot block it); True if it succeeded."""
        if not self.reaped:
            if self.receiver is not None:
                with contextlib.suppress(EOFError):  # it failed before sending: the exit code says so
                    self.result = self.receiver.recv()
                self.receiver.close()
            self.process.join()
            self.reaped = True
        return self.process.exitcode == 0


class FigureWriter:
    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.running: list[_Child] = []
        self.failed: list[str] = []
        self.opened = time.monotonic()
        self.started = 0
        self.waited_for_a_writer = 0.0  # the report's own process, blocked at `workers` running children

    def submit(self, name: str, write: Callable[[], None]) -> None:
        self._start(_Child(name, self._process(name, _run_child, (write, name, self.opened))))

    def early(self, name: str, draw: Callable[[], T]) -> _Child:
        receiver, sender = multiprocessing.get_context("fork").Pipe(duplex=False)
        child = _Child(name, self._process(name, _run_early, (draw, sender, name, self.opened)), receiver)
        self._start(child)
        sender.close()  # the child holds its own end: the parent reads EOF if it dies without sending
        return child

    def result(self, child: _Child) -> Any:
        if child in self.running:
            self.running.remove(child)
            self._reap(child)
        if child.name in self.failed:
            raise AssocmemError(f"report: drawing figure {child.name} failed; the traceback is above in this log")
        return child.result

    def finish(self) -> None:
        last = time.monotonic()
        while self.running:
            self._reap(self.running.pop(0))
        log.info("figures: %d in forked writers (at most %d at once); the report waited %.1f s for a free writer "
                 "and %.1f s for the last ones, %.1f s after the figures began", self.started, self.workers,
                 self.waited_for_a_writer, time.monotonic() - last, time.monotonic() - self.opened)
        if self.failed:
            raise AssocmemError(f"report: writing figure(s) {', '.join(self.failed)} failed; the traceback is above "
                                "in this log")

    def _process(self, name: str, target: Callable[..., None], args: tuple[Any, ...]) -> BaseProcess:
        blocked = time.monotonic()
        while len(self.running) >= self.workers:
            self._reap(self.running.pop(0))
        self.waited_for_a_writer += time.monotonic() - blocked
        return multiprocessing.get_context("fork").Process(target=target, args=args, name=f"figure {name}")

    def _start(self, child: _Child) -> None:
        child.process.start()
        self.running.append(child)
        self.started += 1

    def _reap(self, child: _Child) -> None:
        if not child.reap() and child.name not in self.failed:
            self.failed.append(child.name)


def _run_child(write: Callable[[], None], name: str, opened: float) -> None:
    began = time.monotonic()
    try:
        write()
    except BaseException:  # noqa: BLE001 - any failure: print it for the log, tell the parent by the exit code
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    # the report's log says which figure was last and why: its wall against its own CPU (a new process's clock)
    log.info("figure %s: %.1f s in its writer (CPU %.1f s), from %.1f to %.1f s after the figures began", name,
             time.monotonic() - began, time.process_time(), began - opened, time.monotonic() - opened)


def _run_early(draw: Callable[[], Any], sender: Connection, name: str, opened: float) -> None:
    global _current
    _current = None  # the child draws and writes in place: its figures are its whole job

    def send() -> None:
        sender.send(draw())

    _run_child(send, name, opened)


class EarlyFigure(Generic[T]):
    """What an early figure's drawing function returned: from its child, or drawn now where nothing forks."""

    def __init__(self, draw: Callable[[], T], writer: FigureWriter | None, child: _Child | None) -> None:
        self._draw, self._writer, self._child = draw, writer, child

    def result(self) -> T:
        if self._writer is None or self._child is None:
            return self._draw()
        return self._writer.result(self._child)


_current: FigureWriter | None = None


@contextlib.contextmanager
def parallel_figures(workers: int) -> Iterator[None]:
    """Write the figures saved inside the block in up to ``workers`` forked processes (1, or no fork: in place)."""
    global _current
    if workers <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        yield
        return
    _current = writer = FigureWriter(workers)
    try:
        yield
    except BaseException:
        _current = None
        with contextlib.suppress(AssocmemError):  # the block's own error is the one to report
            writer.finish()
        raise
    _current = None
    writer.finish()


def write_figure(name: str, write: Callable[[], None]) -> None:
    """Run ``write`` (which saves ``name``'s files) in a forked writer inside :func:`parallel_figures`, else now."""
    if _current is None:
        write()
    else:
        _current.submit(name, write)


def early_figure(name: str, draw: Callable[[], T]) -> EarlyFigure[T]:
    """Start ``draw`` (which draws and saves ``name`` from no run's data) in a forked child inside
    :func:`parallel_figures`; outside it, or where nothing forks, ``result()`` draws it then, in place."""
    if _current is None:
        return EarlyFigure(draw, None, None)
    return EarlyFigure(draw, _current, _current.early(name, draw))
