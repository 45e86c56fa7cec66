"""The radius claim and its figure compute each bootstrapped trend once, side by side in forked workers, and get
the numbers a serial computation gives."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from assocmem.report import nn_trends
from assocmem.report.claims.radius import PAPER_RATIO, primary_set, radius, trend_requests
from assocmem.report.radius_figure import radius_trend


def _queries(run: str, level: float, seed: int, sets: tuple[str, ...]) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frames = [pd.DataFrame({"fraction": f, "n_patterns": int(300 * f), "query": np.arange(int(300 * f)),
                            "distance": level * rng.gamma(20.0, 1 / 20.0, int(300 * f)), "set": name})
              for name in sets for f in (0.25, 0.5, 1.0)]
    return pd.concat(frames).assign(run=run)


def _mixed_runs() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Paper models of two widths (both units), a described toy run (three sets) and an unusable one."""
    queries, runs = [], []
    for n_dim, seed in ((768, 1), (1024, 2)):
        run = f"gpt2-{n_dim}/pretrained"
        queries.append(_queries(run, 2 * math.sqrt(n_dim / (2 * math.pi * math.e)), seed, ("gain_free", "distinct")))
        runs.append({"run": run, "n_dim": n_dim, "t_max": 256, "usable": True, "status": "pretrained",
                     "paper_model": True, "model_id": f"gpt2-{n_dim}"})
    for run, usable, seed in (("L4/pct100", True, 3), ("L2/pct1", False, 4)):
        queries.append(_queries(run, 1.5, seed, ("gain_free", "distinct", "all")))
        runs.append({"run": run, "n_dim": 64, "t_max": 36, "usable": usable, "status": "converged" if usable
                     else "over-fitted", "paper_model": False, "model_id": run})
    return pd.concat(queries, ignore_index=True), pd.DataFrame(runs)


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        a[k] == b[k] or (isinstance(a[k], float) and math.isnan(a[k]) and math.isnan(b[k])) for k in a)


@pytest.mark.parametrize("workers", [1, 3])
def test_the_claim_and_its_figure_read_prefetched_trends_equal_to_serial_ones(workers, tmp_path, monkeypatch):
    queries, runs = _mixed_runs()
    serial = radius(queries, runs, seed=5)
    with nn_trends.shared():
        computed = nn_trends.prefetch(trend_requests(queries, runs), workers, seed=5)
        # paper models: 2 units x 2 statistics each; the toy run: its primary set x 2; the figure's means of the
        # primary sets are among them, the unusable run's is not
        assert computed == 2 * 4 + 2 + 1
        asked: list[str] = []
        monkeypatch.setattr(nn_trends, "nn_trend", lambda frame, statistic, **_: asked.append(statistic))
        shared = radius(queries, runs, seed=5)
        radius_trend(queries, runs, tmp_path, tolerance=PAPER_RATIO, primary=primary_set, seed=5)
    assert asked == []  # nothing left to compute: the requests name every trend the two ask for
    assert shared["verdict"] == serial["verdict"] and _same(shared["numbers"], serial["numbers"])


def test_a_trend_is_remembered_by_its_data_not_its_name(monkeypatch):
    queries, runs = _mixed_runs()
    frame = queries[(queries["run"] == "L4/pct100") & (queries["set"] == "gain_free")]
    first = nn_trends.trend(frame, "mean", n_boot=50)
    assert nn_trends.prefetch([(frame, "mean")], 2, n_boot=50) == 0  # outside shared(): nothing to keep them in
    with nn_trends.shared():
        assert _same({k: v for k, v in nn_trends.trend(frame, "mean", n_boot=50).items() if k != "level_replicates"},
                     {k: v for k, v in first.items() if k != "level_replicates"})
        again = nn_trends.trend(frame, "mean", n_boot=50)
        again.pop("level_replicates")  # a caller's change to its dict does not reach the memory
        assert "level_replicates" in nn_trends.trend(frame, "mean", n_boot=50)
        moved = frame.assign(distance=frame["distance"] * 2)  # same run and set, other distances
        assert nn_trends.trend(moved, "mean", n_boot=50)["level"] == pytest.approx(2 * first["level"])
        assert nn_trends.trend(frame, "mean", n_boot=60)["level_replicates"].shape == (60,)
