"""A tiny Question-Formation model trained in a results directory's layout (results/qf/train/tiny/pct100, its store
at results/qf/data/tokens), shared read-only by the tests of assocmem.use: copy it before changing anything."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers import write_raw
from trained_run import JOB, run_dir, stamp_job, store_dir

from assocmem.qf.tokenize import tokenize_qf_dir
from assocmem.train import build_job

TRAIN = {"batch_size": 8, "micro_batch_size": None, "max_steps": 40, "lr": 1e-2, "min_lr_ratio": 0.1,
         "warmup_steps": 4, "weight_decay": 0.01, "beta1": 0.9, "beta2": 0.99, "grad_clip": 1.0, "eval_interval": 10,
         "eval_batches": 1, "checkpoint_interval": 100, "device": "cpu"}
MODEL = {"n_layer": 1, "d_model": 32, "n_head": 2, "d_ff": 64}


@pytest.fixture(scope="session")
def trained(tmp_path_factory) -> Path:
    """The results directory holding the trained run, each job stamped as the pipeline stamps it."""
    results = tmp_path_factory.mktemp("use") / "results"
    tokenize_qf_dir(write_raw(results / "qf" / "data" / "raw", repeat=4), store_dir(results))
    tokens_stamp = stamp_job(store_dir(results), "tokenize")
    build_job(TRAIN, MODEL, 3, store_dir(results), run_dir(results), job=JOB).run()
    stamp_job(run_dir(results), "train", upstream=[tokens_stamp])
    return results


@pytest.fixture
def results(trained, tmp_path) -> Path:
    """A private copy of the trained results directory."""
    return Path(shutil.copytree(trained, tmp_path / "results"))
