"""Tests for assocmem.activations.hf and .hf_models on random-init GPT-2 models (CPU, no downloads)."""

from __future__ import annotations

import json
import socket

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from assocmem.activations import final_norm_affine, final_norm_record
from assocmem.activations.hf import _iter_batches, dump_hf_chunk_activations, output_paths
from assocmem.activations.hf_models import final_norm_module, load_causal_lm, resolve_layers
from assocmem.errors import AssocmemError

SMALL = {"n_layer": 2, "n_embd": 32, "n_head": 2, "vocab_size": 100, "n_positions": 64,
         "bos_token_id": 0, "eos_token_id": 0}
GPT2_MEDIUM = {"n_layer": 24, "n_embd": 1024, "n_head": 16, "vocab_size": 50257, "n_positions": 1024}
N_CHUNKS, CHUNK_LEN = 11, 16


@pytest.fixture(scope="module")
def small():
    model, info = load_causal_lm({"config": SMALL, "seed": 0, "device": "cpu"})
    return model, info


@pytest.fixture(scope="module")
def chunks() -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.integers(0, SMALL["vocab_size"], size=(N_CHUNKS, CHUNK_LEN), dtype=np.int64)


def reference_states(model, chunks: np.ndarray) -> dict[str, np.ndarray]:
    """One chunk at a time through the full LM, with our own hook on the last block (no shared code)."""
    block_out: list[torch.Tensor] = []
    handle = model.transformer.h[-1].register_forward_hook(
        lambda _m, _a, out: block_out.append((out[0] if isinstance(out, tuple) else out)[0, -1].clone())
    )
    hidden: list[list[torch.Tensor]] = []
    try:
        with torch.no_grad():
            for row in chunks:
                out = model(torch.from_numpy(row)[None], output_hidden_states=True)
                hidden.append([h[0, -1] for h in out.hidden_states])
    finally:
        handle.remove()
    return {
        "hidden": torch.stack([torch.stack(h) for h in hidden], dim=1).numpy(),  # (L+1, n, d)
        "last_block": torch.stack(block_out).numpy(),
    }


def test_load_from_config_is_seeded_and_leaves_global_rng(small):
    model, info = small
    state = torch.random.get_rng_state()
    again, _ = load_causal_lm({"config": SMALL, "seed": 0, "device": "cpu"})
    other, _ = load_causal_lm({"config": SMALL, "seed": 1, "device": "cpu"})
    assert torch.equal(torch.random.get_rng_state(), state)
    weight = model.transformer.h[0].attn.c_attn.weight
    assert torch.equal(again.transformer.h[0].attn.c_attn.weight, weight)
    assert not torch.equal(other.transformer.h[0].attn.c_attn.weight, weight)
    assert not model.training
    assert info["n_layer"] == 2 and info["d_model"] == 32 and info["n_positions"] == 64
    assert info["n_params"] == model.num_parameters() and info["dtype"] == "float32"


def test_hf_hidden_state_convention(small, chunks):
    """hidden_states[-1] is after ln_f; hidden_states[-2] is the input of the last block, not its output."""
    model, _ = small
    ref = reference_states(model, chunks)
    ln_f = final_norm_module(model)
    assert ln_f is model.transformer.ln_f
    with torch.no_grad():
        after_ln = ln_f(torch.from_numpy(ref["last_block"])).numpy()
    np.testing.assert_allclose(ref["hidden"][-1], after_ln, atol=1e-5)
    assert np.abs(ref["hidden"][-2] - ref["last_block"]).max() > 1e-2


def test_final_norm_record_round_trips_exactly():
    model, _ = load_causal_lm({"config": SMALL, "seed": 0, "device": "cpu"})
    ln_f = final_norm_module(model)
    with torch.no_grad():  # GPT-2 initialises ln_f to ones and zeros: make every mantissa bit count
        ln_f.weight.copy_(torch.randn_like(ln_f.weight))
        ln_f.bias.copy_(torch.randn_like(ln_f.bias))
    record = json.loads(json.dumps(final_norm_record(ln_f)))
    gain, bias = final_norm_affine({"final_norm": record})
    assert gain.dtype == np.float64 and np.array_equal(gain, ln_f.weight.detach().double().numpy())
    assert np.array_equal(bias, ln_f.bias.detach().double().numpy())


