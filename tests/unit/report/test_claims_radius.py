"""The radius claim's check rows on controlled inputs (nearest-neighbour distances at 2 r*, their growth with N on
pretrained models, never from unconverged runs) and the nearest-neighbour trend's bootstrap."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from test_claims import assert_valid

from assocmem.errors import AssocmemError
from assocmem.report.claims.radius import PAPER_RATIO, radius
from assocmem.report.nn_statistics import level_at_largest, nn_trend


def _nn_queries(mean_at, n_dim: int = 1024, n_chunks: int = 4000, seed: int = 0, run: str = "m/pct100",
                set_name: str = "gain_free") -> pd.DataFrame:
    """Nested self-search samples whose NN distances have mean ``mean_at(m)`` at sample size m."""
    rng = np.random.default_rng(seed)
    frames = []
    for fraction in (0.25, 0.5, 0.75, 1.0):
        m = int(fraction * n_chunks)
        frames.append(pd.DataFrame({"fraction": fraction, "n_patterns": m, "query": np.arange(m),
                                    "distance": mean_at(m) * rng.gamma(50.0, 1 / 50.0, size=m)}))
    return pd.concat(frames).assign(run=run, set=set_name)


def _radius_runs(usable: bool = True, n_dim: int = 1024, runs: tuple[str, ...] = ("m/pct100",),
                 paper_model: bool = True) -> pd.DataFrame:
    return pd.DataFrame({"run": list(runs), "n_dim": n_dim, "t_max": 256, "usable": usable,
                         "status": "converged" if usable else "not converged", "rms_norm": 30.0,
                         "paper_model": paper_model})


TWO_R_STAR_1024 = 2 * 7.7430632


def test_radius_at_two_r_star_for_every_run_of_a_width_is_reproduced() -> None:
    queries = pd.concat([_nn_queries(lambda m: TWO_R_STAR_1024, run=run, seed=i)
                         for i, run in enumerate(("a/pct100", "b/pct1"))])
    row = radius(queries, _radius_runs(runs=("a/pct100", "b/pct1")), n_boot=300)
    assert_valid(row)
    n = row["numbers"]
    assert row["verdict"] == "reproduced" and n["gain_free.outcomes_disagreeing"] == 0
    assert n["a/pct100.mean.largest"] == 4000 and n["a/pct100.primary_set_is_gain_free"] == 1
    assert n["a/pct100.mean.ratio_to_2r_star_lo"] <= 1 <= n["a/pct100.mean.ratio_to_2r_star_hi"]
    assert n["n1024.mean.spread_lo"] >= 1 and n["n1024.median.spread_hi"] < PAPER_RATIO
    assert n["a/pct100.2r_star_seq"] == pytest.approx(TWO_R_STAR_1024 * 16, rel=1e-6)  # sqrt(T_max = 256)


def test_radius_off_target_or_width_dependent_distances_are_refuted() -> None:
    far = radius(_nn_queries(lambda m: 1.5 * TWO_R_STAR_1024), _radius_runs(), n_boot=300)
    assert far["verdict"] == "refuted" and far["numbers"]["m/pct100.mean.ratio_to_2r_star_lo"] > PAPER_RATIO
    # each run within the paper's tolerance of 2r*, but one width, two levels 1.6x apart: not a function of n alone
    split = pd.concat([_nn_queries(lambda m: 0.85 * TWO_R_STAR_1024, run="a/pct100"),
                       _nn_queries(lambda m: 1.25 * TWO_R_STAR_1024, run="b/pct1", seed=1)])
    row = radius(split, _radius_runs(runs=("a/pct100", "b/pct1")), n_boot=300)
    assert row["verdict"] == "refuted" and row["numbers"]["n1024.mean.spread_lo"] > PAPER_RATIO
    edge = radius(_nn_queries(lambda m: PAPER_RATIO * TWO_R_STAR_1024), _radius_runs(), n_boot=300)
    assert edge["verdict"] == "not-testable"  # the interval straddles the paper's own tolerance


def test_radius_reads_the_largest_sample_without_extrapolating() -> None:
    """A distance is judged where it was measured, at the largest sample and across the nested samples: a gentle
    decline within the paper's tolerance passes, a steep one (the paper's '25, 50, 75 and 100%') does not."""
    gentle = radius(_nn_queries(lambda m: TWO_R_STAR_1024 * (m / 4000) ** -0.1), _radius_runs(), n_boot=300)
    n = gentle["numbers"]
    assert gentle["verdict"] == "reproduced" and n["m/pct100.mean.slope"] == pytest.approx(-0.1, abs=0.02)
    assert n["m/pct100.mean.at_target"] == pytest.approx(n["m/pct100.mean.level"], rel=0.05)
    assert n["m/pct100.mean.sample_spread"] == pytest.approx(4**0.1, rel=0.05)
    steep = radius(_nn_queries(lambda m: TWO_R_STAR_1024 * (m / 4000) ** -0.3), _radius_runs(), n_boot=300)
    assert steep["verdict"] == "refuted" and steep["numbers"]["m/pct100.mean.sample_spread_lo"] > PAPER_RATIO
    assert "80,000" not in steep["evidence"].split("Primary")[0]


def test_radius_never_rests_on_an_unconverged_run() -> None:
    row = radius(_nn_queries(lambda m: TWO_R_STAR_1024), _radius_runs(usable=False), n_boot=100)
    assert_valid(row)
    assert row["verdict"] == "not-testable" and "m/pct100 (not converged)" in row["evidence"]
    with pytest.raises(AssocmemError, match="t_max"):
        radius(_nn_queries(lambda m: 1.0), _radius_runs().drop(columns="t_max"))


def test_radius_on_models_trained_here_is_description_not_a_test() -> None:
    """Issue 38, item 6: the paper's r* is about pretrained GPT-2; a toy model's distances far from 2r* are
    described (same numbers), and the row names the command that decides."""
    far = radius(_nn_queries(lambda m: 0.3 * TWO_R_STAR_1024), _radius_runs(paper_model=False), n_boot=100)
    assert_valid(far)
    assert far["verdict"] == "not-testable" and "config/radius_gpt2.yaml" in far["evidence"]
    assert "Description only" in far["evidence"] and far["numbers"]["m/pct100.mean.ratio_to_2r_star"] < 0.35


def _gpt2_family(level_of_n, replicates: int = 3, with_gain: float = 1.0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Pretrained models of three widths, each on ``replicates`` chunk samples whose levels differ by 3%."""
    queries, runs = [], []
    for n_dim in (768, 1024, 1280):
        for k in range(replicates):
            run, level = f"w{n_dim}_r{k}/pretrained", level_of_n(n_dim) * (1 + 0.03 * (k - 1))
            for set_name, scale in (("gain_free", 1.0), ("distinct", with_gain)):
                queries.append(_nn_queries(lambda m, v=level * scale: v, n_chunks=200, seed=n_dim + k, run=run,
                                           set_name=set_name))
            runs.append({"run": run, "n_dim": n_dim, "t_max": 256, "usable": True, "status": "pretrained",
                         "paper_model": True, "model_id": f"gpt2-{n_dim}", "sample_seed": 1234 + 1000 * k})
    return pd.concat(queries), pd.DataFrame(runs)


