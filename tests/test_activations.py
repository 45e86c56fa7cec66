import numpy as np
import pandas as pd
import torch
from helpers import make_token_dir

from assocmem.activations import dump_activations, sample_chunks
from assocmem.model import DecoderLM, ModelConfig
from assocmem.subsets import make_subset
from assocmem.tokenstore import TokenStore


def test_chunks_and_states_match_prefix_forward(tmp_path):
    token_dir = make_token_dir(tmp_path, repeat=3)
    store = TokenStore(token_dir, "train")
    torch.manual_seed(0)
    model = DecoderLM(ModelConfig(vocab_size=store.vocab_size, n_layer=2, d_model=16, n_head=2,
                                  d_ff=32, max_len=20)).eval()
    make_subset(token_dir, 0.25, out_dir=tmp_path / "subset")  # the first 6 of 24 training sequences
    meta = dump_activations(model, tmp_path / "subset", tmp_path / "acts", heldout_split=None, n_chunks=30,
                            chunk_len=1, layers="all", batch_size=7, seed=5)
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
