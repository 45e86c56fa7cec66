"""train.cuda_graphs (issue 41): on CUDA the step runs in CUDA graphs over batches of static shapes; what the CPU
can check is that the static-shape step is the eager step (same losses and weights on the same batches), and that
the key is validated and, off CUDA, a logged no-op."""

from __future__ import annotations

import logging

import pytest
import torch
from helpers import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st
from test_train import make_job
from test_train import settings as train_settings

from assocmem import config as config_module
from assocmem.model import DecoderLM, ModelConfig
from assocmem.train import IGNORE, summed_nll
from assocmem.train.batches import static_shape
from assocmem.train.loop import cuda_graphs_on
from assocmem.train.settings import make_optimizer


@settings(max_examples=8, deadline=None)
@given(rows=st.integers(1, 4), length=st.integers(2, 19), extra_rows=st.integers(0, 3))
def test_a_static_shape_batch_has_the_loss_and_gradient_of_the_batch(rows: int, length: int, extra_rows: int) -> None:
    torch.manual_seed(0)
    model = DecoderLM(ModelConfig(vocab_size=23, n_layer=1, d_model=16, n_head=2, d_ff=32, max_len=20))
    generator = torch.Generator().manual_seed(rows * 100 + length)
    inputs = torch.randint(0, 23, (rows, length), generator=generator)
    targets = torch.randint(0, 23, (rows, length), generator=generator)
    targets[0, length // 2:] = IGNORE  # a shorter sequence inside the batch

    def loss_and_gradient(batch) -> tuple[torch.Tensor, torch.Tensor]:
        model.zero_grad()
        loss = summed_nll(model, *batch)
        loss.backward()
        return loss.detach(), model.tok_emb.weight.grad.clone()

    padded = static_shape((inputs, targets), rows + extra_rows, max_len=20)
    assert padded[0].shape == (rows + extra_rows, min(20, 1 << (length - 1).bit_length()))
    loss, gradient = loss_and_gradient((inputs, targets))
    padded_loss, padded_gradient = loss_and_gradient(padded)
    torch.testing.assert_close(padded_loss, loss, rtol=1e-6, atol=0)
    torch.testing.assert_close(padded_gradient, gradient, rtol=1e-5, atol=1e-6 * float(gradient.abs().max()))


def test_the_static_shape_step_is_the_eager_step(tmp_path) -> None:
    """Sequence batches of varying length, micro-batches of 3 of a batch of 4 (so the last is padded with rows):
    the static-shape step gives the eager step's losses and weights over 8 steps (fp32 rounding: the products see
    other shapes)."""
    torch.set_num_threads(1)
    runs = []
    for static in (False, True):
        job = make_job(tmp_path, run_name=f"static{static}", batch_size=4, micro_batch_size=3)
        job._static_shapes = static
        torch.manual_seed(job.seed)
        model = DecoderLM(job.model_config)
        optimizer = make_optimizer(model, job.settings, torch.device("cpu"))
        device = torch.device("cpu")
        losses = [float(job._train_step(model, optimizer, step, device, job._autocast(device))[0])
                  for step in range(8)]
        runs.append((losses, model.state_dict()))
    lengths = {job.train_batches.batch(step)[0].shape[1] for step in range(8)}
    assert len(lengths) > 1 and lengths - {16, 20}  # varying lengths, some padded (to 16, or max_len 20)
    (eager, eager_weights), (static, static_weights) = runs
    torch.testing.assert_close(static, eager, rtol=1e-6, atol=0)
    # atol: the key bias's gradient is rounding noise (attention ignores a shift of every key), which AdamW turns
    # into steps of up to lr * noise / eps: a few 1e-6 over 8 steps, against updates of lr = 3e-3 a step
    for name, weight in eager_weights.items():
        torch.testing.assert_close(static_weights[name], weight, rtol=1e-4, atol=1e-5)


def test_off_cuda_the_key_is_a_logged_no_op(caplog: pytest.LogCaptureFixture) -> None:
    graphs = train_settings(cuda_graphs=True)
    with caplog.at_level(logging.INFO, logger="assocmem.train.loop"):
        assert not cuda_graphs_on(graphs, torch.device("cpu"))
    assert "train.cuda_graphs: cpu has no CUDA graphs" in caplog.text
    assert cuda_graphs_on(graphs, torch.device("cuda")) and not cuda_graphs_on(train_settings(), torch.device("cuda"))


def test_the_key_is_validated() -> None:
    schema = config_module.load_schema(ROOT / "workflow" / "schemas" / "config.schema.yaml")
    exp = {"dataset": {"name": "question_formation"}, "models": {"m": {"n_layer": 1, "d_model": 8, "n_head": 2}}}
    cfg = config_module.validate_config({"experiments": {"qf": exp}}, schema)
    assert cfg["experiments"]["qf"]["train"]["cuda_graphs"] is False
    with pytest.raises(config_module.ConfigError, match="cuda_graphs"):
        config_module.validate_config({"experiments": {"qf": {**exp, "train": {"cuda_graphs": "yes"}}}}, schema)
