"""Two training loops timed in interleaved blocks, and the ratio of their speeds with an interval (issue 41).

One process per arm and one window each gave the project's compiled GPT-2 step 0.998-0.999x nanoGPT's on an H200,
while the same arm moved by up to 2% from machine to machine: a single ratio cannot tell 0.998 from 1.0. Here both
loops run in one process on one device and take turns in blocks of equal work, in pairs whose order alternates
(a b, b a, a b, ...: ABBA), so a linear drift of the device's speed over the run (clocks, heat) cancels pair
against pair (it widens the interval, it does not bias it). Each pair gives the speed ratio a / b = seconds_b /
seconds_a; pairs share no block, so with independent block noise they are independent draws.

The rule, fixed before any GPU run: the estimate is the geometric mean of the pairs' ratios with a Student-t 95%
interval on their logarithms. Verdict: ``faster`` if the interval lies above 1, ``slower`` if below, ``tied``
if it holds 1; the interval's half-width is the design's resolution on that device. The median with its
distribution-free (sign-test) interval is the second estimator, reported beside it (a block disturbed by another
process moves the mean more than the median). :func:`simulate` runs the design on known truths and on the
alternatives a referee would name (a linear drift, a fixed cost in every block, an outlier block, heavy tails).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

LEVEL = 0.95


def block_order(pairs: int) -> list[tuple[str, str]]:
    """The pairs' order: ("a", "b"), ("b", "a"), ... (ABBA: linear drift cancels over two pairs)."""
    return [("a", "b") if i % 2 == 0 else ("b", "a") for i in range(pairs)]


class Interleaver:
    """The design run from inside arm a's own loop: an ``on_step`` hook (``TrainJob.run`` calls it after each step)
    that, after a's ``warm`` steps, runs b's ``warm_b`` steps (compiling it), then the blocks of :func:`block_order`:
    a's blocks are a's own next ``block_steps`` steps, timed hook to hook; b's are run from the hook by ``run_b``.
    Every block is timed between two calls of ``sync`` (the device's queue drained), so each holds its own work
    only. a needs ``warm + pairs * block_steps`` steps and one more after them (that one is not timed: a trainer may
    evaluate or save at its last step)."""

    def __init__(self, run_b: Callable[[int], None], sync: Callable[[], None], pairs: int, block_steps: int,
                 warm: int, warm_b: int) -> None:
        if warm < 1 or block_steps < 1:
            raise ValueError(f"Interleaver: warm ({warm}) and block_steps ({block_steps}) must be at least 1 "
                             "(the hook is called after a's steps 1, 2, ...)")
        self.run_b, self.sync = run_b, sync
        self.pairs, self.block_steps, self.warm, self.warm_b = pairs, block_steps, warm, warm_b
        self.schedule = [arm for pair in block_order(pairs) for arm in pair]
        self.seconds: dict[str, list[float]] = {"a": [], "b": []}
        self._next, self._started, self._counted = 0, None, 0

    @property
    def steps_of_a(self) -> int:
        return self.warm + self.pairs * self.block_steps + 1

    @property
    def done(self) -> bool:
        return len(self.seconds["a"]) == len(self.seconds["b"]) == self.pairs

    def __call__(self, step: int) -> None:
        if step == self.warm:
            self.run_b(self.warm_b)
        elif self._started is None:
            return
        else:
            self._counted += 1
            if self._counted < self.block_steps:
                return
            self.sync()
            self.seconds["a"].append(time.perf_counter() - self._started)
        self._blocks_of_b()

    def _blocks_of_b(self) -> None:
        """b's blocks up to a's next one, then a's next block starts (or none: the schedule is done)."""
        while self._next < len(self.schedule) and self.schedule[self._next] == "b":
            self.sync()
            start = time.perf_counter()
            self.run_b(self.block_steps)
            self.sync()
            self.seconds["b"].append(time.perf_counter() - start)
            self._next += 1
        self._started = None
        if self._next < len(self.schedule):
            self._next += 1
            self._counted = 0
            self.sync()
            self._started = time.perf_counter()

    def result(self) -> PairedRatio:
        """The ratio of a's speed to b's (pair i: the i-th block of each arm)."""
        if not self.done:
            raise RuntimeError(f"Interleaver: {len(self.seconds['a'])} of a's and {len(self.seconds['b'])} of b's "
                               f"{self.pairs} blocks ran (a must run {self.steps_of_a} steps)")
        return paired_ratio(self.seconds["a"], self.seconds["b"])


@dataclass(frozen=True)
class PairedRatio:
    """Speed of arm a over arm b (> 1: a is faster), from ``pairs`` pairs of equal-work blocks."""

    pairs: int
    ratio: float  # geometric mean of the pairs' ratios
    low: float  # its Student-t interval at LEVEL
    high: float
    verdict: str  # faster / slower / tied, by (low, high)
    median: float  # the pairs' median ratio
    median_low: float  # its sign-test interval
    median_high: float
    median_level: float  # that interval's coverage, for any continuous distribution (below LEVEL under 6 pairs)
    median_verdict: str

    def as_dict(self) -> dict[str, float | int | str]:
        return asdict(self)

    @property
    def resolution(self) -> float:
        """Half the interval's width, relative: the smallest difference the design could have shown."""
        return (self.high - self.low) / 2


