"""Speed levers of the trainer must leave the science unchanged, and batching must not cost more on more data.

* The project's trainer and the plain nanoGPT-style reference loop (``assocmem.testing.reference_train``, which
  ``benchmarks/bench_train.py`` times it against) give the same per-step losses from the same seed (the benchmark's
  speed ratio compares like with like), with the Linear products on either GEMM library (train.gemm native or
  onednn).
* ``SequenceBatches`` computes one permutation per epoch (``benchmarks/bench_batches.py`` times a batch on
  10,000 against 1,000,000 rows).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from assocmem import gemm as gemm_module
from assocmem.model import ModelConfig, flops_per_token
from assocmem.testing.reference_train import GPT, HYPER, RandomTokens, reference_train, window_batches
from assocmem.train import IGNORE, SequenceBatches, TrainJob, TrainSettings, WindowBatches, fixed_windows

BENCHMARKS = ROOT / "benchmarks"
CFG = {"vocab": 97, "block": 16, "n_layer": 2, "n_head": 2, "d_model": 32, "batch": 4}
STEPS = 20


@pytest.fixture
def benchmark_scripts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Makes the scripts of benchmarks/ importable, for the tests of the scripts' own machinery."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))


def project_losses(bias: bool, tmp_path: Path, gemm: str = "auto") -> list[float]:
    store = RandomTokens(CFG["vocab"], 5000, seed=3)
    settings = TrainSettings(batch_size=CFG["batch"], micro_batch_size=None, max_steps=STEPS, eval_interval=1,
                             eval_batches=1, checkpoint_interval=1000, device="cpu", gemm=gemm, **HYPER)
    config = ModelConfig(vocab_size=CFG["vocab"], n_layer=CFG["n_layer"], d_model=CFG["d_model"],
                         n_head=CFG["n_head"], d_ff=4 * CFG["d_model"], max_len=CFG["block"], bias=bias)
    job = TrainJob(run_dir=tmp_path / "run", model_config=config, settings=settings,
                   train_batches=WindowBatches(store, CFG["batch"], CFG["block"], seed=11),
                   eval_sets={"val": fixed_windows(store, 1, CFG["batch"], CFG["block"], seed=11)},
                   seed=11, tokens_per_sequence=float(CFG["block"]))
    job.run()
    return pd.read_csv(tmp_path / "run" / "metrics.csv")["train_loss"].tolist()


def reference_losses(bias: bool) -> list[float]:
    store = RandomTokens(CFG["vocab"], 5000, seed=3)
    torch.manual_seed(11)
    model = GPT(CFG["vocab"], CFG["block"], CFG["n_layer"], CFG["n_head"], CFG["d_model"], bias)
    return reference_train(model, window_batches(store, CFG["batch"], CFG["block"], 11), STEPS, HYPER)


@pytest.mark.parametrize("gemm", ["native", "onednn"])
@pytest.mark.parametrize("bias", [True, False])
def test_trainer_and_reference_loop_give_the_same_losses(bias: bool, gemm: str, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference loop runs F.linear (MKL); with train.gemm=onednn every product of the tiny model goes
    through oneDNN (threshold lifted), so the 20 losses also compare the two GEMM libraries."""
    if gemm == "onednn":
        if not gemm_module.onednn_available():
            pytest.skip("this torch build has no oneDNN")
        monkeypatch.setattr(gemm_module, "ONEDNN_MIN_MACS", 0)
    torch.set_num_threads(1)
    project = project_losses(bias, tmp_path, gemm)
    reference = reference_losses(bias)
    assert len(project) == len(reference) == STEPS
    np.testing.assert_allclose(project, reference, rtol=1e-5, atol=0)
    assert reference[-1] < reference[0]  # it trained: the comparison is not between two constant curves


class FakeSequences:
    """The part of a sequences TokenStore that SequenceBatches reads."""

    pad_id = 0

    def padded_batch(self, rows: list[int]) -> np.ndarray:
        return np.tile(np.asarray(rows, dtype=np.int64)[:, None] % 50 + 1, (1, 8))


def test_one_permutation_per_epoch(monkeypatch: pytest.MonkeyPatch) -> None:
    made = []
    real = np.random.default_rng

    def counting(seed=None):
        made.append(seed)
        return real(seed)

    monkeypatch.setattr(np.random, "default_rng", counting)
    source = SequenceBatches(FakeSequences(), 0, 100, 32, seed=1)
    rows = [row for step in range(10) for row in source.rows(step)]  # 320 rows: epochs 0-3
    assert sorted({tuple(seed) for seed in made}) == [(1, 0), (1, 1), (1, 2), (1, 3)]
    for epoch in range(3):
        assert sorted(rows[100 * epoch:100 * (epoch + 1)]) == list(range(100))  # each epoch visits every row once


