"""The radius claim and its figure compute each bootstrapped trend once, and get the numbers a computation without
the memory gives."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from assocmem.report import nn_trends
from assocmem.report.claims.radius import PAPER_RATIO, primary_set, radius
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


def test_the_figure_reads_the_claims_trends_and_the_numbers_are_those_without_the_memory(tmp_path, monkeypatch):
    queries, runs = _mixed_runs()
    alone = radius(queries, runs, seed=5)
    computed: list[tuple[str, str]] = []
    real = nn_trends.nn_trend

    def counted(frame, statistic, **kw):
        computed.append((frame["run"].iloc[0], statistic))
        return real(frame, statistic, **kw)

    monkeypatch.setattr(nn_trends, "nn_trend", counted)
    with nn_trends.shared():
        together = radius(queries, runs, seed=5)
        claimed = len(computed)
        radius_trend(queries, runs, tmp_path, tolerance=PAPER_RATIO, primary=primary_set, seed=5)
    # the claim: each paper model's two units and the toy run's primary set, mean and median; the figure then
    # computes only the unusable run's mean, which the claim never asked for
    assert claimed == 2 * 4 + 2 and computed[claimed:] == [("L2/pct1", "mean")]
    assert together["verdict"] == alone["verdict"] and _same(together["numbers"], alone["numbers"])


def test_a_trend_is_remembered_by_its_data_not_its_name(monkeypatch):
    queries, _ = _mixed_runs()
    frame = queries[(queries["run"] == "L4/pct100") & (queries["set"] == "gain_free")]
    computed: list[str] = []
    real = nn_trends.nn_trend
    monkeypatch.setattr(nn_trends, "nn_trend", lambda f, s, **kw: computed.append(s) or real(f, s, **kw))
    first = nn_trends.trend(frame, "mean", n_boot=50)
    nn_trends.trend(frame, "mean", n_boot=50)
    assert len(computed) == 2  # outside shared(): nothing is remembered
    with nn_trends.shared():
        kept = nn_trends.trend(frame, "mean", n_boot=50)
        again = nn_trends.trend(frame, "mean", n_boot=50)
        assert len(computed) == 3 and kept["level"] == first["level"]
        again.pop("level_replicates")  # a caller's change to its dict does not reach the memory
        assert "level_replicates" in nn_trends.trend(frame, "mean", n_boot=50)
        moved = frame.assign(distance=frame["distance"] * 2)  # same run and set, other distances
        assert nn_trends.trend(moved, "mean", n_boot=50)["level"] == pytest.approx(2 * first["level"])
        assert nn_trends.trend(frame, "mean", n_boot=60)["level_replicates"].shape == (60,)
        assert len(computed) == 5  # the moved data and the other replicate count, each computed
    nn_trends.trend(frame, "mean", n_boot=50)
    assert len(computed) == 6  # the memory ends with the block
