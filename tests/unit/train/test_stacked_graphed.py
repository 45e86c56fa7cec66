"""The stacked replicas' step in one CUDA graph (train.cuda_graphs with stacked replicas, issue 41). What the CPU can
check: the static stack of the replicas' batches, and the graphed step's code, run eagerly over its static buffers
(nothing is captured off CUDA), trains every replica as the eager stacked step does: the same losses, weights and
files, including a replica with its own learning-rate schedule and clipping and one that stops early and is then
frozen. The capture itself is checked on CUDA (``-m gpu``, run by benchmarks/gpu_check.sh)."""

from __future__ import annotations

import json
import logging

import numpy as np
import pandas as pd
import pytest
import torch
from test_stacked import LOSS_RTOL, REPLICAS, WEIGHT_ATOL, make_job, no_peak_timing, weights  # noqa: F401 (a fixture)

from assocmem.stopping import IGNORE
from assocmem.train.batches import static_shape, static_stack
from assocmem.train.stacked import StackedTraining
from assocmem.train.stacked_graphed import StackedGraphedStep


def test_the_static_stack_pads_each_replica_and_leaves_a_frozen_one_unscored():
    a = (torch.tensor([[1, 2, 3]]), torch.tensor([[2, 3, 4]]))
    b = (torch.tensor([[5, 6], [7, 8]]), torch.tensor([[6, IGNORE], [8, 9]]))
    inputs, targets = static_stack([a, None, b], rows=2, width=4)
    assert inputs.shape == targets.shape == (3, 2, 4)
    for k, batch in ((0, a), (2, b)):
        padded = static_shape(batch, 2, 4)
        assert torch.equal(inputs[k], padded[0]) and torch.equal(targets[k], padded[1])
    assert bool((targets[1] == IGNORE).all())  # the frozen replica scores nothing


def assert_same_training(eager, graphed, loss_rtol: float = LOSS_RTOL, weight_rtol: float = 0.0,
                         weight_atol: float = WEIGHT_ATOL) -> None:
    """The same steps, losses, stops and weights (the fingerprints differ: train.cuda_graphs is a setting)."""
    a, b = pd.read_csv(eager / "metrics.csv"), pd.read_csv(graphed / "metrics.csv")
    assert list(a.columns) == list(b.columns) and a["step"].tolist() == b["step"].tolist()
    for column in ("lr", "train_loss", "val_ce"):
        np.testing.assert_allclose(b[column], a[column], rtol=loss_rtol)
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (eager, graphed))
    for key in ("steps", "best_step", "stopped_early", "stop_rule", "max_steps", "n_params", "eval_rows"):
        assert sa[key] == sb[key], key
    for name in ("model.pt", "best.pt"):
        wa, wb = weights(eager / name), weights(graphed / name)
        assert wa.keys() == wb.keys()
        for key, value in wa.items():
            torch.testing.assert_close(wb[key], value, rtol=weight_rtol, atol=weight_atol)


@pytest.fixture
def graphs_on_cpu(monkeypatch):
    """Let the stacked trainer take its graphed step on the CPU, where it runs the graph's code eagerly."""
    monkeypatch.setattr("assocmem.train.stacked.cuda_graphs_on", lambda settings, device: settings.cuda_graphs)


@pytest.mark.parametrize("feed", ["device rows", "host batches"])
def test_the_graphed_stacked_step_trains_each_replica_as_the_eager_stacked_step(tmp_path, graphs_on_cpu, feed,
                                                                                monkeypatch):
    if feed == "host batches":  # sources that are not whole sequences: the host builds and copies the batches
        monkeypatch.setattr("assocmem.train.stacked_graphed.DeviceRows.of", lambda *a: None)
    for name, graphs in (("eager", False), ("graphed", True)):
        training = StackedTraining([make_job(tmp_path, tmp_path / f"{name}{seed}", seed, cuda_graphs=graphs, **kw)
                                    for seed, kw in REPLICAS])
        summaries = training.run()
        assert [s["steps"] for s in summaries] == [8, 5, 4]  # a shorter budget, an early stop: each its own step
        assert (training._graphed is not None) is graphs
        for seed, _ in REPLICAS:
            timing = json.loads((tmp_path / f"{name}{seed}" / "timing.json").read_text())
            assert timing["cuda_graphs"] is graphs
    graphed = training._graphed
    assert (graphed.rows is not None) is (feed == "device rows")
    assert graphed.graph is None and graphed.eager_steps == 8  # nothing is captured off CUDA
    assert graphed.inputs.shape[:2] == (3, 4)  # 3 replicas, batches of 4 rows (micro-batches of 2)
    assert all(group["lr"] is graphed.lr for group in graphed.optimizer.param_groups)
    for seed, _ in REPLICAS:
        assert_same_training(tmp_path / f"eager{seed}", tmp_path / f"graphed{seed}")
    for k, (seed, _) in enumerate(REPLICAS[1:], start=1):  # frozen since it stopped: bit for bit its model.pt
        final = weights(tmp_path / f"graphed{seed}" / "model.pt")
        for name, param in training.stack.named_stacked():
            assert torch.equal(param.detach()[k][:len(final[name])], final[name]), name


