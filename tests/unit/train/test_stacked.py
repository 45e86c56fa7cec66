"""Stacked replicas (issue 41): K jobs trained as one stack give each job's single-run losses and weights, a replica
that stops is frozen, and every replica writes the files and provenance its single run writes."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import make_token_dir

from assocmem.errors import AssocmemError
from assocmem.model import DecoderLM, ModelConfig
from assocmem.tokenstore import TokenStore, data_fingerprint
from assocmem.train import SequenceBatches, TrainJob, TrainSettings, fixed_batches, job_fingerprint, load_model
from assocmem.train.stacked import StackedTraining, check_stackable
from assocmem.train.stacked_model import StackedDecoder

# fp32 tolerance: the stack sums in other orders (batched products, per-replica loss and norm sums, padding to the
# group's longest batch), so losses agree to a few float32 ulps per step. The weights' largest gap is in the key part
# of qkv.bias, whose true gradient is zero (softmax ignores a shift shared by all keys): AdamW moves it on rounding
# noise (|g| << eps), by up to lr * |g| / eps a step, so the two runs' noise differs there (2.6e-6 after 8 steps
# here; every other tensor within 2e-7). 1e-5 keeps a 4x margin and still fails any real difference: one skipped,
# doubled or mis-scheduled step moves a weight by ~lr = 3e-3.
WEIGHT_ATOL, LOSS_RTOL = 1e-5, 1e-5
BASE = dict(batch_size=4, micro_batch_size=2, max_steps=8, lr=3e-3, min_lr_ratio=0.1, warmup_steps=3,
            weight_decay=0.01, beta1=0.9, beta2=0.99, grad_clip=1.0, eval_interval=2, eval_batches=1,
            checkpoint_interval=5, device="cpu", gemm="native")
REPLICAS = [  # (seed, settings): one runs to the end, one has a shorter budget (its own lr schedule), one stops early
    (3, {}),
    (4, {"max_steps": 5, "grad_clip": 0.05}),
    (5, {"early_stopping_patience": 1, "early_stopping_min_delta": 10.0}),
]


@pytest.fixture(autouse=True)
def no_peak_timing(monkeypatch):
    """The MFU denominator's matmul bursts (~0.5 s a run) measure nothing these tests check."""
    for module in ("assocmem.train.loop", "assocmem.train.stacked"):
        monkeypatch.setattr(f"{module}.measure_peak_flops", lambda device: 1e12)


def make_job(tmp_path, run_dir, seed: int, model: dict | None = None, **kw) -> TrainJob:
    token_dir = tmp_path / "tokens"
    if not token_dir.exists():
        token_dir = make_token_dir(tmp_path, repeat=4)
    train, dev = TokenStore(token_dir, "train"), TokenStore(token_dir, "dev")
    s = TrainSettings(**{**BASE, **kw})
    shape = {"n_layer": 1, "d_model": 16, "n_head": 2, "d_ff": 32, "max_len": 20, **(model or {})}
    cfg = ModelConfig(vocab_size=train.vocab_size, **shape)
    return TrainJob(run_dir=run_dir, model_config=cfg, settings=s, seed=seed, tokens_per_sequence=12,
                    train_batches=SequenceBatches(train, 0, len(train), s.batch_size, seed=seed),
                    eval_sets={"val": fixed_batches(dev, np.arange(len(dev)), 4)}, job=f"qf/M{seed}/pct100",
                    fingerprint=job_fingerprint(cfg, s, seed, data_fingerprint(train)))


def weights(path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)["model"]


def assert_same_run(single, stacked) -> None:
    """The stacked replica's run directory holds its single run's files, losses, weights and provenance."""
    assert sorted(p.name for p in single.iterdir()) == sorted(p.name for p in stacked.iterdir())
    a, b = pd.read_csv(single / "metrics.csv"), pd.read_csv(stacked / "metrics.csv")
    assert list(a.columns) == list(b.columns) and a["step"].tolist() == b["step"].tolist()
    for column in ("lr", "train_loss", "val_ce"):
        np.testing.assert_allclose(b[column], a[column], rtol=LOSS_RTOL)
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (single, stacked))
    assert sa.keys() == sb.keys()
    for key in ("steps", "best_step", "stopped_early", "stop_rule", "fingerprint", "model_config", "max_steps",
                "n_params", "eval_rows", "gemm", "precision"):
        assert sa[key] == sb[key], key
    for name in ("model.pt", "best.pt"):
        pa, pb = (torch.load(d / name, weights_only=True) for d in (single, stacked))
        assert pa.keys() == pb.keys() and pa["step"] == pb["step"] and pa["config"] == pb["config"]
        assert {k: v for k, v in pa["provenance"].items() if k != "weights_sha256"} == \
               {k: v for k, v in pb["provenance"].items() if k != "weights_sha256"}
        for key, value in pa["model"].items():
            torch.testing.assert_close(pb["model"][key], value, rtol=0, atol=WEIGHT_ATOL)
        load_model(stacked / name, expect=None)  # its weights digest matches its weights


