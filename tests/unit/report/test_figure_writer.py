"""Figures written by forked processes (assocmem.report.figure_writer): the same bytes as written in place, all
files present when the block ends, a failed figure named in one error, the block's own error first."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest

from assocmem.errors import AssocmemError
from assocmem.report import figure_writer
from assocmem.report.figure_writer import parallel_figures, write_figure
from assocmem.report.style import save_figure

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
