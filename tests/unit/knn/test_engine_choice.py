"""neighbours.cpu_engine: auto chooses faiss or the oneDNN engine by timing both at the search's shape (a fake timer
decides here), keeps the answer per host and shape, and the neighbours stage times once, at its largest search."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from helpers import FakeTimer, fake_timer_installer

from assocmem.gemm import onednn_available
from assocmem.knn import engines, stage
from assocmem.knn.engines import TIMING_MIN_MACS, TIMING_QUERIES, choose_cpu_engine, engine_searches
from assocmem.knn.stage import job_engine

BIG = (16384, 80000, 64, 11)  # the default config's radius search: 80,000 x 80,000 x 64


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Callable[[dict[str, float]], FakeTimer]:
    return fake_timer_installer(monkeypatch, engines, "engine_searches")


@pytest.mark.parametrize(("cost", "expected"), [({"faiss": 2e-3, "onednn": 1e-3}, "onednn"),
                                                ({"faiss": 1e-3, "onednn": 2e-3}, "faiss")])
def test_auto_takes_the_faster_engine_and_keeps_it(fake, tmp_path: Path, cost: dict, expected: str) -> None:
    timer, cache = fake(cost), tmp_path / "choices.json"
    got = choose_cpu_engine("auto", BIG, onednn=True, cache_file=cache, clock=timer)
    assert (got.value, got.how) == (expected, "timed")
    assert timer.shapes == [{"queries": TIMING_QUERIES, "rows": 80000, "dim": 64, "k": 11, "blocks": [256, 8192, 32]}]
    assert {"faiss", "faiss_blas", "faiss_threads"} <= set(got.host)
    timer.calls.clear()
    again = choose_cpu_engine("auto", BIG, onednn=True, cache_file=cache, clock=timer)
    assert (again.value, again.how, timer.calls) == (expected, "cache", [])
    wider = choose_cpu_engine("auto", (16384, 80000, 128, 11), onednn=True, cache_file=cache, clock=timer)
    assert wider.how == "timed" and timer.calls  # another shape is timed again
    assert len(json.loads(cache.read_text())["entries"]) == 2


def test_explicit_engines_and_small_searches_are_not_timed(fake, tmp_path: Path) -> None:
    timer, cache = fake({"faiss": 1.0, "onednn": 2.0}), tmp_path / "choices.json"
    assert choose_cpu_engine("onednn", BIG, onednn=True, cache_file=cache, clock=timer).how == "explicit"
    assert choose_cpu_engine("faiss", BIG, onednn=True, cache_file=cache, clock=timer).how == "explicit"
    small = (1000, 1000, 64, 11)
    assert np.prod(small[:3]) < TIMING_MIN_MACS
    got = choose_cpu_engine("auto", small, onednn=True, cache_file=cache, clock=timer)
    assert (got.value, got.how, got.shape) == ("faiss", "small", {"queries": 1000, "rows": 1000, "dim": 64, "k": 11})
    assert choose_cpu_engine("auto", BIG, onednn=False, cache_file=cache, clock=timer).how == "unavailable"
    assert timer.calls == [] and not cache.exists()


def test_the_timed_database_is_capped(fake, tmp_path: Path) -> None:
    timer = fake({"faiss": 1.0, "onednn": 2.0})
    choose_cpu_engine("auto", (10**6, 10**6, 1024, 11), onednn=True, cache_file=tmp_path / "c.json", clock=timer)
    assert timer.shapes[0]["rows"] * 1024 * 4 == engines.TIMING_DATABASE_BYTES


def test_the_stage_times_its_largest_search(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    monkeypatch.setattr(stage, "resolve_engine", lambda device, engine, search, **_: seen.append((engine, search)))
    cfg = {"k": 10, "device": "cpu", "method": "exact", "cpu_engine": "auto", "radius_sample_max": 80000}
    job_engine(cfg, n_train=2000, n_heldout=2000, n_radius=100000, dim=64)  # the radius test: 80,000 rows
    job_engine({**cfg, "radius_sample_max": None}, n_train=5000, n_heldout=9000, n_radius=300, dim=8)
    job_engine({**cfg, "method": "ivf"}, n_train=10**6, n_heldout=10**6, n_radius=3000, dim=8)  # radius only
    assert seen == [("auto", (80000, 80000, 64, 11)), ("auto", (9000, 5000, 8, 11)), ("auto", (3000, 3000, 8, 11))]


@pytest.mark.skipif(not onednn_available(), reason="this torch build has no oneDNN")
def test_the_real_searches_agree() -> None:
    searches = engine_searches({"queries": 64, "rows": 2000, "dim": 16, "k": 5})
    (faiss_dist, faiss_ids), (onednn_dist, onednn_ids) = searches["faiss"](), searches["onednn"]()
    np.testing.assert_array_equal(faiss_ids, onednn_ids)
    np.testing.assert_allclose(faiss_dist, onednn_dist, rtol=1e-4, atol=1e-4)
