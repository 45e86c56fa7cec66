"""A training batch from a large subset costs what one from a small subset costs (``SequenceBatches``).

``SequenceBatches`` draws one permutation per epoch, not one per step, so the time of ``batch(step)`` must not grow
with the number of rows (a permutation per step made a batch from 1,000,000 rows about 100x slower than one from
10,000). The test suite checks the mechanism (one permutation per epoch, each row once); this script measures the
time, best of three rounds each, and prints the ratio large / small (about 1 expected). It also times the batch as
it was built until 2026-11-29 (rows one position at a time, the targets masked in torch), the baseline, in the same
process, and prints today's time over it (a stacked turn of 8 small replicas builds 8 batches on the host).

    python benchmarks/bench_batches.py
    python benchmarks/bench_batches.py --small 10000 --large 1000000 --steps 200
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from assocmem.autotune.measure import cpu_model_and_flags
from assocmem.stopping import IGNORE
from assocmem.train import SequenceBatches


class FakeSequences:
    """The part of a sequences TokenStore that SequenceBatches reads: 8-token rows."""

    pad_id = 0

    def padded_batch(self, rows: list[int]) -> np.ndarray:
        return np.tile(np.asarray(rows, dtype=np.int64)[:, None] % 50 + 1, (1, 8))


class PerPositionBatches(SequenceBatches):
    """The baseline: the batch as built until 2026-11-29."""

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        n, rows = self.stop - self.start, []
        for position in range(step * self.batch_size, (step + 1) * self.batch_size):
            epoch, offset = divmod(position, n)
            rows.append(self.start + int(self._permutation(epoch)[offset]))
        tokens = torch.from_numpy(self.store.padded_batch(rows))
        inputs, targets = tokens[:, :-1].clone(), tokens[:, 1:].clone()
        targets[targets == self.store.pad_id] = IGNORE
        return inputs, targets


def batch_seconds(n_rows: int, steps: int, rounds: int = 3, batch_size: int = 32,
                  kind: type[SequenceBatches] = SequenceBatches) -> float:
    source = kind(FakeSequences(), 0, n_rows, batch_size, seed=1)
    source.batch(0)  # the first permutation of the epoch
    best = float("inf")
    for repeat in range(rounds):  # best of three: another job on a shared machine only adds time
        start = time.perf_counter()
        for step in range(1 + repeat * steps, 1 + (repeat + 1) * steps):
            source.batch(step)
        best = min(best, (time.perf_counter() - start) / steps)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--large", type=int, default=1_000_000)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    small, large = batch_seconds(args.small, args.steps), batch_seconds(args.large, args.steps)
    # the decisive memorisation column's batch: 64 facts of 16,384
    today = batch_seconds(16_384, args.steps, batch_size=64)
    baseline = batch_seconds(16_384, args.steps, batch_size=64, kind=PerPositionBatches)
    print(json.dumps({"cpu": cpu_model_and_flags()[0], "small_rows": args.small,
                      "large_rows": args.large, "small_s_per_batch": small, "large_s_per_batch": large,
                      "ratio_large_over_small": large / small, "batch_64_of_16384_s": today,
                      "baseline_batch_64_of_16384_s": baseline, "ratio_today_over_baseline": today / baseline}))


if __name__ == "__main__":
    main()
