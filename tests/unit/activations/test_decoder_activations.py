"""Tests for assocmem.activations: the project's DecoderLM dumper, the train/held-out loop both dumpers share,
and the final norm recorded in meta.json."""

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import make_corpus_store, make_token_dir

from assocmem.activations import final_norm_affine, final_norm_record
from assocmem.activations.decoder import dump_decoder_activations, sample_chunks
from assocmem.activations.hf import dump_hf_activations
from assocmem.activations.hf_models import final_norm_module, load_causal_lm
from assocmem.activations.splits import dump_splits, plan_splits
from assocmem.corpus.bpe import get_tokenizer
from assocmem.errors import AssocmemError
from assocmem.io import read_json
from assocmem.model import DecoderLM, ModelConfig
from assocmem.subsets import make_subset
from assocmem.tokenstore import TokenStore

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
HF_SMALL = {"n_layer": 2, "n_embd": 32, "n_head": 2, "n_positions": 64, "bos_token_id": 0, "eos_token_id": 0}


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory):
    """A windows store with a train and a val split (val is its held-out role)."""
    root = tmp_path_factory.mktemp("corpus")
    rng = np.random.default_rng(0)
    docs = [" ".join(rng.choice(WORDS, size=40)) for _ in range(30)]
    tokenizer = get_tokenizer({"kind": "bytelevel_bpe", "path": str(root / "tok.json"), "vocab_size": 300},
                              train_texts=iter(docs))
    return make_corpus_store(root / "store", docs, tokenizer, splits=("train", "val"))


def tiny_decoder(vocab_size: int, bias: bool = True) -> DecoderLM:
    torch.manual_seed(0)
    return DecoderLM(ModelConfig(vocab_size=vocab_size, n_layer=2, d_model=16, n_head=2, d_ff=32, max_len=20,
                                 bias=bias)).eval()


def test_chunks_and_states_match_prefix_forward(tmp_path):
    token_dir = make_token_dir(tmp_path, repeat=3)
    store = TokenStore(token_dir, "train")
    model = tiny_decoder(store.vocab_size)
    make_subset(token_dir, 0.25, out_dir=tmp_path / "subset")  # the first 6 of 24 training sequences
    meta = dump_decoder_activations(model, tmp_path / "subset", tmp_path / "acts", heldout_split=None,
                                    n_chunks=30, chunk_len=1, layers="all", batch_size=7, seed=5)
    assert meta["heldout_split"] == "test"
    assert meta["layers"] == ["emb", "block1", "block2", "final_ln"]
    states = np.load(tmp_path / "acts" / "train.npy")
    index = pd.read_parquet(tmp_path / "acts" / "train.index.parquet")
    assert states.shape == (4, 30, 16)
    assert index["seq_row"].between(0, 5).all() and index["seq_row"].nunique() > 3
    for row in index.itertuples():
        prefix = torch.from_numpy(store.sequence(row.seq_row)[: row.position + 1])[None]
        _, hidden = model(prefix, return_hidden=True)
        expected = np.stack([h[0, -1].detach().numpy() for h in hidden])
        np.testing.assert_allclose(states[:, row.row], expected, atol=1e-5)
        assert row.next_token == store.sequence(row.seq_row)[row.position + 1]
    assert np.load(tmp_path / "acts" / "heldout.npy").shape == (4, 30, 16)


def test_chunk_sampling_is_deterministic(tmp_path):
    store = TokenStore(make_token_dir(tmp_path), "train")
    a = sample_chunks(store, np.arange(8), 50, seed=1)
    b = sample_chunks(store, np.arange(8), 50, seed=1)
    pd.testing.assert_frame_equal(a, b)
    lengths = store.lengths()[a["seq_row"]]
    assert (a["position"] < lengths - 1).all() and (a["position"] >= 0).all()