def test_stacked_replicas_follow_their_single_runs_and_freeze_when_they_stop(tmp_path):
    for seed, kw in REPLICAS:
        make_job(tmp_path, tmp_path / f"single{seed}", seed, **kw).run()
    training = StackedTraining([make_job(tmp_path, tmp_path / f"stacked{seed}", seed, **kw) for seed, kw in REPLICAS])
    summaries = training.run()
    assert [s["steps"] for s in summaries] == [8, 5, 4]  # each stopped at its own step, by its own rule
    assert [s["stop_rule"] for s in summaries] == ["budget", "budget", "early_stopping"]
    for seed, _ in REPLICAS:
        assert_same_run(tmp_path / f"single{seed}", tmp_path / f"stacked{seed}")
    for k, (seed, _) in enumerate(REPLICAS[1:], start=1):  # frozen since it stopped: bit for bit its model.pt
        final = weights(tmp_path / f"stacked{seed}" / "model.pt")
        for name, param in training.stack.named_stacked():  # a model file holds the real vocabulary's rows
            assert torch.equal(param.detach()[k][:len(final[name])], final[name]), name


@pytest.mark.parametrize("variant", [{}, {"tie_embeddings": False, "bias": False}])
def test_stacked_forward_and_gradients_are_each_replicas(variant):
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=11, n_layer=2, d_model=8, n_head=2, d_ff=16, max_len=6, **variant)
    models = [DecoderLM(cfg) for _ in range(3)]
    idx = torch.randint(0, 11, (3, 2, 5))
    stack = StackedDecoder(models)
    logits = stack(idx).view(3, 2, 5, 11)
    logits.square().sum().backward()
    for k, model in enumerate(models):
        single = model(idx[k])
        torch.testing.assert_close(logits[k], single, rtol=1e-5, atol=1e-6)
        single.square().sum().backward()
        for name, param in model.named_parameters():
            torch.testing.assert_close(stack.param(name).grad[k], param.grad, rtol=1e-4, atol=1e-6)
    assert ("head.weight" in stack.names) == (not cfg.tie_embeddings)
    assert stack.decayed == {name for name, p in models[0].named_parameters() if p.dim() >= 2}


def test_jobs_that_cannot_stack_are_refused_in_one_line(tmp_path):
    a = make_job(tmp_path, tmp_path / "a", 1)
    with pytest.raises(AssocmemError, match="train.batch_size differ"):
        check_stackable([a, make_job(tmp_path, tmp_path / "b", 2, batch_size=2)])
    with pytest.raises(AssocmemError, match="model shapes differ"):
        check_stackable([a, make_job(tmp_path, tmp_path / "b", 2, {"d_model": 8})])
    with pytest.raises(AssocmemError, match="one run directory each"):
        check_stackable([a, make_job(tmp_path, tmp_path / "a", 2)])
    with pytest.raises(AssocmemError, match="dropout"):
        StackedDecoder([DecoderLM(ModelConfig(11, 1, 8, 2, 16, 6, dropout=0.1))])


def test_the_command_line_trains_a_group_and_stamps_each_replica_as_the_train_rule_does(tmp_path):
    from assocmem import stamps
    from assocmem.codehash import code_digest
    from assocmem.train.stacked_cli import main

    store = make_token_dir(tmp_path, repeat=4)
    train = {**BASE, "max_steps": 2, "eval_interval": 2}
    model = {"n_layer": 1, "d_model": 8, "n_head": 2, "d_ff": 16}
    replicas = []
    for k in (0, 1):
        run_dir = tmp_path / "results" / "qf" / "train" / f"M.s{k}" / "pct100"
        params = {"model": model, "train": train, "seed": 7 + 1000 * k, "job": f"qf/M.s{k}/pct100"}
        outputs = [run_dir / name for name in ("model.pt", "best.pt", "metrics.csv", "summary.json",
                                               "eval_rows.parquet")]
        replicas.append({"params": params, "store_dir": str(store), "run_dir": str(run_dir),
                         "stamp": str(run_dir / "provenance.json"), "outputs": [str(p) for p in outputs]})
    group = tmp_path / "group.json"
    group.write_text(json.dumps({"replicas": replicas}))
    assert main(["--group", str(group)]) == 0
    for replica in replicas:
        record = stamps.read_stamp(Path(replica["stamp"]))
        assert record["job"] == f"train qf/train/{replica['params']['job'].split('/')[1]}/pct100"
        assert record["code"] == code_digest("train") and record["params"] == replica["params"]
        assert set(record["files"]) == {Path(p).name for p in replica["outputs"]}
        summary = json.loads((Path(replica["run_dir"]) / "summary.json").read_text())
        assert summary["steps"] == 2 and summary["model_config"]["d_model"] == 8
    group.write_text(json.dumps({"replicas": [{"params": {}}]}))
    assert main(["--group", str(group)]) == 2  # a bad group file: one line naming it and the missing keys
    assert main(["--group-json", "{not json"]) == 2  # the workflow's inline group: one line
    assert main(["--group-json", json.dumps({"replicas": []})]) == 2


def test_replicas_whose_evaluation_sets_do_not_stack_are_each_evaluated_alone(tmp_path):
    """Sets of other batch sizes cannot be stacked: the group evaluates each replica alone, as before, and each
    still follows its single run."""
    dev = TokenStore(make_token_dir(tmp_path, repeat=4), "dev")

    def job(prefix: str, seed: int, eval_batch: int) -> TrainJob:
        made = make_job(tmp_path, tmp_path / f"{prefix}{seed}", seed)
        return replace(made, eval_sets={"val": fixed_batches(dev, np.arange(len(dev)), eval_batch)})

    for seed, eval_batch in ((3, 4), (4, 2)):
        job("single", seed, eval_batch).run()
    training = StackedTraining([job("stacked", 3, 4), job("stacked", 4, 2)])
    training.run()
    assert training._evaluation is None
    for seed in (3, 4):
        assert_same_run(tmp_path / f"single{seed}", tmp_path / f"stacked{seed}")
