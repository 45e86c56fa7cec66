import math

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import make_token_dir

from assocmem.io import AssocmemError
from assocmem.model import ModelConfig
from assocmem.tokenstore import TokenStore
from assocmem.train import (
    IGNORE,
    SequenceBatches,
    TrainJob,
    TrainSettings,
    fixed_batches,
    load_model,
    lr_at,
    to_lm_batch,
)


def settings(**kw) -> TrainSettings:
    base = dict(batch_size=4, micro_batch_size=None, max_steps=12, lr=3e-3, min_lr_ratio=0.1, warmup_steps=3,
                weight_decay=0.01, beta1=0.9, beta2=0.99, grad_clip=1.0, eval_interval=4, eval_batches=1,
                checkpoint_interval=5, device="cpu")
    return TrainSettings(**{**base, **kw})


def make_job(tmp_path, run_name="run", **kw) -> TrainJob:
    token_dir = tmp_path / "tokens"
    if not token_dir.exists():
        token_dir = make_token_dir(tmp_path, repeat=4)
    train = TokenStore(token_dir, "train")
    dev = TokenStore(token_dir, "dev")
    s = settings(**kw)
    cfg = ModelConfig(vocab_size=train.vocab_size, n_layer=1, d_model=16, n_head=2, d_ff=32, max_len=20)
    return TrainJob(run_dir=tmp_path / run_name, model_config=cfg, settings=s,
                    train_batches=SequenceBatches(train, 0, len(train), s.batch_size, seed=3),
                    eval_sets={"val": fixed_batches(dev, np.arange(len(dev)), 4)}, seed=3, tokens_per_sequence=12)


def test_lr_schedule():
    s = settings(max_steps=100, warmup_steps=10, lr=1.0, min_lr_ratio=0.1)
    assert lr_at(0, s) == pytest.approx(0.1)
    assert lr_at(9, s) == pytest.approx(1.0)
    assert lr_at(10, s) == pytest.approx(1.0)
    assert lr_at(100, s) == pytest.approx(0.1)
    assert lr_at(55, s) == pytest.approx(0.1 + 0.45 * (1 + math.cos(math.pi * 0.5)))


def test_batches_are_step_deterministic_and_cover_epochs(tmp_path):
    token_dir = make_token_dir(tmp_path)
    store = TokenStore(token_dir, "train")
    source = SequenceBatches(store, 0, 8, 4, seed=1)
    assert torch.equal(source.batch(5)[0], source.batch(5)[0])
    rows = source.rows(0) + source.rows(1)
    assert sorted(rows) == list(range(8))  # one epoch visits every sequence once


def test_lm_batch_masks_padding():
    inputs, targets = to_lm_batch(np.array([[2, 5, 6, 3, 0, 0]]))
    assert inputs.tolist() == [[2, 5, 6, 3, 0]]
    assert targets.tolist() == [[5, 6, 3, IGNORE, IGNORE]]


def test_training_reduces_loss_and_writes_outputs(tmp_path):
    summary = make_job(tmp_path, max_steps=40, eval_interval=10).run()
    metrics = pd.read_csv(tmp_path / "run" / "metrics.csv")
    assert metrics["step"].tolist() == [10, 20, 30, 40]
    assert metrics["train_loss"].iloc[-1] < metrics["train_loss"].iloc[0]
    assert {"val_ce", "tokens_per_s", "mfu", "lr"} <= set(metrics.columns)
    assert 0 < metrics["mfu"].iloc[-1] < 1
    assert summary["steps"] == 40
    model = load_model(tmp_path / "run" / "model.pt")
    assert model.num_parameters() == summary["n_params"]


def test_killed_run_resumes_to_identical_result(tmp_path):
    reference = make_job(tmp_path, "uninterrupted")
    reference.run()

    def kill_at_7(step: int) -> None:
        if step == 7:
            raise KeyboardInterrupt("simulated kill")

    interrupted = make_job(tmp_path, "resumed")
    with pytest.raises(KeyboardInterrupt):
        interrupted.run(on_step=kill_at_7)
    assert (tmp_path / "resumed" / "checkpoint.pt").exists()
    assert not (tmp_path / "resumed" / "model.pt").exists()  # no complete-looking output after a kill
    make_job(tmp_path, "resumed").run()
    a = torch.load(tmp_path / "uninterrupted" / "model.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "resumed" / "model.pt", weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    ma = pd.read_csv(tmp_path / "uninterrupted" / "metrics.csv")
    mb = pd.read_csv(tmp_path / "resumed" / "metrics.csv")
    pd.testing.assert_frame_equal(ma[["step", "train_loss", "val_ce"]], mb[["step", "train_loss", "val_ce"]])


def test_gradient_accumulation_matches_full_batch(tmp_path):
    make_job(tmp_path, "full", max_steps=5).run()
    make_job(tmp_path, "micro", max_steps=5, micro_batch_size=2).run()
    a = torch.load(tmp_path / "full" / "model.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "micro" / "model.pt", weights_only=True)["model"]
    assert all(torch.allclose(a[k], b[k], atol=1e-5) for k in a)


def test_corrupt_checkpoint_is_reported(tmp_path):
    job = make_job(tmp_path)
    job.run_dir.mkdir(parents=True)
    (job.run_dir / "checkpoint.pt").write_bytes(b"garbage")
    with pytest.raises(AssocmemError, match="checkpoint.pt"):
        job.run()


def test_missing_model_file(tmp_path):
    with pytest.raises(AssocmemError, match="model file not found"):
        load_model(tmp_path / "none.pt")
