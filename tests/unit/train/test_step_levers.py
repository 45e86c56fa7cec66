"""The per-step levers for small models (issue 27) change the cost of a step, not its result.

* AdamW runs fused on a CPU: the same update as the per-tensor loop to fp32 rounding, over a whole run.
* ``seed_device`` seeds what ``torch.manual_seed`` seeds for the step's device: the same dropout masks.
(The one-gather padded batch is tested against the row-by-row oracle in tests/unit/store/test_tokenstore.py.)
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from assocmem.model import DecoderLM, ModelConfig
from assocmem.runtime import seed_device
from assocmem.train import TrainSettings, make_optimizer, summed_nll

CPU = torch.device("cpu")


def _model(dropout: float = 0.0) -> DecoderLM:
    torch.manual_seed(0)
    return DecoderLM(ModelConfig(vocab_size=37, n_layer=2, d_model=16, n_head=2, d_ff=64, max_len=9, dropout=dropout))


def _train(model: DecoderLM, optimizer: torch.optim.Optimizer, steps: int) -> list[float]:
    batches = torch.from_numpy(np.random.default_rng(5).integers(0, 37, size=(4, 64, 10)))  # memorisable
    losses = []
    for step in range(steps):
        tokens = batches[step % 4]
        loss = summed_nll(model, tokens[:, :-1], tokens[:, 1:]) / tokens[:, 1:].numel()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
    return losses


def _loop_adamw(model: DecoderLM, settings_: TrainSettings) -> torch.optim.AdamW:
    groups = [{"params": g["params"], "weight_decay": g["weight_decay"]}
              for g in make_optimizer(model, settings_, CPU).param_groups]
    return torch.optim.AdamW(groups, lr=settings_.lr, betas=(settings_.beta1, settings_.beta2), foreach=False,
                             fused=False)


@pytest.fixture
def one_thread():
    """Torch's intra-op threads as the default config's jobs train (``threads_per_job: 1``). The products' rounding
    depends on the thread count, and an xdist worker's count on which tests ran in it before (a test that calls
    ``set_threads``): on a 2-core Zen 4 host the noise floor below was 8.2e-4 at one thread, 1.04e-3 at two (the
    fused run 0.29 and 0.36 of it), so the result hung on test order. tests/conftest.py puts the count back."""
    torch.set_num_threads(1)


def test_the_cpu_optimizer_is_fused_and_follows_the_per_tensor_loop(one_thread) -> None:
    """Fused and per-tensor AdamW round differently (1e-7), and training amplifies any such difference: the fused
    run must stay as close to the loop's as a run from weights moved by 1e-7 does (the run's fp32 noise floor)."""
    settings_ = TrainSettings(batch_size=64, micro_batch_size=None, max_steps=200, lr=3e-3, min_lr_ratio=0.1,
                              warmup_steps=0, weight_decay=0.1, beta1=0.9, beta2=0.95, grad_clip=1.0,
                              eval_interval=100, eval_batches=1, checkpoint_interval=1000, device="cpu")
    fused_model, loop_model, nudged_model = _model(), _model(), _model()
    with torch.no_grad():
        noise = torch.Generator().manual_seed(1)
        for p in nudged_model.parameters():
            p.mul_(1 + 1e-7 * torch.randn(p.shape, generator=noise))
    fused = make_optimizer(fused_model, settings_, CPU)
    assert fused.defaults["fused"] is True
    loop = np.array(_train(loop_model, _loop_adamw(loop_model, settings_), 200))
    with_fused = np.array(_train(fused_model, fused, 200))
    nudged = np.array(_train(nudged_model, _loop_adamw(nudged_model, settings_), 200))
    assert loop[-1] < loop[0] - 0.3  # it trained: not a comparison of two flat curves
    np.testing.assert_allclose(with_fused[:100], loop[:100], rtol=1e-6, atol=0)
    noise_floor = np.max(np.abs(nudged - loop) / loop)
    assert 0 < noise_floor < 1e-3
    assert np.max(np.abs(with_fused - loop) / loop) <= 10 * noise_floor


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**40))
def test_seed_device_draws_what_manual_seed_draws(seed: int) -> None:
    model = _model(dropout=0.5).train()
    tokens = torch.arange(8).reshape(1, 8) % 37
    torch.manual_seed(seed)
    expected = (torch.rand(16), model(tokens))
    seed_device(seed, CPU)
    got = (torch.rand(16), model(tokens))
    assert torch.equal(expected[0], got[0]) and torch.equal(expected[1], got[1])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_seed_device_seeds_the_gpu_generator() -> None:
    cuda = torch.device("cuda")
    torch.manual_seed(3)
    expected = torch.rand(16, device=cuda)
    seed_device(3, cuda)
    assert torch.equal(torch.rand(16, device=cuda), expected)