def test_off_cuda_the_key_is_a_logged_no_op_for_a_stack(tmp_path, caplog):
    training = StackedTraining([make_job(tmp_path, tmp_path / f"r{seed}", seed, cuda_graphs=True, max_steps=2)
                                for seed in (1, 2)])
    with caplog.at_level(logging.INFO, logger="assocmem.train.loop"):
        training.run()
    assert training._graphed is None and "train.cuda_graphs: cpu has no CUDA graphs" in caplog.text
    assert json.loads((tmp_path / "r1" / "timing.json").read_text())["cuda_graphs"] is False


def test_replicas_that_differ_in_cuda_graphs_cannot_stack(tmp_path):
    from assocmem.errors import AssocmemError

    with pytest.raises(AssocmemError, match="train.cuda_graphs differ"):
        StackedTraining([make_job(tmp_path, tmp_path / "a", 1), make_job(tmp_path, tmp_path / "b", 2,
                                                                         cuda_graphs=True)])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device")
def test_on_cuda_the_captured_stacked_step_is_the_eager_stacked_step(tmp_path):
    """Whole stacked runs on CUDA, with evaluations and a checkpoint between replays and replicas that stop early:
    the captured run (after its warmup) gives the eager stacked run's losses and weights to fp32 rounding. The
    tolerances are the single-run CUDA test's (test_cuda_graphs.py), not the CPU's: on CUDA the eager step pads each
    batch to its longest row and the graph to its static width, so their products and attention have other shapes,
    for which cuBLAS and SDPA may choose other kernels that round otherwise (on the CPU both arms run one code)."""
    for name, graphs in (("eager", False), ("graphed", True)):
        training = StackedTraining([make_job(tmp_path, tmp_path / f"{name}{seed}", seed, cuda_graphs=graphs,
                                             device="cuda", **kw) for seed, kw in REPLICAS])
        training.run()
        if graphs:
            assert isinstance(training._graphed, StackedGraphedStep) and training._graphed.graph is not None
    for seed, _ in REPLICAS:
        assert_same_training(tmp_path / f"eager{seed}", tmp_path / f"graphed{seed}", loss_rtol=1e-4, weight_rtol=1e-3,
                             weight_atol=1e-4)


def test_host_tensors_bound_for_cuda_are_pinned_and_others_used_in_place(monkeypatch):
    from assocmem.train.batches import pinned

    host = torch.arange(6).view(2, 3)
    assert pinned(host, torch.device("cpu")) is host
    calls = []
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self: calls.append(self) or self.clone())
    staged = pinned(host, torch.device("cuda"))
    assert calls == [host] and staged is not host and torch.equal(staged, host)


def test_both_feeds_of_the_graphed_step_train_bit_for_bit_alike(tmp_path, graphs_on_cpu, monkeypatch):
    """Device rows pad a row with the pad id where the host's batch pads with token 0: positions no scored target
    sees, so the same weights to the bit."""
    runs = {}
    for feed in ("rows", "host"):
        if feed == "host":
            monkeypatch.setattr("assocmem.train.stacked_graphed.DeviceRows.of", lambda *a: None)
        training = StackedTraining([make_job(tmp_path, tmp_path / f"{feed}{seed}", seed, cuda_graphs=True, **kw)
                                    for seed, kw in REPLICAS])
        training.run()
        runs[feed] = training
    for (name, a), (_, b) in zip(runs["rows"].stack.named_stacked(), runs["host"].stack.named_stacked(), strict=True):
        assert torch.equal(a, b), name
