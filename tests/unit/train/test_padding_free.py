"""Padding-free batches (train.padding_free): the per-token layers of a padded batch run on its real tokens only.
Faithfulness: logits, summed loss, gradients and a short training run equal the padded computation to fp32
rounding, for any right-padded batch (hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from assocmem.model import DecoderLM, ModelConfig
from assocmem.train import IGNORE, counted_prefix, summed_nll, to_lm_batch

VOCAB = 23


def model(seed: int = 0, n_layer: int = 2) -> DecoderLM:
    torch.manual_seed(seed)
    return DecoderLM(ModelConfig.from_dict({"n_layer": n_layer, "d_model": 32, "n_head": 4, "d_ff": 64,
                                            "max_len": 40}, vocab_size=VOCAB))


def padded_batch(lengths: list[int], seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(seed)
    tokens = np.zeros((len(lengths), max(lengths)), dtype=np.int64)
    for row, length in enumerate(lengths):
        tokens[row, :length] = rng.integers(1, VOCAB, length)
    return to_lm_batch(tokens, pad_id=0)


def test_the_counted_prefix_ends_at_each_rows_last_counted_target() -> None:
    targets = torch.tensor([[5, 6, IGNORE, IGNORE], [5, IGNORE, 7, IGNORE], [IGNORE] * 4])
    assert counted_prefix(targets).tolist() == [[True, True, False, False], [True, True, True, False],
                                                [False] * 4]


@given(st.lists(st.integers(min_value=2, max_value=38), min_size=1, max_size=12), st.integers(0, 2**16))
@settings(max_examples=40, deadline=None)
def test_padding_free_logits_and_loss_equal_the_padded_ones(lengths, seed) -> None:
    net = model().eval()
    inputs, targets = padded_batch(lengths, seed)
    keep = counted_prefix(targets)
    with torch.no_grad():
        padded, flat = net(inputs), net(inputs, keep=keep)
        assert torch.allclose(flat, padded[keep], rtol=1e-5, atol=1e-5)
        loss_padded, loss_flat = summed_nll(net, inputs, targets), summed_nll(net, inputs, targets, True)
    assert float(loss_flat) == pytest.approx(float(loss_padded), rel=1e-6)


def test_padding_free_gradients_equal_the_padded_ones() -> None:
    net = model(n_layer=3)
    inputs, targets = padded_batch([37, 13, 20, 29, 24, 17, 33, 2], seed=1)
    grads = []
    for padding_free in (False, True):
        net.zero_grad()
        summed_nll(net, inputs, targets, padding_free).backward()
        grads.append([p.grad.clone() for p in net.parameters()])
    for padded, flat in zip(*grads, strict=True):
        assert torch.allclose(flat, padded, rtol=1e-4, atol=1e-6)


def test_a_hole_in_the_counted_targets_keeps_the_positions_before_the_last_one() -> None:
    net = model().eval()
    inputs, targets = padded_batch([30, 12], seed=2)
    targets[0, 5] = IGNORE  # a target not counted inside the row: its position still feeds the later ones
    with torch.no_grad():
        assert float(summed_nll(net, inputs, targets, True)) == pytest.approx(float(summed_nll(net, inputs, targets)),
                                                                                rel=1e-6)


def test_twenty_training_steps_follow_the_padded_run() -> None:
    losses = {}
    for padding_free in (False, True):
        net = model(seed=3)
        optimizer = torch.optim.AdamW(net.parameters(), lr=3e-3)
        curve = []
        for step in range(20):
            rng = np.random.default_rng(step)
            inputs, targets = padded_batch(list(rng.integers(5, 38, 16)), seed=step)
            loss = summed_nll(net, inputs, targets, padding_free) / int((targets != IGNORE).sum())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            curve.append(float(loss.detach()))
        losses[padding_free] = curve
    assert losses[True] == pytest.approx(losses[False], rel=1e-4)
    assert losses[True][-1] < losses[True][0]


def test_a_training_job_is_padding_free_on_padded_batches_only(tmp_path) -> None:
    from test_train import make_job

    assert make_job(tmp_path)._padding_free
    assert not make_job(tmp_path, run_name="off", padding_free=False)._padding_free
    assert not make_job(tmp_path, run_name="compiled", compile=True)._padding_free  # shapes would vary every step


def test_a_padding_free_job_writes_the_padded_jobs_curve(tmp_path) -> None:
    from test_train import make_job

    curves = [make_job(tmp_path, run_name=name, padding_free=name == "free").run()["final"] for name in ("pad", "free")]
    for key in ("train_loss", "val_ce"):
        assert curves[1][key] == pytest.approx(curves[0][key], rel=1e-5)
