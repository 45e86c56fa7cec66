"""assocmem.gemm: oneDNN linear products agree with F.linear (values and all gradients), and the model and
trainer route through the backend the config picks."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn import functional as F

from assocmem import gemm
from assocmem.model import DecoderLM, Linear, ModelConfig

pytestmark = pytest.mark.skipif(not gemm.onednn_available(), reason="this torch build has no oneDNN")


def _grads(fn, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, seed: int):
    leaves = [t.detach().clone().requires_grad_() for t in (x, w, *([b] if b is not None else []))]
    out = fn(leaves[0], leaves[1], leaves[2] if b is not None else None)
    out.backward(torch.randn(out.shape, generator=torch.Generator().manual_seed(seed)))
    return out.detach(), [leaf.grad for leaf in leaves]


@settings(max_examples=25, deadline=None)
@given(lead=st.lists(st.integers(1, 40), min_size=1, max_size=2), k=st.integers(1, 96), n=st.integers(1, 96),
       bias=st.booleans(), seed=st.integers(0, 2**16))
def test_onednn_linear_matches_f_linear_with_gradients(lead: list[int], k: int, n: int, bias: bool,
                                                       seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    x, w = torch.randn(*lead, k, generator=g), torch.randn(n, k, generator=g)
    b = torch.randn(n, generator=g) if bias else None
    ref_out, ref_grads = _grads(F.linear, x, w, b, seed)
    out, grads = _grads(gemm._OneDnnLinear.apply, x, w, b, seed)  # oneDNN however small the product
    assert out.shape == ref_out.shape
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-5 * k)
    for got, want in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * max(k, n, x.numel() // k))


def test_onednn_linear_takes_transposed_operands_and_is_deterministic() -> None:
    x = torch.randn(300, 256)
    w_t = torch.randn(256, 200)  # the weight as a transposed view: no copy needed
    first = gemm.onednn_linear(x, w_t.t())
    torch.testing.assert_close(first, x @ w_t, rtol=1e-5, atol=1e-4)
    assert torch.equal(first, gemm.onednn_linear(x, w_t.t()))


def test_small_products_and_other_dtypes_stay_on_f_linear(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    monkeypatch.setattr(gemm._OneDnnLinear, "apply", lambda *a: calls.append(a) or F.linear(*a))
    gemm.onednn_linear(torch.randn(4, 8), torch.randn(8, 8))  # 256 multiply-adds
    gemm.onednn_linear(torch.randn(512, 512, dtype=torch.float64), torch.randn(512, 512, dtype=torch.float64))
    assert not calls
    gemm.onednn_linear(torch.randn(512, 64), torch.randn(64, 64))  # exactly 2^21
    assert len(calls) == 1


def test_resolve_gemm() -> None:
    cpu = torch.device("cpu")
    assert gemm.resolve_gemm("auto", cpu) == "onednn"
    assert gemm.resolve_gemm("native", cpu) == "native"
    assert gemm.resolve_gemm("onednn", cpu) == "onednn"
    assert gemm.resolve_gemm("auto", torch.device("cuda")) == "native"
    with pytest.raises(ValueError, match="train.gemm: onednn needs a CPU run"):
        gemm.resolve_gemm("onednn", torch.device("cuda"))
    with pytest.raises(ValueError, match="'mkl' is not one of auto, native, onednn"):
        gemm.resolve_gemm("mkl", cpu)


def test_resolve_gemm_auto_falls_back_without_onednn(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gemm, "onednn_available", lambda: False)
    assert gemm.resolve_gemm("auto", torch.device("cpu")) == "native"
    with pytest.raises(ValueError, match="oneDNN available: False"):
        gemm.resolve_gemm("onednn", torch.device("cpu"))


def test_model_backends_share_weights_and_agree() -> None:
    cfg = ModelConfig(vocab_size=512, n_layer=2, d_model=128, n_head=4, d_ff=512, max_len=32)
    torch.manual_seed(0)
    native = DecoderLM(cfg)
    onednn = DecoderLM(cfg).set_gemm("onednn")
    onednn.load_state_dict(native.state_dict())
    assert native.state_dict().keys() == onednn.state_dict().keys()
    assert {m.gemm for m in onednn.modules() if isinstance(m, Linear)} == {"onednn"}
    assert isinstance(onednn.head, torch.nn.Linear) and onednn.head.weight is onednn.tok_emb.weight
    idx = torch.randint(0, 512, (16, 32))
    for model in (native, onednn):
        F.cross_entropy(model(idx).flatten(0, 1), idx.flatten()).backward()
    torch.testing.assert_close(onednn(idx), native(idx), rtol=1e-4, atol=1e-5)
    for (name, p), q in zip(native.named_parameters(), onednn.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-6, msg=name)