def verdict_of(low: float, high: float) -> str:
    return "faster" if low > 1.0 else "slower" if high < 1.0 else "tied"


def paired_ratio(seconds_a: list[float] | np.ndarray, seconds_b: list[float] | np.ndarray,
                 level: float = LEVEL) -> PairedRatio:
    """The ratio of a's speed to b's from the pairs' block times (pair i: ``seconds_a[i]``, ``seconds_b[i]``,
    blocks of the same work)."""
    a, b = np.asarray(seconds_a, dtype=float), np.asarray(seconds_b, dtype=float)
    if a.shape != b.shape or a.ndim != 1 or len(a) < 3:
        raise ValueError(f"paired_ratio: needs the same number (>= 3) of blocks per arm, got {a.shape} and {b.shape}")
    if (a <= 0).any() or (b <= 0).any():
        raise ValueError("paired_ratio: a block time is not positive")
    logs = np.log(b) - np.log(a)
    n, mean = len(logs), float(logs.mean())
    half = float(stats.t.ppf(0.5 + level / 2, n - 1) * logs.std(ddof=1) / math.sqrt(n))
    low, high = math.exp(mean - half), math.exp(mean + half)
    ordered = np.sort(logs)
    rank = median_rank(n, level)  # the interval (x_(rank), x_(n + 1 - rank)), ranks from 1
    m_low, m_high = math.exp(ordered[rank - 1]), math.exp(ordered[n - rank])
    m_level = sign_test_coverage(rank, n)
    return PairedRatio(pairs=n, ratio=math.exp(mean), low=low, high=high, verdict=verdict_of(low, high),
                       median=math.exp(float(np.median(logs))), median_low=m_low, median_high=m_high,
                       median_level=m_level, median_verdict=verdict_of(m_low, m_high))


def median_rank(n: int, level: float = LEVEL) -> int:
    """The largest rank r with P(x_(r) <= median <= x_(n+1-r)) >= level for any continuous distribution (the sign
    test's interval: 1 - 2 P(Binomial(n, 1/2) <= r - 1)); 1 where n is too small for more."""
    return max((r for r in range(1, n // 2 + 1) if sign_test_coverage(r, n) >= level), default=1)


def sign_test_coverage(rank: int, n: int) -> float:
    """P(x_(rank) <= median <= x_(n+1-rank)) for n draws of any continuous distribution."""
    return float(1 - 2 * stats.binom.cdf(rank - 1, n, 0.5))


@dataclass(frozen=True)
class Truth:
    """A simulated device: arm a's step takes ``1 / ratio`` of b's; each block's time is ``block_steps`` steps with
    noise of coefficient of variation ``block_cv`` (Student-t with ``tail_df`` degrees of freedom where given),
    times a speed that drifts linearly by ``drift`` per block, plus ``overhead`` (a fixed cost in every block, as a
    fraction of b's block: a sync, a launch ramp); ``outlier``: one block of arm b in each run that many times
    slower."""

    ratio: float
    block_cv: float = 0.002
    drift: float = 0.0
    overhead: float = 0.0
    outlier: float = 1.0
    tail_df: float | None = None


def simulate_blocks(truth: Truth, pairs: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One run's pairs of block times (a, b) for ``truth``, blocks in :func:`block_order`."""
    base = {"a": 1.0 / truth.ratio, "b": 1.0}
    times: dict[str, list[float]] = {"a": [], "b": []}
    slot = 0
    for pair in block_order(pairs):
        for arm in pair:
            noise = (rng.standard_t(truth.tail_df) * math.sqrt((truth.tail_df - 2) / truth.tail_df)
                     if truth.tail_df else rng.standard_normal())
            speed = 1.0 + truth.drift * slot
            times[arm].append(base[arm] * speed * (1.0 + truth.block_cv * noise) + truth.overhead)
            slot += 1
    a, b = np.array(times["a"]), np.array(times["b"])
    if truth.outlier != 1.0:
        b[rng.integers(pairs)] *= truth.outlier
    return a, b


def simulate(truth: Truth, pairs: int, runs: int = 2000, seed: int = 0) -> dict[str, float]:
    """The design on ``runs`` simulated runs of ``truth``: how often each interval holds the true ratio, and how
    often each verdict comes out (the mean's; the median's in ``median_*``)."""
    rng = np.random.default_rng(seed)
    results = [paired_ratio(*simulate_blocks(truth, pairs, rng)) for _ in range(runs)]
    share = {v: sum(r.verdict == v for r in results) / runs for v in ("faster", "slower", "tied")}
    return {"coverage": sum(r.low <= truth.ratio <= r.high for r in results) / runs,
            "median_coverage": sum(r.median_low <= truth.ratio <= r.median_high for r in results) / runs,
            **share, "median_slower": sum(r.median_verdict == "slower" for r in results) / runs,
            "resolution": float(np.median([r.resolution for r in results]))}