@pytest.mark.parametrize("final_ln", [True, False])
def test_last_layer_matches_plain_forward(small, chunks, tmp_path, final_ln):
    model, _ = small
    ref = reference_states(model, chunks)
    result = dump_hf_chunk_activations(model, chunks, tmp_path / "acts.npy", final_ln=final_ln, batch_size=4,
                                       progress=False)
    acts = np.load(tmp_path / "acts.npy")
    assert acts.shape == (1, N_CHUNKS, 32) and acts.dtype == np.float32
    expected = ref["hidden"][-1] if final_ln else ref["last_block"]
    np.testing.assert_allclose(acts[0], expected, atol=1e-5)
    assert result["shape"] == [1, N_CHUNKS, 32] and result["layers"] == [2]
    assert result["chunks_this_run"] == N_CHUNKS and result["chunks_per_s"] > 0
    assert result["tokens_per_s"] == pytest.approx(result["chunks_per_s"] * CHUNK_LEN)


def test_final_ln_true_and_false_differ_exactly_by_ln_f(small, chunks, tmp_path):
    model, _ = small
    post = dump_hf_chunk_activations(model, chunks, tmp_path / "post.npy", final_ln=True, progress=False)
    pre = dump_hf_chunk_activations(model, chunks, tmp_path / "pre.npy", final_ln=False, progress=False)
    assert post["signature"] != pre["signature"]
    post_acts, pre_acts = np.load(tmp_path / "post.npy")[0], np.load(tmp_path / "pre.npy")[0]
    with torch.no_grad():
        normed = model.transformer.ln_f(torch.from_numpy(pre_acts)).numpy()
    np.testing.assert_allclose(post_acts, normed, atol=1e-5)
    assert np.abs(post_acts - pre_acts).max() > 1e-2


@pytest.mark.parametrize("final_ln", [True, False])
def test_all_layers(small, chunks, tmp_path, final_ln):
    model, _ = small
    ref = reference_states(model, chunks)
    result = dump_hf_chunk_activations(model, chunks, tmp_path / "acts.npy", layers="all", final_ln=final_ln,
                                       batch_size=5, progress=False)
    acts = np.load(tmp_path / "acts.npy")
    assert acts.shape == (3, N_CHUNKS, 32) and result["layers"] == [0, 1, 2]
    np.testing.assert_allclose(acts[:2], ref["hidden"][:2], atol=1e-5)
    np.testing.assert_allclose(acts[2], ref["hidden"][2] if final_ln else ref["last_block"], atol=1e-5)


def test_layer_list_and_torch_input(small, chunks, tmp_path):
    model, _ = small
    ref = reference_states(model, chunks)
    dump_hf_chunk_activations(model, torch.from_numpy(chunks), tmp_path / "acts.npy", layers=[-1, 0], progress=False)
    acts = np.load(tmp_path / "acts.npy")
    assert acts.shape == (2, N_CHUNKS, 32)
    np.testing.assert_allclose(acts, ref["hidden"][[0, 2]], atol=1e-5)


class Kill(RuntimeError):
    pass


def kill_after(model, n_calls: int):
    """Raise from inside the forward pass on call n_calls + 1 of the first block."""
    calls = {"n": 0}

    def hook(_module, _args):
        calls["n"] += 1
        if calls["n"] > n_calls:
            raise Kill(f"simulated kill in forward call {calls['n']}")

    return model.transformer.h[0].register_forward_pre_hook(hook)


@pytest.mark.parametrize("as_iterable", [False, True])
def test_resume_after_kill_is_identical(small, chunks, tmp_path, as_iterable):
    model, _ = small
    batch = 3

    def source():
        # Batches of uneven sizes, unrelated to batch_size, when testing the iterable path.
        return [chunks[:2], chunks[2:7], chunks[7:]] if as_iterable else chunks

    whole = dump_hf_chunk_activations(model, source(), tmp_path / "whole.npy", batch_size=batch, progress=False)
    paths = output_paths(tmp_path / "acts.npy")
    handle = kill_after(model, 2)
    try:
        with pytest.raises(Kill):
            dump_hf_chunk_activations(model, source(), paths["npy"], batch_size=batch, progress=False)
    finally:
        handle.remove()
    assert not paths["npy"].exists() and paths["partial"].exists()
    assert json.loads(paths["progress"].read_text())["done"] == 2 * batch
    resumed = dump_hf_chunk_activations(model, source(), paths["npy"], batch_size=batch, progress=False)
    assert resumed["resumed_from"] == 2 * batch and resumed["chunks_this_run"] == N_CHUNKS - 2 * batch
    assert np.array_equal(np.load(paths["npy"]), np.load(tmp_path / "whole.npy"))
    assert not paths["partial"].exists() and not paths["progress"].exists()
    assert whole["resumed_from"] == 0


