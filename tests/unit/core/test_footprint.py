"""assocmem.footprint: a job's memory, estimated before it allocates, and the one-line refusal (issue 39)."""

from __future__ import annotations

import psutil
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from assocmem.errors import AssocmemError
from assocmem.footprint import check_training_memory, model_shape, parameter_count, training_bytes
from assocmem.model import DecoderLM, ModelConfig

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