@given(st.integers(0, 50), st.integers(1, 40), st.integers(1, 70), st.integers(0, 30), st.integers(0, 10**6))
def test_a_batchs_rows_are_each_positions_row_of_its_epochs_permutation(start, n, batch_size, step, seed) -> None:
    """The rows, taken epoch by epoch at once, are those of the definition one position at a time (batches that
    cross an epoch's end, or span several, included), and the batch is built from them."""
    source = SequenceBatches(FakeSequences(), start, start + n, batch_size, seed=seed)
    expected = []
    for position in range(step * batch_size, (step + 1) * batch_size):
        epoch, offset = divmod(position, n)
        expected.append(start + int(np.random.default_rng([seed, epoch]).permutation(n)[offset]))
    assert source.rows(step) == expected
    assert source.batch(step)[0].tolist() == [[r % 50 + 1] * 7 for r in expected]


def test_summed_step_loss_matches_the_per_micro_batch_float_sum(tmp_path: Path) -> None:
    """The device-side loss sum (no host sync per micro-batch) equals the old float sum bit for bit."""
    store = RandomTokens(CFG["vocab"], 5000, seed=3)
    settings = TrainSettings(batch_size=8, micro_batch_size=2, max_steps=3, eval_interval=3, eval_batches=1,
                             checkpoint_interval=1000, device="cpu", **HYPER)
    config = ModelConfig(vocab_size=CFG["vocab"], n_layer=1, d_model=16, n_head=2, d_ff=32, max_len=CFG["block"])
    job = TrainJob(run_dir=tmp_path / "run", model_config=config, settings=settings,
                   train_batches=WindowBatches(store, 8, CFG["block"], seed=2), eval_sets={}, seed=2,
                   tokens_per_sequence=float(CFG["block"]))
    from assocmem.model import DecoderLM
    from assocmem.train import make_optimizer, summed_nll

    torch.manual_seed(0)
    model = DecoderLM(config)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    optimizer = make_optimizer(model, settings, torch.device("cpu"))
    device = torch.device("cpu")
    loss, n_targets = job._train_step(model, optimizer, 0, device, job._autocast(device))
    model.load_state_dict(state)
    inputs, targets = job.train_batches.batch(0)
    expected = 0.0
    for i in range(0, 8, 2):
        expected += float(summed_nll(model, inputs[i:i + 2], targets[i:i + 2]).detach())
    assert loss == expected and n_targets == int((targets != IGNORE).sum())


def test_gemm_ceiling_counts_the_flops_of_a_training_step(benchmark_scripts: None) -> None:
    """The benchmark's GEMM-only ceiling times exactly the products behind the 6N + 12LdT FLOPs per token that
    its MFU column uses (N: the matrices of the blocks and the tied head, without position embeddings or norms)."""
    import bench_train

    d, layers, vocab, block = CFG["d_model"], CFG["n_layer"], CFG["vocab"], CFG["block"]
    matrices = layers * 12 * d * d + vocab * d
    config = ModelConfig(vocab_size=vocab, n_layer=layers, d_model=d, n_head=CFG["n_head"], d_ff=4 * d,
                         max_len=block, bias=False)
    tokens = CFG["batch"] * block
    for library in ("mkl", "onednn"):
        result = bench_train.run_gemm_floor(CFG, library, repeats=2)
        assert result["gemm_flops_per_step"] / tokens == pytest.approx(flops_per_token(config, block, matrices))
        assert 0 < result["gemm_s_per_step"] < 1.0


def test_reference_onednn_arm_changes_only_the_gemm_library(monkeypatch: pytest.MonkeyPatch) -> None:
    """route_linears_to_onednn (the benchmark's nanogpt+malloc+onednn arm): the GEMM library changes, the losses
    do not (shown on the reference loop)."""
    from assocmem.testing.reference_train import route_linears_to_onednn

    if not gemm_module.onednn_available():
        pytest.skip("this torch build has no oneDNN")
    monkeypatch.setattr(gemm_module, "ONEDNN_MIN_MACS", 0)
    torch.set_num_threads(1)
    store = RandomTokens(CFG["vocab"], 5000, seed=3)
    calls = []
    real = gemm_module._OneDnnLinear.apply
    monkeypatch.setattr(gemm_module._OneDnnLinear, "apply", lambda *a: calls.append(1) or real(*a))
    torch.manual_seed(11)
    model = GPT(CFG["vocab"], CFG["block"], CFG["n_layer"], CFG["n_head"], CFG["d_model"], False)
    route_linears_to_onednn(model)
    losses = reference_train(model, window_batches(store, CFG["batch"], CFG["block"], 11), STEPS, HYPER)
    assert len(calls) == STEPS * (4 * CFG["n_layer"] + 1)  # every Linear of every step, the head included
    np.testing.assert_allclose(losses, reference_losses(False), rtol=1e-5, atol=0)