def test_resume_with_other_settings_starts_over(small, chunks, tmp_path):
    model, _ = small
    paths = output_paths(tmp_path / "acts.npy")
    handle = kill_after(model, 1)
    try:
        with pytest.raises(Kill):
            dump_hf_chunk_activations(model, chunks, paths["npy"], batch_size=4, final_ln=False, progress=False)
    finally:
        handle.remove()
    result = dump_hf_chunk_activations(model, chunks, paths["npy"], batch_size=4, final_ln=True, progress=False)
    assert result["resumed_from"] == 0 and result["final_ln"] is True
    reference = dump_hf_chunk_activations(model, chunks, tmp_path / "ref.npy", batch_size=4, progress=False)
    assert np.array_equal(np.load(paths["npy"]), np.load(reference["out_path"]))


def test_finished_output_is_reused_and_index_written(small, chunks, tmp_path):
    model, _ = small
    ids = np.arange(100, 100 + N_CHUNKS)
    offsets = np.arange(N_CHUNKS) * 1000
    first = dump_hf_chunk_activations(model, chunks, tmp_path / "acts.npy", chunk_ids=ids, offsets=offsets,
                                      progress=False)
    again = dump_hf_chunk_activations(model, chunks, tmp_path / "acts.npy", chunk_ids=ids, offsets=offsets,
                                      progress=False)
    assert again["skipped"] is True and first["skipped"] is False
    index = pd.read_parquet(tmp_path / "acts.index.parquet")
    assert list(index.columns) == ["row", "chunk_id", "offset"]
    assert index["row"].tolist() == list(range(N_CHUNKS))
    assert index["chunk_id"].tolist() == ids.tolist() and index["offset"].tolist() == offsets.tolist()
    meta = json.loads((tmp_path / "acts.meta.json").read_text())
    assert meta["shape"] == [1, N_CHUNKS, 32] and meta["signature"] == first["signature"]
    rerun = dump_hf_chunk_activations(model, chunks, tmp_path / "acts.npy", resume=False, progress=False)
    assert rerun["skipped"] is False
    assert pd.read_parquet(tmp_path / "acts.index.parquet").columns.tolist() == ["row", "chunk_id"]


def test_bfloat16_dump_is_close_to_float32(chunks, tmp_path):
    model, _ = load_causal_lm({"config": SMALL, "seed": 0, "device": "cpu"})
    ref = dump_hf_chunk_activations(model, chunks, tmp_path / "f32.npy", progress=False)
    low = dump_hf_chunk_activations(model, chunks, tmp_path / "bf16.npy", dtype="bfloat16", progress=False)
    assert low["dtype"] == "bfloat16" and next(model.parameters()).dtype == torch.bfloat16
    a, b = np.load(ref["out_path"]), np.load(low["out_path"])
    assert b.dtype == np.float32
    # bf16 keeps 8 mantissa bits; LayerNorm outputs are O(1), so errors of a few 1e-2 are expected.
    assert np.abs(a - b).max() < 0.25 and not np.array_equal(a, b)


def test_input_validation(small, chunks, tmp_path):
    model, _ = small
    out = tmp_path / "acts.npy"
    with pytest.raises(AssocmemError, match="outside the vocabulary"):
        dump_hf_chunk_activations(model, chunks + 100, out, progress=False)
    with pytest.raises(AssocmemError, match="chunk length 65"):
        dump_hf_chunk_activations(model, np.zeros((2, 65), dtype=np.int64), out, progress=False)
    with pytest.raises(AssocmemError, match="2-D integer"):
        dump_hf_chunk_activations(model, chunks.astype(np.float32), out, progress=False)
    with pytest.raises(AssocmemError, match="n_chunks"):
        dump_hf_chunk_activations(model, iter([chunks]), out, progress=False)
    with pytest.raises(AssocmemError, match="'layers'"):
        dump_hf_chunk_activations(model, chunks, out, layers=[3], progress=False)
    with pytest.raises(AssocmemError, match="'chunk_ids'"):
        dump_hf_chunk_activations(model, chunks, out, chunk_ids=[1, 2], progress=False)
    with pytest.raises(AssocmemError, match="got 4 chunks but n_chunks=5"):
        dump_hf_chunk_activations(model, iter([chunks[:4]]), out, n_chunks=5, progress=False)
    assert not out.exists()


