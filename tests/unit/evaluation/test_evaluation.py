"""The evaluate stage: a model's CE on a McCoy-format file with and without <eos>, and its clustered standard
error; the fresh sample it evaluates on."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import make_token_dir, write_raw

from assocmem.errors import AssocmemError
from assocmem.evaluation import encode_file, evaluate_files, row_losses, summarise_losses
from assocmem.model import DecoderLM, ModelConfig
from assocmem.qf.generate import generate_fresh, generate_splits, read_qf
from assocmem.stats import clustered_ce
from assocmem.tokenstore import TokenStore, read_store_meta


@pytest.fixture
def store_and_model(tmp_path):
    token_dir = make_token_dir(tmp_path, repeat=3)
    torch.manual_seed(0)
    model = DecoderLM(ModelConfig(vocab_size=TokenStore(token_dir, "train").vocab_size, n_layer=1, d_model=16,
                                  n_head=2, d_ff=32, max_len=40)).eval()
    return token_dir, model


def test_row_losses_split_the_eos_term_and_match_a_direct_computation(store_and_model, tmp_path):
    token_dir, model = store_and_model
    tokenizer = read_store_meta(token_dir)["tokenizer"]
    vocab = tokenizer["vocab"]
    sequences, unknown = encode_file(write_raw(tmp_path / "raw") / "question.train", tokenizer)
    assert unknown == 0 and all(row[-1] == vocab.index("<eos>") for row in sequences)
    losses = row_losses(model, sequences, pad_id=0)
    for row, ids in zip(losses.itertuples(), sequences, strict=True):
        tokens = torch.tensor(ids)[None]
        log_probs = torch.log_softmax(model(tokens[:, :-1]), dim=-1)[0]
        nll = -log_probs[torch.arange(len(ids) - 1), tokens[0, 1:]].double()
        assert row.nll == pytest.approx(float(nll.sum()), rel=1e-6)
        assert row.nll_eos == pytest.approx(float(nll[-1]), rel=1e-6) and row.tokens == len(ids) - 1


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device")
def test_row_losses_on_cuda_are_the_cpu_ones(store_and_model, tmp_path):
    """The evaluate stage runs where the model is (activations.device): the same rows on CUDA, to fp32 rounding."""
    token_dir, model = store_and_model
    sequences, _ = encode_file(write_raw(tmp_path / "raw") / "question.train", read_store_meta(token_dir)["tokenizer"])
    on_cpu = row_losses(model, sequences, pad_id=0)
    on_cuda = row_losses(model.to("cuda"), sequences, pad_id=0)
    pd.testing.assert_frame_equal(on_cuda, on_cpu, rtol=1e-5)


def test_ce_without_eos_drops_one_token_and_its_loss_per_row() -> None:
    losses = {"nll": np.array([4.0, 7.0, 3.0]), "nll_eos": np.array([1.0, 0.5, 0.2]), "tokens": np.array([4, 6, 3])}
    summary = summarise_losses(pd.DataFrame(losses))
    assert summary["ce"] == pytest.approx(14 / 13) and summary["ce_no_eos"] == pytest.approx(12.3 / 10)
    assert summary["rows"] == 3 and summary["tokens"] == 13 and summary["se"] > 0


def test_clustered_standard_error_matches_repeated_samples() -> None:
    rng = np.random.default_rng(1)

    def draw(m: int) -> tuple[np.ndarray, np.ndarray]:
        tokens = rng.integers(5, 30, size=m)
        return rng.gamma(2.0, 0.5, size=m) * tokens, tokens

    estimates = [np.divide(*(x.sum() for x in draw(300))) for _ in range(2000)]
    _, se = clustered_ce(*draw(300))
    assert se == pytest.approx(np.std(estimates), rel=0.15)


def test_evaluate_files_names_each_set_and_counts_unknown_words(store_and_model, tmp_path):
    token_dir, model = store_and_model
    raw = write_raw(tmp_path / "raw")
    odd = tmp_path / "question.odd"
    odd.write_text("the zorblax does swim . decl\tthe zorblax does swim .\n"
                   "my newt doesn't swim . decl\tmy newt doesn't swim .\n")
    sets = evaluate_files(model, token_dir, {"test": raw / "question.test", "odd": odd})
    assert set(sets) == {"test", "odd"} and sets["test"]["rows"] == 2 and sets["odd"]["unknown_words"] == 2
    assert sets["test"]["unknown_words"] == 0
    assert sets["test"]["file"] == "question.test" and len(sets["test"]["sha256"]) == 64


def test_the_fresh_sample_shares_the_training_pools_distribution_and_not_its_draws(tmp_path):
    sizes = {"n_train": 300, "n_dev": 20, "n_test": 30}
    manifest = generate_fresh(tmp_path, n_fresh=200, seed=3, **sizes)
    fresh = read_qf(tmp_path / "question.fresh")
    assert len(fresh) == manifest["lines"] == 200 and manifest["pool_size"] == 350
    splits, _ = generate_splits(**sizes, n_gen=0, seed=3)
    assert "".join(splits["train"][:200]) != (tmp_path / "question.fresh").read_text()  # another pool
    again = generate_fresh(tmp_path / "again", n_fresh=200, seed=3, **sizes)
    assert again["sha256"] == manifest["sha256"]  # deterministic
    with pytest.raises(AssocmemError, match="fresh_sequences"):
        generate_fresh(tmp_path, n_fresh=351, seed=3, **sizes)
