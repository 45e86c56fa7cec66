"""benchmarks/profile_step.py (issue 40, item 5): the products' FLOPs it divides by are those torch's own FLOP
counter counts for the step's Linear products, its op groups are the ones it names, and it runs on the config."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from helpers import ROOT
from torch.utils.flop_counter import FlopCounterMode

from assocmem.model import DecoderLM, ModelConfig
from assocmem.train.loss import step_loss

BENCHMARKS = ROOT / "benchmarks"


@pytest.fixture
def profile_step(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import profile_step

    return profile_step


@pytest.mark.parametrize(("vocab", "n_layer", "d_model", "d_ff", "rows"), [(72, 4, 64, 256, (32, 36)),
                                                                          (37, 2, 16, 48, (3, 5))])
def test_product_flops_are_the_counted_linear_products(profile_step, vocab, n_layer, d_model, d_ff, rows) -> None:
    cfg = ModelConfig(vocab_size=vocab, n_layer=n_layer, d_model=d_model, n_head=4, d_ff=d_ff, max_len=64)
    model, tokens = DecoderLM(cfg), torch.randint(0, vocab, rows)
    with FlopCounterMode(display=False) as counter:
        loss, _ = step_loss(model, tokens, tokens, 1, tokens.numel())
        loss.backward()
    counted = counter.get_flop_counts()["Global"]
    linear = sum(flops for op, flops in counted.items() if "mm" in str(op) and "bmm" not in str(op))
    assert profile_step.product_flops(cfg, tokens.numel()) == linear


def test_ops_fall_in_the_groups_named(profile_step) -> None:
    expect = {"aten::mm": "products", "aten::addmm": "products", "aten::_scaled_dot_product_flash_attention_for_cpu":
              "attention", "aten::gelu_backward": "GELU", "aten::native_layer_norm_backward": "LayerNorm",
              "aten::_log_softmax": "loss", "aten::_fused_adamw_": "optimizer", "aten::copy_": "other",
              "aten::mm_foo": "other"}
    assert {op: profile_step.group_of(op) for op in expect} == expect


def test_it_profiles_the_default_configs_step() -> None:
    out = subprocess.run([sys.executable, str(BENCHMARKS / "profile_step.py"), "--model", "L2", "--steps", "2",
                          "--width", "8"], capture_output=True, text=True, check=True, timeout=300).stdout
    assert "qf/L2: batch 32 x 8 tokens" in out
    for group in ("products", "attention", "GELU", "LayerNorm", "loss", "optimizer", "other"):
        assert f"\n{group} " in out
    assert "GFLOP/s in the step against a peak of" in out