@pytest.mark.parametrize("which", ["full", "view"])
def test_chunk_next_token_is_the_sequence_token_after_the_chunk(tmp_path, which):
    """The next tokens, gathered at once (TokenStore.tokens_at), are each chunk's sequence read alone; on a subset
    view too, whose sequences are its parent's."""
    token_dir = make_token_dir(tmp_path / "full", repeat=5)
    if which == "view":
        make_subset(token_dir, 0.5, out_dir=tmp_path / "view")
    store = TokenStore(token_dir if which == "full" else tmp_path / "view", "train")
    chunks = sample_chunks(store, np.arange(len(store)), 200, seed=4)
    assert chunks["next_token"].dtype == np.int64
    expected = [store.sequence(r)[p + 1] for r, p in zip(chunks["seq_row"], chunks["position"], strict=True)]
    assert chunks["next_token"].tolist() == expected


def test_split_loop_seeds_stores_and_meta(tmp_path):
    token_dir = make_token_dir(tmp_path)
    calls = []

    def record_split(split):
        calls.append((split.name, split.store.split, split.seed))
        return {"rows": len(split.store)}

    def record_radius(split):
        calls.append(("radius", split.store.split, split.seed))
        return {"rows": 3}

    for heldout_split, expected in ((None, "test"), ("dev", "dev")):
        calls.clear()
        meta = dump_splits(plan_splits(token_dir, heldout_split, 7), tmp_path / "out", {"extra": 1}, record_split,
                           record_radius)
        assert calls == [("train", "train", 7), ("heldout", expected, 8), ("radius", "train", 7)]
        assert meta == {"extra": 1, "heldout_split": expected, "radius": {"rows": 3},
                        "splits": {"train": {"rows": 8}, "heldout": {"rows": 2}}}
        assert read_json(tmp_path / "out" / "meta.json") == meta


def test_both_dumpers_share_the_split_loop(corpus_dir, tmp_path):
    """Same seed, same store: the decoder and the HF dumper pick the same held-out split and the same chunks."""
    vocab = TokenStore(corpus_dir, "train").vocab_size
    n_chunks, chunk_len, seed = 9, 8, 4
    decoder = dump_decoder_activations(tiny_decoder(vocab), corpus_dir, tmp_path / "decoder", heldout_split=None,
                                       n_chunks=n_chunks, chunk_len=chunk_len, layers="last", batch_size=4,
                                       seed=seed)
    spec = {"config": {**HF_SMALL, "vocab_size": vocab}, "device": "cpu", "final_ln": True, "batch_size": 4}
    acts = {"n_chunks": n_chunks, "chunk_len": chunk_len, "layers": "last", "heldout_split": None}
    hf = dump_hf_activations(spec, acts, seed, corpus_dir, tmp_path / "hf")
    assert decoder["heldout_split"] == hf["heldout_split"] == "val"
    for split, store_split, split_seed in (("train", "train", seed), ("heldout", "val", seed + 1)):
        _, offsets = TokenStore(corpus_dir, store_split).random_chunks(n_chunks, chunk_len, split_seed)
        for out in ("decoder", "hf"):
            index = pd.read_parquet(tmp_path / out / f"{split}.index.parquet")
            assert index["offset"].tolist() == offsets.tolist()
        assert decoder["splits"][split]["distinct_chunks"] == hf["splits"][split]["distinct_chunks"]
    model, _ = load_causal_lm({"config": spec["config"], "seed": seed, "device": "cpu"})
    assert hf["final_norm"] == final_norm_record(final_norm_module(model))
    assert hf["sample_seed"] == seed  # the radius test tells replicate chunk samples apart by it
    assert read_json(tmp_path / "hf" / "meta.json") == hf


