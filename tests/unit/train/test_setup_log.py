"""A training job logs where its set-up went before its first step (issue 40: on the GPU machine the default's
trainings logged their first line 8-10 s after they started, and nothing said why)."""

from __future__ import annotations

import logging

import pytest

from assocmem.model import ModelConfig
from assocmem.runtime.cpu_time import SetupClock, parse_setup_line
from assocmem.testing.reference_train import RandomTokens
from assocmem.train import TrainJob, TrainSettings, WindowBatches, fixed_windows

HYPER = {"lr": 1e-3, "min_lr_ratio": 0.1, "warmup_steps": 1, "weight_decay": 0.1, "beta1": 0.9, "beta2": 0.95,
         "grad_clip": 1.0}


def tiny_job(run_dir) -> TrainJob:
    store = RandomTokens(31, 10_000, seed=0)
    settings = TrainSettings(batch_size=2, micro_batch_size=None, max_steps=2, eval_interval=2, eval_batches=1,
                             checkpoint_interval=10**9, device="cpu", gemm="native", **HYPER)
    return TrainJob(run_dir=run_dir, settings=settings, seed=0, tokens_per_sequence=8.0, job="tiny",
                    model_config=ModelConfig(vocab_size=31, n_layer=1, d_model=8, n_head=2, d_ff=16, max_len=8),
                    train_batches=WindowBatches(store, 2, 8, seed=1),
                    eval_sets={"val": fixed_windows(store, 1, 2, 8, seed=1)})


def test_a_training_job_logs_its_set_up_phase_by_phase_before_the_first_step(tmp_path, caplog) -> None:
    with caplog.at_level(logging.INFO, logger="assocmem.train.loop"):
        tiny_job(tmp_path / "run").run()
    phases = parse_setup_line(caplog.text)
    assert phases is not None
    assert list(phases) == ["total", "device", "model", "optimizer", "GEMM choice", "step set-up",
                            "peak FLOP/s"]
    assert phases["total"] == pytest.approx(sum(v for k, v in phases.items() if k != "total"), abs=0.06)
    assert "tiny set-up: " in caplog.text


def test_the_stage_s_own_phases_come_first_on_the_same_clock(tmp_path, caplog) -> None:
    clock = SetupClock()
    clock.mark("imports")
    clock.mark("data")
    with caplog.at_level(logging.INFO, logger="assocmem.train.loop"):
        tiny_job(tmp_path / "run").run(setup=clock)
    assert list(parse_setup_line(caplog.text))[:4] == ["total", "imports", "data", "device"]
