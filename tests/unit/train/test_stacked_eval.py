"""The stacked replicas' evaluations in one batched pass (assocmem.train.stacked_eval): each replica's CE and recall
are its single model's on its own batches (padding across replicas included), a memorisation group's logged rows
are its final models' single evaluations, and sets that cannot stack are refused (each replica then evaluates
alone)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

from assocmem.facts.generate import FactsSpec, write_facts
from assocmem.facts.tokenize import tokenize_facts_dir
from assocmem.model import DecoderLM, ModelConfig
from assocmem.stopping import IGNORE
from assocmem.train import build_job, evaluate, load_model, recall
from assocmem.train.batches import RECALL_SET
from assocmem.train.stacked import StackedTraining
from assocmem.train.stacked_eval import StackedEvaluation, stack_padded
from assocmem.train.stacked_model import StackedDecoder

CPU = torch.device("cpu")
CE_RTOL = 1e-6  # the batched products sum in other orders: a few float32 ulps on a mean NLL


def no_autocast():
    return torch.autocast("cpu", enabled=False)


def batch(rows: int, width: int, vocab: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    inputs = torch.randint(0, vocab, (rows, width), generator=g)
    targets = torch.randint(0, vocab, (rows, width), generator=g)
    targets[:, 0] = IGNORE  # an unscored key position
    return inputs, targets


def test_each_replicas_metrics_are_its_models_on_its_own_batches_of_other_widths():
    cfg = ModelConfig(vocab_size=9, n_layer=2, d_model=16, n_head=2, d_ff=32, max_len=12)
    torch.manual_seed(0)
    models = [DecoderLM(cfg) for _ in range(3)]
    widths = [5, 8, 6]  # each replica's own batches, of other widths: padded to the widest when stacked
    sets = [{"train_eval": [batch(4, w, 9, 10 * k), batch(3, w - 1, 9, 10 * k + 1)], "val": [batch(4, 7, 9, 99)],
             RECALL_SET: [batch(5, w, 9, 20 * k + 2)]} for k, w in enumerate(widths)]
    metrics = StackedEvaluation.of(sets, CPU).metrics(StackedDecoder(models), no_autocast)
    for model, own, got in zip(models, sets, metrics, strict=True):
        assert list(got) == ["train_eval_ce", "val_ce", "train_recall"]  # a single run's row order
        for name in ("train_eval", "val"):
            assert got[f"{name}_ce"] == pytest.approx(evaluate(model, own[name], CPU, no_autocast), rel=CE_RTOL)
        assert got["train_recall"] == recall(model, own[RECALL_SET], CPU, no_autocast)


def test_a_narrower_batch_is_padded_with_token_0_and_unscored_targets():
    inputs, targets = batch(4, 5, 9, 1)
    wide = batch(4, 7, 9, 2)
    stacked_inputs, stacked_targets = stack_padded([wide, (inputs, targets)], CPU)
    assert stacked_inputs.shape == stacked_targets.shape == (2, 4, 7)
    assert (stacked_targets[1, :, 5:] == IGNORE).all() and (stacked_inputs[1, :, 5:] == 0).all()
    assert torch.equal(stacked_targets[1, :, :5], targets)


def test_sets_that_differ_in_names_batches_or_rows_do_not_stack():
    a = {"val": [batch(4, 5, 9, 1)], RECALL_SET: [batch(4, 5, 9, 2)]}
    assert StackedEvaluation.of([a, {"val": a["val"]}], CPU) is None  # names
    assert StackedEvaluation.of([a, {**a, "val": a["val"] * 2}], CPU) is None  # batch count
    assert StackedEvaluation.of([a, {**a, "val": [batch(3, 5, 9, 1)]}], CPU) is None  # rows a batch
    assert StackedEvaluation.of([a, {**a, "val": [batch(4, 6, 9, 1)]}], CPU) is not None  # a width only pads


def test_a_memorisation_groups_logged_rows_are_its_models_single_evaluations(tmp_path):
    spec = FactsSpec(count=48, unseen=8, key_length=3, value_length=2, key_vocab=6, value_vocab=5,
                     min_key_distance=1, seed=11)
    write_facts(spec, tmp_path / "facts")
    tokenize_facts_dir(tmp_path / "facts", spec, tmp_path / "tokens")
    train = dict(batch_size=16, micro_batch_size=None, beta1=0.9, beta2=0.95, max_steps=120, lr=1e-2,
                 min_lr_ratio=1.0, warmup_steps=0, weight_decay=0.0, grad_clip=1.0, eval_interval=40,
                 eval_batches=1, checkpoint_interval=1000, device="cpu", gemm="native",
                 stop_at_recall=1.01)  # never reached: every replica runs its 120 steps
    model = {"n_layer": 2, "d_model": 32, "n_head": 2, "d_ff": 64}
    jobs = [build_job(train, model, seed, tmp_path / "tokens", tmp_path / f"s{seed}") for seed in (1, 2, 3)]
    training = StackedTraining(jobs)
    training.run()
    assert training._evaluation is not None  # the group's sets stacked
    recalls = []
    for job in jobs:
        last = pd.read_csv(job.run_dir / "metrics.csv").iloc[-1]
        final = load_model(job.run_dir / "model.pt", expect=None)
        sets = job.eval_sets
        for name in ("train_eval", "val"):
            assert last[f"{name}_ce"] == pytest.approx(evaluate(final, sets[name], CPU, no_autocast), rel=CE_RTOL)
        assert last["train_recall"] == recall(final, sets[RECALL_SET], CPU, no_autocast)
        recalls.append(last["train_recall"])
        assert json.loads((job.run_dir / "summary.json").read_text())["steps"] == 120
    assert min(recalls) > 0 and max(recalls) < 1  # a recall that can go either way for some fact
