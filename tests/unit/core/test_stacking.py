"""Which runs the workflow stacks (assocmem.stacking, ``train.stack_replicas``): the plan-time parameter count is the
model's, ``auto`` stacks only within the measured range, and a model that cannot stack is refused by ``true``."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from assocmem.errors import AssocmemError
from assocmem.stacking import body_parameters, stacked_models

EMBEDDINGS = ("tok_emb.", "pos_emb.", "head.")


@settings(max_examples=8, deadline=None)
@given(n_layer=st.integers(1, 3), heads=st.integers(1, 3), head_dim=st.integers(1, 8),
       d_ff=st.one_of(st.none(), st.integers(1, 40)), bias=st.booleans(), tied=st.booleans())
def test_body_parameters_are_the_models_parameters_but_its_token_position_and_output_tables(
        n_layer, heads, head_dim, d_ff, bias, tied):
    from assocmem.model import DecoderLM, ModelConfig

    spec = {"n_layer": n_layer, "n_head": heads, "d_model": heads * head_dim, "d_ff": d_ff, "bias": bias,
            "tie_embeddings": tied, "max_len": 9}
    model = DecoderLM(ModelConfig.from_dict(spec, vocab_size=11))
    expected = sum(p.numel() for name, p in model.named_parameters() if not name.startswith(EMBEDDINGS))
    assert body_parameters(spec) == expected


def grid(models: dict, seeds: int = 3, **train) -> dict:
    base = {"batch_size": 64, "block_size": 256, "device": "auto", "gpus": 0, "gemm": "auto",
            "stack_replicas": "auto"}
    return {"models": models, "train": {**base, **train}, "sweep": {"seeds": seeds}}


M7 = {"n_layer": 2, "d_model": 48, "n_head": 4, "max_len": 9}  # memorisation.yaml's largest, the largest measured
WIDER = {"n_layer": 2, "d_model": 56, "n_head": 4, "max_len": 9}


def test_auto_stacks_on_the_cpu_only_within_the_measured_range():
    assert stacked_models(grid({"M7": M7, "W": WIDER})) == ["M7"]  # larger than measured: not stacked
    assert stacked_models(grid({"M7": M7}, seeds=2)) == []  # K = 2: not measured on the CPU
    assert stacked_models(grid({"M7": M7}, batch_size=128)) == []  # more tokens a step than measured
    assert stacked_models(grid({"M7": dict(M7, max_len=16)}, micro_batch_size=32)) == ["M7"]
    assert stacked_models(grid({"M7": M7, "W": WIDER}, seeds=2, device="cuda")) == ["M7", "W"]
    assert stacked_models({**grid({"M7": M7}), "sweep": None}) == []  # one seed: nothing to stack
    assert stacked_models(grid({"M7": M7, "W": WIDER}, stack_replicas=False)) == []
    assert stacked_models(grid({"M7": M7, "W": WIDER}, seeds=2, stack_replicas=True)) == ["M7", "W"]


def test_auto_leaves_out_and_true_refuses_what_the_stacked_trainer_cannot_train():
    models = {"M7": M7, "D": dict(M7, dropout=0.1)}
    assert stacked_models(grid(models)) == ["M7"]
    assert stacked_models(grid({"M7": M7}, gpus=2, device="cuda")) == []
    with pytest.raises(AssocmemError, match=r"experiments\.memo\.train\.stack_replicas: true, but model D .*dropout"):
        stacked_models(grid(models, stack_replicas=True), "memo")
