"""Figures written by forked processes (assocmem.report.figure_writer): the same bytes as written in place, all
files present when the block ends, a failed figure named in one error, the block's own error first; early figures
(drawn whole in a child, their result sent back) and figures drawn by their writer (style.draw_figure)."""

from __future__ import annotations

import functools
import logging
import os
import re
import sys

import matplotlib.pyplot as plt
import pytest

from assocmem.errors import AssocmemError
from assocmem.report import figure_writer
from assocmem.report.figure_writer import early_figure, parallel_figures, write_figure
from assocmem.report.style import draw_figure, save_figure

pytestmark = pytest.mark.skipif("fork" not in __import__("multiprocessing").get_all_start_methods(),
                                reason="the platform cannot fork: figures are written in place")


def draw(seed: int):
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot(range(10), [(i * seed) % 7 for i in range(10)], label=f"series {seed}")
    ax.set_yscale("log")
    ax.legend()
    return fig


def test_forked_figures_are_the_in_place_ones_and_complete_when_the_block_ends(tmp_path) -> None:
    (tmp_path / "inline").mkdir()
    (tmp_path / "forked").mkdir()
    inline = [save_figure(draw(seed), tmp_path / "inline", f"f{seed}") for seed in range(1, 6)]
    with parallel_figures(2):
        forked = [save_figure(draw(seed), tmp_path / "forked", f"f{seed}") for seed in range(1, 6)]
        assert figure_writer._current is not None
    assert figure_writer._current is None
    for inline_paths, forked_paths in zip(inline, forked, strict=True):
        for a, b in zip(inline_paths, forked_paths, strict=True):
            assert a.name == b.name and a.read_bytes() == b.read_bytes()
    assert not [p for p in (tmp_path / "forked").iterdir() if p.suffix not in (".png", ".pdf")]  # no temp files


def fail() -> None:
    raise ValueError("no axes")


def test_a_failed_figure_is_named_after_the_others_are_written(tmp_path, capfd) -> None:
    with pytest.raises(AssocmemError, match=r"writing figure\(s\) broken failed"), parallel_figures(3):
        write_figure("broken", fail)
        save_figure(draw(2), tmp_path, "fine")
    assert (tmp_path / "fine.png").is_file() and (tmp_path / "fine.pdf").is_file()
    assert "ValueError: no axes" in capfd.readouterr().err


def test_the_blocks_own_error_comes_first(tmp_path) -> None:
    with pytest.raises(KeyError, match="its own"), parallel_figures(2):
        write_figure("broken", fail)
        raise KeyError("its own")
    assert figure_writer._current is None


def test_one_worker_writes_in_place(tmp_path) -> None:
    with parallel_figures(1):
        save_figure(draw(3), tmp_path, "now")
        assert (tmp_path / "now.png").is_file() and figure_writer._current is None


def drawn_and_saved(out_dir, name: str, seed: int) -> tuple[str, int]:
    save_figure(draw(seed), out_dir, name)
    return name, os.getpid()


def test_an_early_figure_is_drawn_whole_in_a_child_and_returns_what_it_drew(tmp_path) -> None:
    (tmp_path / "inline").mkdir()
    (tmp_path / "early").mkdir()
    assert drawn_and_saved(tmp_path / "inline", "f", 4)[0] == "f"
    with parallel_figures(2):
        early = early_figure("f", functools.partial(drawn_and_saved, tmp_path / "early", "f", 4))
        save_figure(draw(1), tmp_path / "early", "g1")
        save_figure(draw(2), tmp_path / "early", "g2")  # the third writer: the early child's slot is reaped first
        name, pid = early.result()
    assert name == "f" and pid != os.getpid()
    for ext in ("png", "pdf"):
        assert (tmp_path / "early" / f"f.{ext}").read_bytes() == (tmp_path / "inline" / f"f.{ext}").read_bytes()


def test_an_early_figure_outside_the_block_is_drawn_when_asked(tmp_path) -> None:
    calls = []
    early = early_figure("f", lambda: calls.append(os.getpid()) or "caption")
    assert calls == [] and early.result() == "caption" and calls == [os.getpid()]


def test_a_failed_early_figure_is_named(tmp_path, capfd) -> None:
    with pytest.raises(AssocmemError, match="drawing figure broken failed"), parallel_figures(2):
        early_figure("broken", fail).result()
    assert "ValueError: no axes" in capfd.readouterr().err


def test_a_figure_drawn_in_its_writer_is_the_one_drawn_in_place(tmp_path) -> None:
    (tmp_path / "inline").mkdir()
    (tmp_path / "forked").mkdir()
    drawn_here = []

    def drawing(seed: int):
        drawn_here.append(os.getpid())
        return draw(seed)

    inline = draw_figure(functools.partial(drawing, 3), tmp_path / "inline", "h")
    assert drawn_here == [os.getpid()]
    with parallel_figures(2):
        forked = draw_figure(functools.partial(drawing, 3), tmp_path / "forked", "h")
    assert drawn_here == [os.getpid()]  # the child drew the second one
    for a, b in zip(inline, forked, strict=True):
        assert a.name == b.name and a.read_bytes() == b.read_bytes()


def test_the_log_says_when_each_figure_was_written_and_how_long_the_report_waited(tmp_path, capfd, caplog) -> None:
    handler = logging.StreamHandler(sys.stderr)  # a forked writer logs through its copy of the report's handlers
    figure_writer.log.addHandler(handler)
    try:
        with caplog.at_level(logging.INFO, logger=figure_writer.log.name), parallel_figures(2):
            for seed in range(1, 4):
                save_figure(draw(seed), tmp_path, f"f{seed}")
    finally:
        figure_writer.log.removeHandler(handler)
    err = capfd.readouterr().err
    for seed in range(1, 4):
        times = re.search(rf"figure f{seed}: ([0-9.]+) s in its writer \(CPU ([0-9.]+) s\), from ([0-9.]+) to "
                          r"([0-9.]+) s after the figures began", err)
        assert times is not None, err
        took, _cpu, began, ended = map(float, times.groups())
        assert began <= ended and abs(ended - began - took) <= 0.11
    assert re.search(r"figures: 3 in forked writers \(at most 2 at once\); the report waited [0-9.]+ s for a free "
                     r"writer and [0-9.]+ s for the last ones", caplog.text)