@pytest.mark.parametrize("variant", ["manual-attention", "fused-ce", "fused-adamw"])
def test_step_levers_compute_the_base_step(variant: str, benchmark_scripts: None) -> None:
    """bench_step_levers.py times levers that must not change the arithmetic: same losses, same weights."""
    import bench_step_levers as levers

    torch.set_num_threads(1)
    data = levers.batches(CFG, 8, seed=5)
    base, other = levers.Variant("base", CFG, HYPER), levers.Variant(variant, CFG, HYPER)
    base_losses = [float(base.step(x, y)) for x, y in data]
    other_losses = [float(other.step(x, y)) for x, y in data]
    assert base_losses[0] > 0
    np.testing.assert_allclose(other_losses, base_losses, rtol=1e-5)
    for p, q in zip(base.model.parameters(), other.model.parameters(), strict=True):
        torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("kind", ["foreach", "fused"])
def test_bench_optimizer_variant_wraps_the_product_optimizer(kind: str, monkeypatch: pytest.MonkeyPatch,
                                                             benchmark_scripts: None) -> None:
    """The benchmark installs its AdamW variant in place of train.make_optimizer; the variant must call the
    product's function it replaced (it once called itself, so the +foreach/+fused arms never ran)."""
    import bench_train

    from assocmem.train import loop as train

    monkeypatch.setattr(train, "make_optimizer", bench_train.project_optimizer(kind))
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    settings = TrainSettings(batch_size=2, micro_batch_size=None, max_steps=1, eval_interval=1, eval_batches=1,
                             checkpoint_interval=1, device="cpu", **HYPER)
    optimizer = train.make_optimizer(model, settings, torch.device("cpu"))
    assert optimizer.defaults[kind] is True
    assert all(group[kind] is True for group in optimizer.param_groups)  # a group's own entry wins over defaults
    assert [g["weight_decay"] for g in optimizer.param_groups] == [HYPER["weight_decay"], 0.0]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lengths=st.lists(st.integers(2, 24), min_size=2, max_size=12), groups=st.integers(1, 5))
def test_the_length_groups_probe_gives_the_padded_batchs_loss_and_gradient(lengths: list[int], groups: int,
                                                                             benchmark_scripts: None) -> None:
    """bench_sweep's length-groups-G arm (packing by length, not in the product) computes the padded batch's
    summed loss and gradient to fp32 rounding: trimmed columns lie after every kept row's last scored token."""
    import bench_sweep

    from assocmem.model import DecoderLM
    from assocmem.train import summed_nll, to_lm_batch

    torch.manual_seed(0)
    model = DecoderLM(ModelConfig(vocab_size=20, n_layer=2, d_model=16, n_head=2, d_ff=32, max_len=32))
    padded = np.zeros((len(lengths), max(lengths)), dtype=np.int64)
    for row, length in enumerate(lengths):
        padded[row, :length] = np.random.default_rng(row).integers(1, 20, size=length)
    batch = to_lm_batch(padded)

    def loss_and_gradient(micro_batches) -> tuple[float, torch.Tensor]:
        model.zero_grad()
        total = 0.0
        for inputs, targets in micro_batches:
            nll = summed_nll(model, inputs, targets)
            nll.backward()
            total += float(nll.detach())
        return total, torch.cat([p.grad.flatten() for p in model.parameters()])

    loss, gradient = loss_and_gradient([batch])
    grouped_loss, grouped_gradient = loss_and_gradient(bench_sweep.length_grouped(groups)(None, batch))
    assert grouped_loss == pytest.approx(loss, rel=1e-5)
    # An element that is a near-cancelling sum of per-token terms keeps an absolute fp32 error of the terms' size,
    # not its own (hypothesis found 1.9e-6 on an element of 4e-3): the absolute tolerance scales with the gradient.
    scale = float(gradient.abs().max())
    torch.testing.assert_close(grouped_gradient, gradient, rtol=1e-4, atol=1e-6 * scale)
