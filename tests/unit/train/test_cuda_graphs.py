"""train.cuda_graphs (issue 41): on CUDA the whole step (forward, backward, clipping, AdamW) is captured in one CUDA
graph over static buffers. What the CPU can check: the static-shape batch is the batch, the graphed step's code run
eagerly over its static buffers is the eager step (same losses and weights), its optimizer state resumes an eager
run, and the key is validated and, off CUDA or under DDP, a logged no-op. The capture itself is checked on CUDA
(``-m gpu``, run by benchmarks/gpu_check.sh)."""

from __future__ import annotations

import json
import logging

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st
from test_train import make_job
from test_train import settings as train_settings

from assocmem import config as config_module
from assocmem.model import DecoderLM, ModelConfig
from assocmem.tokenstore import TokenStore
from assocmem.train import IGNORE, SequenceBatches, WindowBatches, summed_nll
from assocmem.train.batches import static_shape, static_width
from assocmem.train.loop import cuda_graphs_on
from assocmem.train.settings import make_optimizer


@settings(max_examples=8, deadline=None)
@given(rows=st.integers(1, 4), length=st.integers(2, 19), extra_rows=st.integers(0, 3),
       extra_width=st.integers(0, 6))
def test_a_static_shape_batch_has_the_loss_and_gradient_of_the_batch(rows: int, length: int, extra_rows: int,
                                                                     extra_width: int) -> None:
    torch.manual_seed(0)
    model = DecoderLM(ModelConfig(vocab_size=23, n_layer=1, d_model=16, n_head=2, d_ff=32, max_len=26))
    generator = torch.Generator().manual_seed(rows * 100 + length)
    inputs = torch.randint(0, 23, (rows, length), generator=generator)
    targets = torch.randint(0, 23, (rows, length), generator=generator)
    targets[0, length // 2:] = IGNORE  # a shorter sequence inside the batch

    def loss_and_gradient(batch) -> tuple[torch.Tensor, torch.Tensor]:
        model.zero_grad()
        loss = summed_nll(model, *batch)
        loss.backward()
        return loss.detach(), model.tok_emb.weight.grad.clone()

    padded = static_shape((inputs, targets), rows + extra_rows, length + extra_width)
    assert padded[0].shape == (rows + extra_rows, length + extra_width)
    loss, gradient = loss_and_gradient((inputs, targets))
    padded_loss, padded_gradient = loss_and_gradient(padded)
    torch.testing.assert_close(padded_loss, loss, rtol=1e-6, atol=0)
    torch.testing.assert_close(padded_gradient, gradient, rtol=1e-5, atol=1e-6 * float(gradient.abs().max()))


def test_a_batch_wider_than_the_static_shape_is_an_error() -> None:
    batch = (torch.zeros(2, 5, dtype=torch.long), torch.zeros(2, 5, dtype=torch.long))
    with pytest.raises(ValueError, match=r"does not fit the static shape \(2, 4\)"):
        static_shape(batch, 2, 4)


def test_the_static_width_is_the_widest_batch_a_source_gives(tmp_path) -> None:
    job = make_job(tmp_path)
    source = job.train_batches
    assert isinstance(source, SequenceBatches)
    widest = max(source.batch(step)[0].shape[1] for step in range(200))  # 200 batches of 4 cover every row
    assert static_width(source, max_len=20) == widest
    store = TokenStore(tmp_path / "tokens", "train")
    one = SequenceBatches(store, 3, 4, batch_size=2, seed=0)
    assert static_width(one, max_len=20) == int(store.lengths()[3]) - 1
    assert static_width(WindowBatches(store, 2, 7, seed=0), max_len=20) == 7


def run_steps(job, graphed: bool, steps: int) -> tuple[list[float], dict, torch.optim.Optimizer]:
    torch.manual_seed(job.seed)
    model = DecoderLM(job.model_config)
    device = torch.device("cpu")
    optimizer = make_optimizer(model, job.settings, device)
    if graphed:
        job._graphed = job._graphed_step(model, optimizer, device)
    losses = [float(job._train_step(model, optimizer, step, device, job._autocast(device))[0])
              for step in range(steps)]
    return losses, model.state_dict(), optimizer


def test_the_graphed_step_is_the_eager_step(tmp_path) -> None:
    """Sequence batches of varying length, micro-batches of 3 of a batch of 4 (so the static buffers hold 6 rows),
    warmup and clipping: the graphed step's code, run eagerly over its static buffers, gives the eager step's losses
    and weights over 8 steps (fp32 rounding: the products see other shapes; the learning rate is an fp32 tensor)."""
    torch.set_num_threads(1)
    job = make_job(tmp_path, run_name="eager", batch_size=4, micro_batch_size=3, grad_clip=0.5)
    eager, eager_weights, _ = run_steps(job, graphed=False, steps=8)
    job = make_job(tmp_path, run_name="graphed", batch_size=4, micro_batch_size=3, grad_clip=0.5)
    graphed, graphed_weights, optimizer = run_steps(job, graphed=True, steps=8)
    assert job._graphed.inputs.shape == (6, static_width(job.train_batches, 20))
    lengths = {job.train_batches.batch(step)[0].shape[1] for step in range(8)}
    assert len(lengths) > 1  # the buffers pad batches of several widths
    assert job._graphed.graph is None and job._graphed.eager_steps == 8  # nothing is captured off CUDA
    assert all(group["lr"] is job._graphed.lr for group in optimizer.param_groups)
    torch.testing.assert_close(graphed, eager, rtol=1e-6, atol=0)
    # atol: the key bias's gradient is rounding noise (attention ignores a shift of every key), which AdamW turns
    # into steps of up to lr * noise / eps: a few 1e-6 over 8 steps, against updates of lr = 3e-3 a step
    for name, weight in eager_weights.items():
        torch.testing.assert_close(graphed_weights[name], weight, rtol=1e-4, atol=1e-5)


def test_an_eager_run_resumes_the_graphed_steps_optimizer(tmp_path) -> None:
    """A checkpoint's optimizer state from graphed steps (a tensor learning rate, capturable groups) drives eager
    steps as one from eager steps does."""
    cpu = torch.device("cpu")
    job = make_job(tmp_path, run_name="graphed")
    _, graphed_weights, graphed_optimizer = run_steps(job, graphed=True, steps=3)
    job = make_job(tmp_path, run_name="eager")
    _, eager_weights, eager_optimizer = run_steps(job, graphed=False, steps=3)
    continued = []
    for weights, optimizer in ((graphed_weights, graphed_optimizer), (eager_weights, eager_optimizer)):
        model = DecoderLM(job.model_config)
        model.load_state_dict(weights)
        resumed = make_optimizer(model, job.settings, cpu)
        resumed.load_state_dict(optimizer.state_dict())
        for step in (3, 4):
            job._train_step(model, resumed, step, cpu, job._autocast(cpu))
        continued.append(model.state_dict())
    for name, weight in continued[1].items():
        torch.testing.assert_close(continued[0][name], weight, rtol=1e-4, atol=1e-5)


def test_off_cuda_or_under_ddp_the_key_is_a_logged_no_op(caplog: pytest.LogCaptureFixture) -> None:
    graphs = train_settings(cuda_graphs=True)
    with caplog.at_level(logging.INFO, logger="assocmem.train.loop"):
        assert not cuda_graphs_on(graphs, torch.device("cpu"))
        assert not cuda_graphs_on(graphs, torch.device("cuda"), world=2)
    assert "train.cuda_graphs: cpu has no CUDA graphs" in caplog.text
    assert "not under DDP (2 processes)" in caplog.text
    assert cuda_graphs_on(graphs, torch.device("cuda")) and not cuda_graphs_on(train_settings(), torch.device("cuda"))


def test_a_cpu_run_with_the_key_records_no_graphs(tmp_path) -> None:
    job = make_job(tmp_path, cuda_graphs=True, max_steps=4)
    job.run()
    assert json.loads((job.run_dir / "timing.json").read_text())["cuda_graphs"] is False


def test_the_key_is_validated() -> None:
    schema = config_module.load_schema(ROOT / "workflow" / "schemas" / "config.schema.yaml")
    exp = {"dataset": {"name": "question_formation"}, "models": {"m": {"n_layer": 1, "d_model": 8, "n_head": 2}}}
    cfg = config_module.validate_config({"experiments": {"qf": exp}}, schema)
    assert cfg["experiments"]["qf"]["train"]["cuda_graphs"] is False
    with pytest.raises(config_module.ConfigError, match="cuda_graphs"):
        config_module.validate_config({"experiments": {"qf": {**exp, "train": {"cuda_graphs": "yes"}}}}, schema)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device")
def test_on_cuda_the_captured_step_is_the_eager_step(tmp_path) -> None:
    """Whole runs on CUDA, 40 steps with evaluations between replays: the graphed run (captured after its warmup)
    gives the eager run's validation losses and weights to fp32 rounding, and records its graphs."""
    runs = {}
    for graphs in (False, True):
        job = make_job(tmp_path, run_name=f"graphs{graphs}", device="cuda", cuda_graphs=graphs, max_steps=40,
                       eval_interval=10, checkpoint_interval=20, batch_size=4, micro_batch_size=3)
        job.run()
        timing = json.loads((job.run_dir / "timing.json").read_text())
        assert timing["cuda_graphs"] is graphs
        metrics = pd.read_csv(job.run_dir / "metrics.csv")[["step", "train_loss", "val_ce"]].to_numpy()
        runs[graphs] = metrics, torch.load(job.run_dir / "model.pt", weights_only=True)
        if graphs:
            assert job._graphed is not None and job._graphed.graph is not None
    (eager, eager_model), (graphed, graphed_model) = runs[False], runs[True]
    np.testing.assert_allclose(graphed, eager, rtol=1e-4)
    for name, weight in eager_model["model"].items():
        torch.testing.assert_close(graphed_model["model"][name], weight, rtol=1e-3, atol=1e-4)
