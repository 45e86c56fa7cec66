"""Figures written by forked processes while the report goes on: rendering a figure's PNG and PDF took 21 of the
default report's 47 s (cProfile, 2-core Intel model 207 host), and no later step needs the files until the HTML
embeds them. Inside :func:`parallel_figures` each saved figure is handed to a forked child (it inherits the figure:
nothing is pickled), at most ``workers`` at a time; leaving the block waits for them all and raises, naming the
figure, if one failed. Outside the block, or where the platform cannot fork, figures are written in place."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
import traceback
from collections.abc import Callable, Iterator
from multiprocessing.process import BaseProcess

from assocmem.errors import AssocmemError


class FigureWriter:
    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.running: list[tuple[str, BaseProcess]] = []
        self.failed: list[str] = []

    def submit(self, name: str, write: Callable[[], None]) -> None:
        while len(self.running) >= self.workers:
            self._reap(self.running.pop(0))
        child = multiprocessing.get_context("fork").Process(target=_run_child, args=(write,), name=f"figure {name}")
        child.start()
        self.running.append((name, child))

    def finish(self) -> None:
        while self.running:
            self._reap(self.running.pop(0))
        if self.failed:
            raise AssocmemError(f"report: writing figure(s) {', '.join(self.failed)} failed; the traceback is above "
                                "in this log")

    def _reap(self, entry: tuple[str, BaseProcess]) -> None:
        name, child = entry
        child.join()
        if child.exitcode != 0:
            self.failed.append(name)


def _run_child(write: Callable[[], None]) -> None:
    try:
        write()
    except BaseException:  # noqa: BLE001 - any failure: print it for the log, tell the parent by the exit code
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)


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
