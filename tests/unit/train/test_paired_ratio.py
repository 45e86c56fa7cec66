"""The interleaved two-arm design of the GPU check's GPT-2 comparison (assocmem.testing.paired_ratio, issue 41): its
interval and verdicts on known truths and on a referee's alternatives, and its schedule run from a trainer's hook."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from assocmem.testing import paired_ratio as paired_ratio_module
from assocmem.testing.paired_ratio import (
    Interleaver,
    Truth,
    block_order,
    median_rank,
    paired_ratio,
    simulate,
)

times = st.lists(st.floats(0.01, 10.0), min_size=3, max_size=30)


@given(times, st.floats(0.5, 2.0), st.floats(0.01, 100.0))
@settings(max_examples=60, deadline=None)
def test_the_ratio_is_the_speed_of_a_over_b_and_ignores_the_unit(seconds, speedup, unit) -> None:
    a = np.array(seconds)
    b = a * speedup
    result = paired_ratio(a * unit, b * unit)
    assert result.ratio == pytest.approx(speedup, rel=1e-9)
    assert result.low <= result.ratio <= result.high and result.median_low <= result.median <= result.median_high


@given(times, times)
@settings(max_examples=60, deadline=None)
def test_swapping_the_arms_inverts_the_ratio_and_its_interval(first, second) -> None:
    n = min(len(first), len(second))
    a, b = np.array(first[:n]), np.array(second[:n])
    forward, backward = paired_ratio(a, b), paired_ratio(b, a)
    assert forward.ratio * backward.ratio == pytest.approx(1.0)
    assert forward.low * backward.high == pytest.approx(1.0) and forward.high * backward.low == pytest.approx(1.0)
    assert {forward.verdict, backward.verdict} in ({"tied"}, {"faster", "slower"})


def test_the_verdict_reads_the_interval_against_one() -> None:
    a = np.array([1.00, 1.01, 0.99, 1.00, 1.02, 0.98])
    assert paired_ratio(a, a * 1.05).verdict == "faster"  # b takes 5% longer: a is faster
    assert paired_ratio(a, a / 1.05).verdict == "slower"
    assert paired_ratio(a, a[::-1]).verdict == "tied"
    with pytest.raises(ValueError, match="same number"):
        paired_ratio(a, a[:4])
    with pytest.raises(ValueError, match="not positive"):
        paired_ratio(a, -a)


@pytest.mark.parametrize("n", [6, 8, 10, 12, 16, 20, 40])
def test_the_median_interval_holds_the_median_at_its_stated_coverage(n) -> None:
    rank = median_rank(n)
    coverage = 1 - 2 * stats.binom.cdf(rank - 1, n, 0.5)
    assert coverage >= 0.95 and 1 - 2 * stats.binom.cdf(rank, n, 0.5) < 0.95  # the narrowest that holds
    result = paired_ratio(np.ones(n), np.linspace(1.0, 1.1, n))
    assert result.median_level == pytest.approx(coverage)
    assert median_rank(3) == 1 and paired_ratio(np.ones(3), np.ones(3) * 1.01).median_level == 0.75


def test_the_pairs_alternate_their_order() -> None:
    assert block_order(4) == [("a", "b"), ("b", "a"), ("a", "b"), ("b", "a")]


# Power first: the design at the GPU check's 20 pairs, on truths around the gap the second GPU run measured
# (0.998x) and on the alternatives a referee would name. 500 simulated runs each (seeded): a coverage of 0.95
# has a binomial standard error of 0.01 there, so the bar of 0.90 is five of them away.
@pytest.mark.parametrize("truth", [
    Truth(1.0), Truth(0.998), Truth(1.002), Truth(0.99, block_cv=0.01),
    Truth(0.998, drift=0.002),  # the device slows 0.2% a block: the ABBA order cancels it
    Truth(0.998, overhead=0.05),  # a fixed cost of 5% of a block in every block (a sync, the launch ramp)
    Truth(0.998, tail_df=3),  # heavy-tailed block noise
    Truth(0.998, outlier=1.05),  # one of b's blocks 5% slow (another process on the device)
])
def test_the_95_percent_interval_covers_the_truth_in_at_least_90_percent_of_runs(truth) -> None:
    result = simulate(truth, pairs=20, runs=500, seed=1)
    assert result["coverage"] >= 0.90 and result["median_coverage"] >= 0.90


def test_the_design_shows_the_second_runs_gap_when_a_block_is_quiet_and_ties_when_it_is_not() -> None:
    quiet, noisy = Truth(0.998, block_cv=0.001), Truth(0.998, block_cv=0.005)
    assert simulate(quiet, pairs=20, runs=500)["slower"] >= 0.95
    assert simulate(noisy, pairs=20, runs=500)["slower"] <= 0.4  # mostly tied: the resolution says so
    assert simulate(noisy, pairs=20, runs=500)["resolution"] > 0.002 > simulate(quiet, pairs=20, runs=500)["resolution"]
    assert simulate(Truth(1.0), pairs=20, runs=500)["slower"] <= 0.05  # no false "slower" beyond the level


def test_a_fixed_cost_as_long_as_the_work_pulls_a_large_gap_toward_one() -> None:
    # the alternative the design is blind to: a cost shared by both arms in every block. The block ratio then
    # understates the step ratio; at the GPU check's blocks (16 steps of ~26 ms against one sync) it is negligible.
    biased = simulate(Truth(0.8, overhead=1.0), pairs=20, runs=200)
    assert biased["coverage"] < 0.05 and biased["slower"] == 1.0


class FakeLoop:
    """A trainer whose steps take ``step_s`` each on ``clock`` (advanced, not slept: real sleeps of milliseconds
    overshot under load and moved a known 1.5x to 1.34x in CI) and that calls its hook after each, as
    ``TrainJob.run`` does."""

    def __init__(self, step_s: float, clock: list[float] | None = None) -> None:
        self.step_s, self.steps, self.clock = step_s, 0, clock if clock is not None else [0.0]

    def run(self, steps: int, on_step=None) -> None:
        for _ in range(steps):
            self.clock[0] += self.step_s
            self.steps += 1
            if on_step is not None:
                on_step(self.steps)


def test_the_interleaver_runs_the_schedule_from_a_trainers_hook_and_recovers_a_known_ratio(monkeypatch) -> None:
    clock = [0.0]
    monkeypatch.setattr(paired_ratio_module, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    a, b = FakeLoop(0.002, clock), FakeLoop(0.003, clock)  # a is 1.5x as fast
    calls: list[str] = []
    design = Interleaver(lambda n: (calls.append(f"b{n}"), b.run(n)), lambda: calls.append("sync"), pairs=6,
                         block_steps=4, warm=3, warm_b=2)
    a.run(design.steps_of_a, design)
    assert a.steps == 3 + 6 * 4 + 1 and design.done
    assert b.steps == 2 + 6 * 4 and calls[0] == "b2"
    assert [len(design.seconds[arm]) for arm in "ab"] == [6, 6]
    result = design.result()
    assert result.low <= 1.5 <= result.high and result.ratio == pytest.approx(1.5, rel=1e-9)
    assert math.isclose(sum(design.seconds["b"]) / sum(design.seconds["a"]), 1.5, rel_tol=1e-9)


def test_the_interleaver_says_when_the_trainer_stopped_early() -> None:
    design = Interleaver(FakeLoop(0.0).run, lambda: None, pairs=4, block_steps=2, warm=1, warm_b=1)
    FakeLoop(0.0).run(design.steps_of_a - 4, design)
    with pytest.raises(RuntimeError, match="must run 10 steps"):
        design.result()


# The interface of karpathy/nanoGPT's model.py that benchmarks/gpt2_pair.py uses (GPTConfig, GPT, forward with
# targets, configure_optimizers), written here so the driver runs without a checkout; the GPU check names the real one.
STAND_IN_MODEL_PY = '''
from dataclasses import dataclass
import torch
import torch.nn.functional as F


@dataclass
class GPTConfig:
    block_size: int
    vocab_size: int
    n_layer: int
    n_head: int
    n_embd: int
    dropout: float
    bias: bool


class GPT(torch.nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embed = torch.nn.Embedding(config.vocab_size, config.n_embd)
        self.head = torch.nn.Linear(config.n_embd, config.vocab_size, bias=config.bias)

    def forward(self, idx, targets):
        logits = self.head(self.embed(idx))
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        return torch.optim.AdamW(self.parameters(), lr=learning_rate, betas=betas, weight_decay=weight_decay)
'''


def test_the_gpt2_pair_driver_interleaves_the_project_and_a_nanogpt_loop_on_the_cpu(tmp_path) -> None:
    import sys

    from helpers import ROOT

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gpt2_pair import DRY, run_pair, summary_line
    from gpu_check import TINY

    (tmp_path / "model.py").write_text(STAND_IN_MODEL_PY)
    row = run_pair(str(tmp_path), "cpu", TINY, **{**DRY, "pairs": 4})
    assert row["order"] == [["project", "nanogpt"], ["nanogpt", "project"]] * 2
    assert len(row["project_block_s"]) == len(row["nanogpt_block_s"]) == 4
    assert row["tokens_per_block"] == DRY["block_steps"] * TINY["batch"] * TINY["block"]
    assert row["low"] <= row["ratio"] <= row["high"] and row["verdict"] in ("faster", "slower", "tied")
    assert all(math.isfinite(row["loss"][arm]) for arm in ("project", "nanogpt"))
    assert "4 ABBA pairs of 2 steps on cpu" in summary_line(row)


def test_the_interleaver_needs_a_warm_up_and_blocks_of_at_least_one_step() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Interleaver(FakeLoop(0.0).run, lambda: None, pairs=4, block_steps=2, warm=0, warm_b=1)
