"""assocmem.footprint: a job's memory, estimated before it allocates, and the one-line refusal (issue 39)."""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from assocmem import footprint
from assocmem.activations.decoder import check_decoder_activations_memory, layer_selection
from assocmem.errors import AssocmemError
from assocmem.footprint import (
    activations_bytes,
    check_neighbours_memory,
    check_training_memory,
    model_shape,
    neighbours_bytes,
    parameter_count,
    training_bytes,
)
from assocmem.model import DecoderLM, ModelConfig
from assocmem.tokenstore import FORMAT, FORMAT_VERSION

TRAIN = {"batch_size": 8, "micro_batch_size": None, "block_size": 64, "device": "cpu"}
QF_STORE = {"batching": "sequences", "vocab_size": 80}


@settings(max_examples=8, deadline=None)
@given(n_layer=st.integers(1, 2), d_model=st.sampled_from([8, 16]), d_ff=st.sampled_from([None, 24]),
       tie=st.booleans(), bias=st.booleans(), vocab=st.integers(5, 40))
def test_the_parameter_count_is_the_models(n_layer, d_model, d_ff, tie, bias, vocab):
    spec = {"n_layer": n_layer, "d_model": d_model, "n_head": 2, "d_ff": d_ff, "max_len": 16, "tie_embeddings": tie,
            "bias": bias}
    model = DecoderLM(ModelConfig.from_dict(spec, vocab_size=vocab))
    assert parameter_count(model_shape(spec, vocab, 0)) == model.num_parameters()


def test_the_estimate_grows_with_the_model_and_the_batch():
    shape = model_shape({"n_layer": 2, "d_model": 64, "n_head": 2}, 100, 32)
    assert 16 * parameter_count(shape) < training_bytes(shape, 1, 32) < training_bytes(shape, 8, 32)


def test_a_model_too_large_for_the_machine_is_refused_before_it_allocates():
    """`d_model: 1048576` tried to allocate 13 TB and died in a traceback; now one line with the estimate and the
    machine's memory."""
    spec = {"n_layer": 4, "d_model": 1048576, "n_head": 4, "max_len": 64}
    with pytest.raises(AssocmemError) as err:
        check_training_memory(TRAIN, spec, QF_STORE, "qf/tiny/pct100")
    total = psutil.virtual_memory().total / (1 << 30)
    message = str(err.value)
    assert message.startswith("training job qf/tiny/pct100 (5.28e+13 parameters, micro-batch 8 x 64 tokens) needs at "
                              "least ") and f"more than this machine's memory ({total:.3g} GiB)" in message
    assert "\n" not in message
    check_training_memory(TRAIN, {"n_layer": 4, "d_model": 64, "n_head": 4}, QF_STORE, "qf/tiny/pct100")


GIB = 1 << 30
NEIGHBOURS = {"k": 10, "fractions": [0.25, 0.5, 0.75, 1.0], "radius_sample_max": 80000}


def acts_meta(n_train: int, n_heldout: int, n_radius: int, dim: int, n_layers: int) -> dict:
    """An activation dump's meta.json, as far as the neighbours job reads it before loading."""
    return {"layers": [f"block{i}" for i in range(n_layers)], "d_model": dim, "radius": {"n_chunks": n_radius},
            "splits": {"train": {"n_chunks": n_train}, "heldout": {"n_chunks": n_heldout}}}


def store_meta(store_dir: Path, batching: str) -> Path:
    """A token store's meta.json, as far as the activations job reads it before it dumps."""
    (store_dir / "meta.json").write_text(json.dumps({"format": FORMAT, "format_version": FORMAT_VERSION,
                                                     "batching": batching}))
    return store_dir


def fake_memory(monkeypatch, total: int) -> None:
    monkeypatch.setattr(footprint, "machine_memory", lambda device="cpu": (total, "this machine's memory"))


@settings(max_examples=6, deadline=None)
@given(n=st.integers(100, 10**6), m=st.integers(1, 10**5), dim=st.integers(8, 4096), layers=st.integers(1, 12),
       k=st.integers(1, 50))
def test_the_neighbours_estimate_grows_with_rows_dims_layers_and_k(n, m, dim, layers, k):
    cfg = {**NEIGHBOURS, "k": k}
    base = neighbours_bytes(n, m, n, dim, layers, cfg)
    assert base >= 4 * dim * layers * (n + m)  # at least the activations it reads
    assert neighbours_bytes(2 * n, m, n, dim, layers, cfg) > base
    assert neighbours_bytes(n, 2 * m, n, dim, layers, cfg) > base
    assert neighbours_bytes(n, m, n, 2 * dim, layers, cfg) > base
    assert neighbours_bytes(n, m, n, dim, layers + 1, cfg) > base
    assert neighbours_bytes(n, m, n, dim, layers, {**cfg, "k": k + 1}) > base
    # the database and its copies scale with the dimension: doubling it nearly doubles a large-d estimate
    assert neighbours_bytes(n, m, n, 2 * dim, layers, cfg) - base >= 4 * dim * (layers + 3) * (n + m)