def test_load_spec_errors():
    with pytest.raises(AssocmemError, match="exactly one"):
        load_causal_lm({"name": "gpt2", "config": SMALL})
    with pytest.raises(AssocmemError, match="'dtype'"):
        load_causal_lm({"config": SMALL, "dtype": "float64"})


def test_missing_model_offline_names_model_and_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    connections = []
    monkeypatch.setattr(socket.socket, "connect", lambda sock, address: connections.append(address))
    with pytest.raises(AssocmemError) as err:
        load_causal_lm({"name": "gpt2-medium", "cache_dir": str(tmp_path / "empty-cache"), "device": "cpu"})
    message = str(err.value)
    assert "'gpt2-medium'" in message and "HF_HUB_OFFLINE" in message and "HF_HOME" in message
    assert "local directory" in message and "local_files_only=True" in message
    assert connections == []  # answered from the (empty) cache alone: no network attempt, no wait


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 7), min_size=0, max_size=6),
    start_frac=st.floats(0, 1),
    batch_size=st.integers(1, 5),
)
def test_iter_batches_rebatches_any_split(sizes, start_frac, batch_size):
    total = sum(sizes)
    data = np.arange(total * 2, dtype=np.int64).reshape(total, 2)
    start = int(start_frac * total)
    bounds = np.cumsum([0, *sizes])
    pieces = [data[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    for source in (data, pieces):
        got = list(_iter_batches(source, start, batch_size))
        firsts = [first for first, _ in got]
        assert firsts == list(range(start, total, batch_size))
        assert all(len(b) == batch_size for _, b in got[:-1])
        joined = np.concatenate([b for _, b in got]) if got else np.zeros((0, 2), dtype=np.int64)
        assert np.array_equal(joined, data[start:])


@given(n_layer=st.integers(1, 30), picks=st.lists(st.integers(-31, 30), min_size=1, max_size=6))
def test_resolve_layers(n_layer, picks):
    assert resolve_layers("last", n_layer) == [n_layer]
    assert resolve_layers("all", n_layer) == list(range(n_layer + 1))
    if all(-(n_layer + 1) <= p <= n_layer for p in picks):
        resolved = resolve_layers(picks, n_layer)
        assert resolved == sorted({p % (n_layer + 1) for p in picks})
    else:
        with pytest.raises(AssocmemError, match="'layers'"):
            resolve_layers(picks, n_layer)


def test_gpt2_medium_shape(tmp_path):
    """The real gpt2-medium architecture, random init: parameter count and a 4 x 256-token dump."""
    model, info = load_causal_lm({"config": GPT2_MEDIUM, "seed": 0, "device": "cpu"})
    assert model.num_parameters() == 354_823_168 and info["n_params"] == 354_823_168
    assert info["n_layer"] == 24 and info["d_model"] == 1024 and info["n_positions"] == 1024
    tokens = np.random.default_rng(1).integers(0, 50257, size=(4, 256), dtype=np.int64)
    result = dump_hf_chunk_activations(model, tokens, tmp_path / "acts.npy", batch_size=2, progress=False)
    acts = np.load(tmp_path / "acts.npy")
    assert acts.shape == (1, 4, 1024) and np.isfinite(acts).all()
    with torch.no_grad():
        plain = model(torch.from_numpy(tokens[:1]), output_hidden_states=True).hidden_states[-1][0, -1]
    np.testing.assert_allclose(acts[0, 0], plain.numpy(), atol=1e-5)
    assert result["chunks_per_s"] > 0


def test_non_finite_states_are_refused_naming_the_model(chunks, tmp_path):
    model, _ = load_causal_lm({"config": SMALL, "seed": 0, "device": "cpu"})
    with torch.no_grad():
        model.transformer.ln_f.weight[0] = float("nan")
    out = tmp_path / "acts.npy"
    with pytest.raises(AssocmemError) as err:
        dump_hf_chunk_activations(model, chunks, out, batch_size=4, progress=False)
    message = str(err.value)
    assert "hidden states of model random-init:gpt2 on chunk rows 0..3: 4 of 128 values are not finite" in message
    assert "overflows in float32" in message
    assert not out.exists()