def test_radius_on_pretrained_models_pools_replicates_and_tests_sqrt_n_growth() -> None:
    two_r = lambda n: 2 * np.sqrt(n / (2 * np.pi * np.e))  # noqa: E731
    assert [round(two_r(n), 1) for n in (768, 1024, 1280)] == [13.4, 15.5, 17.3]  # issue 38's figures
    queries, runs = _gpt2_family(two_r)
    row = radius(queries, runs, n_boot=50)
    n = row["numbers"]
    assert row["verdict"] == "reproduced" and n["paper_models"] == 3
    assert n["gpt2-1024.mean.replicates"] == 3 and "t-interval over 3 chunk samples" in row["evidence"]
    levels = [n[f"w1024_r{k}/pretrained.mean.level"] for k in range(3)]
    assert n["gpt2-1024.mean.level_hi"] - n["gpt2-1024.mean.level_lo"] > np.ptp(levels)  # run-to-run in it
    assert n["growth.mean.slope_lo"] <= 0.5 <= n["growth.mean.slope_hi"]
    assert n["design_power.paper"] >= 0.8 and "the design's power at the largest run-to-run CV" in row["evidence"]
    flat = radius(*_gpt2_family(lambda n: two_r(1024)), n_boot=50)  # the level right at n = 1024 only
    assert flat["verdict"] == "refuted" and flat["numbers"]["growth.mean.slope_hi"] < 0.5
    units_differ = radius(*_gpt2_family(two_r, with_gain=2.0), n_boot=50)  # with the gain: 2x too far
    assert units_differ["verdict"] == "not-testable" and "verdict with the gain: refuted" in units_differ["evidence"]
    shared = runs.assign(sample_seed=1234)
    with pytest.raises(AssocmemError, match="share a chunk sample"):
        radius(queries, shared, n_boot=10)


def test_nn_trend_bootstrap_covers_the_truth_and_handles_zeros() -> None:
    frame = _nn_queries(lambda m: 10.0 * m ** -0.5, seed=1)
    trend = nn_trend(frame, "median", target=80_000, n_boot=400, seed=2)
    assert trend["slope_lo"] <= -0.5 <= trend["slope_hi"]
    truth = 10.0 * 80_000 ** -0.5 * stats.gamma(50.0, scale=1 / 50.0).median()
    assert trend["at_target_lo"] <= truth <= trend["at_target_hi"]
    at_sample = 10.0 * 4000 ** -0.5 * stats.gamma(50.0, scale=1 / 50.0).median()
    assert trend["largest"] == 4000 and trend["level_lo"] <= at_sample <= trend["level_hi"]
    zeros = frame.assign(distance=0.0)
    assert np.isnan(nn_trend(zeros, "mean")["slope"])


@pytest.mark.parametrize("statistic", ["mean", "median"])
def test_the_level_without_a_bootstrap_is_the_trends_level(statistic: str) -> None:
    """The sets reported beside the primary one quote only the level at the largest sample; it is nn_trend's."""
    frame = _nn_queries(lambda m: 10.0 * m ** -0.5, seed=3)
    trend = nn_trend(frame, statistic, n_boot=20, seed=0)
    assert level_at_largest(frame.sample(frac=1.0, random_state=0), statistic) == (trend["largest"], trend["level"])