@pytest.mark.parametrize("bias", [True, False])
def test_final_norm_round_trips_through_meta_json(tmp_path, bias):
    token_dir = make_token_dir(tmp_path)
    model = tiny_decoder(TokenStore(token_dir, "train").vocab_size, bias=bias)
    with torch.no_grad():  # LayerNorm starts at ones and zeros: make every mantissa bit count
        model.ln_f.weight.copy_(torch.randn_like(model.ln_f.weight))
        if bias:
            model.ln_f.bias.copy_(torch.randn_like(model.ln_f.bias))
    dump_decoder_activations(model, token_dir, tmp_path / "acts", heldout_split=None, n_chunks=5, chunk_len=1,
                             layers="last", batch_size=5, seed=0)
    meta = read_json(tmp_path / "acts" / "meta.json")
    assert (meta["final_norm"]["bias"] is None) == (not bias)
    gain, shift = final_norm_affine(meta)
    assert gain.dtype == shift.dtype == np.float64
    assert np.array_equal(gain, model.ln_f.weight.detach().double().numpy())
    expected_shift = model.ln_f.bias.detach().double().numpy() if bias else np.zeros(16)
    assert np.array_equal(shift, expected_shift)


def test_no_final_norm_recorded():
    assert final_norm_record(None) is None
    assert final_norm_record(torch.nn.LayerNorm(4, elementwise_affine=False)) is None
    assert final_norm_affine({"final_norm": None}) is None
    assert final_norm_affine({}) is None  # a dump written before final_norm was recorded


def test_the_radius_sample_is_the_training_dumps_last_layer_unless_a_larger_one_is_asked(tmp_path):
    token_dir = make_token_dir(tmp_path, repeat=3)
    model = tiny_decoder(TokenStore(token_dir, "train").vocab_size)
    common = dict(heldout_split=None, n_chunks=30, chunk_len=1, layers="all", batch_size=7, seed=5)
    meta = dump_decoder_activations(model, token_dir, tmp_path / "same", checkpoint="best", **common)
    train, radius = np.load(tmp_path / "same" / "train.npy"), np.load(tmp_path / "same" / "radius.npy")
    assert radius.shape == (1, 30, 16) and np.array_equal(radius[0], train[-1])
    assert meta["radius"]["n_chunks"] == 30 and meta["radius"]["layer"] == "final_ln" and meta["checkpoint"] == "best"
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "same" / "radius.index.parquet"),
                                  pd.read_parquet(tmp_path / "same" / "train.index.parquet"))
    larger = dump_decoder_activations(model, token_dir, tmp_path / "larger", radius_chunks=80, **common)
    sample = np.load(tmp_path / "larger" / "radius.npy")
    index = pd.read_parquet(tmp_path / "larger" / "radius.index.parquet")
    assert sample.shape == (1, 80, 16) and larger["radius"]["n_chunks"] == 80 and larger["checkpoint"] == "final"
    store = TokenStore(token_dir, "train")
    for row in index.head(10).itertuples():  # the last layer's state at each chunk's end, like the training dump
        prefix = torch.from_numpy(store.sequence(row.seq_row)[: row.position + 1])[None]
        _, hidden = model(prefix, return_hidden=True)
        np.testing.assert_allclose(sample[0, row.row], hidden[-1][0, -1].detach().numpy(), atol=1e-5)


def test_a_diverged_model_is_refused_naming_its_file_and_nothing_is_written(tmp_path):
    token_dir = make_token_dir(tmp_path)
    model = tiny_decoder(TokenStore(token_dir, "train").vocab_size)
    with torch.no_grad():
        model.ln_f.weight[3] = float("nan")
    model_file = tmp_path / "train" / "tiny" / "pct100" / "best.pt"
    with pytest.raises(AssocmemError) as err:
        dump_decoder_activations(model, token_dir, tmp_path / "acts", heldout_split=None, n_chunks=5, chunk_len=1,
                                 layers="last", batch_size=5, seed=0, label="tiny/pct100", model_file=model_file)
    message = str(err.value)
    assert f"the train hidden states of model {model_file} (tiny/pct100): 5 of 80 values are not finite" in message
    assert "the model diverged" in message and "train.lr" in message
    assert not (tmp_path / "acts" / "train.npy").exists() and not (tmp_path / "acts" / "meta.json").exists()
