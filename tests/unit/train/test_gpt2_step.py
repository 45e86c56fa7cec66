"""The GPT-2-small step levers (issue 41) leave the science unchanged.

* The vocabulary is padded inside the model only: logits, the state dict (model files, checkpoints) and the parameter
  count keep the real vocabulary; the real rows start from the random numbers of an unpadded model; the padding
  columns take no probability and no gradient.
* The trainer with every lever (padded vocabulary, loss summed on the device and read at evaluations, fp32
  log-softmax of the logits as they come) gives the per-step losses of the plain nanoGPT-style loop over an
  unpadded model, 50 steps in fp32.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import torch

from assocmem.model import DecoderLM, ModelConfig, padded_vocab
from assocmem.testing.reference_train import GPT, HYPER, RandomTokens, reference_train, window_batches
from assocmem.train import DeviceBatches, TrainJob, TrainSettings, WindowBatches, fixed_windows, summed_nll

VOCAB = 37  # padded to 64
FAST = {**HYPER, "lr": 3e-3}  # with a store of 200 tokens, the loss falls within 50 steps


def config(tie: bool = True) -> ModelConfig:
    return ModelConfig(vocab_size=VOCAB, n_layer=2, d_model=16, n_head=2, d_ff=64, max_len=12, tie_embeddings=tie)


def models(tie: bool = True) -> tuple[DecoderLM, DecoderLM]:
    torch.manual_seed(3)
    padded = DecoderLM(config(tie))
    torch.manual_seed(3)
    return padded, DecoderLM(config(tie), vocab_multiple=1)


def test_padding_rows_are_internal_and_start_from_an_unpadded_models_weights() -> None:
    assert padded_vocab(VOCAB) == 64 and padded_vocab(50257) == 50304 and padded_vocab(64) == 64
    for tie in (True, False):
        padded, plain = models(tie)
        assert padded.tok_emb.weight.shape[0] == 64 and plain.tok_emb.weight.shape[0] == VOCAB
        assert (padded.head.weight is padded.tok_emb.weight) == tie
        saved, reference = padded.state_dict(), plain.state_dict()
        assert saved.keys() == reference.keys()
        assert all(torch.equal(saved[name], reference[name]) for name in saved)  # same draws, real shapes
        assert saved["tok_emb.weight"].untyped_storage().nbytes() == VOCAB * 16 * 4  # not the padded storage
        assert padded.num_parameters() == plain.num_parameters()
        idx = torch.randint(0, VOCAB, (3, 12))
        assert torch.equal(padded(idx), plain(idx))


def test_the_padding_columns_take_no_probability_and_no_gradient() -> None:
    padded, plain = models()
    inputs, targets = torch.randint(0, VOCAB, (4, 11)), torch.randint(0, VOCAB, (4, 11))
    logits = padded(inputs, padded=True)
    assert logits.shape == (4, 11, 64) and torch.isneginf(logits[..., VOCAB:]).all()
    assert torch.softmax(logits, dim=-1)[..., VOCAB:].max() == 0
    summed_nll(padded, inputs, targets).backward()
    assert padded.tok_emb.weight.grad[VOCAB:].abs().max() == 0
    summed_nll(plain, inputs, targets).backward()
    torch.testing.assert_close(padded.tok_emb.weight.grad[:VOCAB], plain.tok_emb.weight.grad, rtol=1e-6, atol=1e-7)


def test_a_model_file_of_an_unpadded_model_loads_into_a_padded_one() -> None:
    padded, plain = models()
    torch.manual_seed(4)
    other = DecoderLM(config(), vocab_multiple=1).state_dict()
    padded.load_state_dict(other)
    assert torch.equal(padded.tok_emb.weight[VOCAB:], torch.zeros(64 - VOCAB, 16))
    assert all(torch.equal(padded.state_dict()[name], other[name]) for name in other)


def test_cpu_batches_are_used_in_place_and_counted_on_the_host() -> None:
    store = RandomTokens(VOCAB, 500, seed=1)
    source = WindowBatches(store, 4, 8, seed=2)
    batches = DeviceBatches(source, torch.device("cpu"))
    batches.prefetch(1)  # a no-op off CUDA
    (inputs, targets), count = batches.get(1)
    assert torch.equal(inputs, source.batch(1)[0]) and count == targets.numel()


def trainer_losses(tmp_path: Path, steps: int) -> list[float]:
    store = RandomTokens(97, 200, seed=3)
    settings = TrainSettings(batch_size=4, micro_batch_size=2, max_steps=steps, eval_interval=1, eval_batches=1,
                             checkpoint_interval=1000, device="cpu", gemm="native", **FAST)
    model = ModelConfig(vocab_size=97, n_layer=2, d_model=32, n_head=2, d_ff=128, max_len=16)
    TrainJob(run_dir=tmp_path / "run", model_config=model, settings=settings,
             train_batches=WindowBatches(store, 4, 16, seed=11), seed=11, tokens_per_sequence=16.0,
             eval_sets={"val": fixed_windows(store, 1, 4, 16, seed=11)}).run()
    return pd.read_csv(tmp_path / "run" / "metrics.csv")["train_loss"].tolist()


def test_fifty_steps_give_the_plain_loops_losses(tmp_path: Path) -> None:
    """fp32 on a CPU. The products differ from the plain loop's only by the padded width of the unembedding and
    the micro-batches (two of two sequences, summed): fp32 rounding (6e-8 relative per operation). Measured over
    the 50 steps: at most 1.5e-7 relative; 1e-6 leaves room for another BLAS, not for a changed update."""
    torch.set_num_threads(1)
    project = trainer_losses(tmp_path, 50)
    store = RandomTokens(97, 200, seed=3)
    torch.manual_seed(11)
    reference = reference_train(GPT(97, 16, 2, 2, 32, True), window_batches(store, 4, 16, 11), 50, FAST)
    assert len(project) == len(reference) == 50
    np.testing.assert_allclose(project, reference, rtol=1e-6, atol=0)
    assert reference[-1] < reference[0] - 0.5  # it trained
