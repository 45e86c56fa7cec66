"""The memorisation tests' tiny column: the decisive column's layout (models, subsets, seeds) at a size the CPU
trains in seconds, its facts written and tokenized once a module."""

from __future__ import annotations

import sys

import pytest
from helpers import ROOT

from assocmem.memorisation import decisive_wall as dw

sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_decisive_wall as bench  # noqa: E402 (the command, beside the benchmarks)

TINY = """
seed: 3
threads_per_job: 1
experiments:
  tiny:
    dataset:
      name: facts
      facts: {count: 40, unseen: 8, key_length: 3, value_length: 1, key_vocab: 6, value_vocab: 6}
    subsets:
      fractions: [1.0, 0.5]
    models:
      D0: {n_layer: 1, d_model: 8, n_head: 2, max_len: 8}
      D1: {n_layer: 1, d_model: 16, n_head: 2, max_len: 8}
    train:
      batch_size: 8
      max_steps: 1000
      max_epochs: 100
      stop_at_recall: 0.95
      lr: 1.0e-2
      eval_interval: 4
      eval_batches: 1
      checkpoint_interval: 6
    sweep:
      seeds: 2
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    work = tmp_path_factory.mktemp("tiny")
    (work / "tiny.yaml").write_text(TINY)
    exp = bench.column_experiment(work / "tiny.yaml")
    return exp, dw.write_stores(exp, work / "data"), work