@settings(max_examples=6, deadline=None)
@given(chunks=st.integers(10, 10**5), batch=st.integers(1, 2000), d_model=st.sampled_from([16, 64, 512]))
def test_the_activations_estimate_grows_with_chunks_batch_and_width(chunks, batch, d_model):
    shape = model_shape({"n_layer": 2, "d_model": d_model, "n_head": 2}, 80, 64)
    acts = {"n_chunks": chunks, "batch_size": batch, "radius_chunks": None}
    model, host = activations_bytes(shape, acts, 4, 64)
    assert host == 4 * 4 * chunks * d_model  # four dumped layers of float32 states
    assert model > 4 * parameter_count(shape) + 4 * (2 + 2) * batch * 64 * d_model  # weights, every hidden state
    bigger = activations_bytes(shape, {**acts, "n_chunks": 2 * chunks, "batch_size": batch + 1}, 4, 64)
    assert bigger[0] > model and bigger[1] == 2 * host
    assert activations_bytes(shape, {**acts, "radius_chunks": 10 * chunks}, 1, 64)[1] == 40 * chunks * d_model


def test_a_neighbours_job_too_large_for_the_machine_is_refused_in_one_line(monkeypatch):
    fake_memory(monkeypatch, 2 * GIB)
    meta = acts_meta(2_000_000, 100_000, 100_000, 1024, 10)
    with pytest.raises(AssocmemError) as err:
        check_neighbours_memory(meta, NEIGHBOURS, "cpu", "results/qf/activations/L4/pct100")
    message = str(err.value)
    assert message.startswith("neighbours job results/qf/activations/L4/pct100 (10 layers x 2000000 + 100000 rows "
                              "x d=1024) needs at least ") and "more than this machine's memory (2 GiB)" in message
    assert "\n" not in message and "activations.n_chunks" in message


def test_an_activations_job_too_large_for_the_machine_is_refused_in_one_line(monkeypatch, tmp_path):
    fake_memory(monkeypatch, 2 * GIB)
    shape = model_shape({"n_layer": 4, "d_model": 1024, "n_head": 8}, 50257, 1024)
    acts = {"n_chunks": 200_000, "chunk_len": 1024, "layers": "all", "batch_size": 8, "radius_chunks": None}
    with pytest.raises(AssocmemError) as err:
        check_decoder_activations_memory(shape, acts, store_meta(tmp_path, "windows"), "cpu", "qf L4/pct100")
    message = str(err.value)
    assert message.startswith("activations job qf L4/pct100 (6 layers x 200000 chunks x d=1024, batch 8 x 1024 "
                              "tokens) needs at least ") and "more than this machine's memory (2 GiB)" in message
    assert "\n" not in message


def test_the_default_configs_jobs_pass_well_under_24_gib(monkeypatch, tmp_path):
    """config/config.yaml's activations and neighbours jobs (every model, its largest dump) on a 24 GiB machine."""
    from assocmem.config import load_config, load_schema

    fake_memory(monkeypatch, 24 * GIB)
    root = Path(__file__).parents[3]
    config = load_config(root / "config" / "config.yaml", load_schema(root / "workflow" / "schemas" /
                                                                      "config.schema.yaml"))
    store = store_meta(tmp_path, "sequences")
    for name, exp in config["experiments"].items():
        acts = exp["activations"]
        for label, spec in exp["models"].items():
            shape = model_shape(spec, 100, 0)
            n_dumped = len(layer_selection(shape.n_layer, acts["layers"]))
            check_decoder_activations_memory(shape, acts, store, "cpu", f"{name} {label}")
            assert sum(activations_bytes(shape, acts, n_dumped, shape.max_len)) < GIB
            meta = acts_meta(acts["n_chunks"], acts["n_chunks"], acts["radius_chunks"] or acts["n_chunks"],
                             shape.d_model, n_dumped)
            check_neighbours_memory(meta, exp["neighbours"], "cpu", f"{name} {label}")
            assert neighbours_bytes(acts["n_chunks"], acts["n_chunks"], meta["radius"]["n_chunks"], shape.d_model,
                                    n_dumped, exp["neighbours"]) < 4 * GIB


def test_the_neighbours_stage_refuses_before_it_loads_an_array(monkeypatch, tmp_path):
    """Only meta.json is there: the refusal comes from it, before any activation file is opened."""
    from assocmem.stages import neighbours

    fake_memory(monkeypatch, GIB)
    (tmp_path / "meta.json").write_text(json.dumps(acts_meta(500_000, 50_000, 100_000, 1024, 6)))
    params = {"neighbours": {**NEIGHBOURS, "device": "cpu", "cpu_engine": "faiss", "method": "exact"}, "seed": 0,
              "threads": 1}
    with pytest.raises(AssocmemError, match=r"^neighbours job .* needs at least .* more than this machine's memory"):
        neighbours(params, tmp_path, tmp_path / "out")
