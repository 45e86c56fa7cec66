import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from assocmem.model import DecoderLM, ModelConfig, hidden_layer_names


def tiny(**kw) -> ModelConfig:
    base = dict(vocab_size=17, n_layer=2, d_model=16, n_head=2, d_ff=32, max_len=12)
    return ModelConfig(**{**base, **kw})


def test_shapes_and_hidden_states():
    torch.manual_seed(0)
    model = DecoderLM(tiny()).eval()
    idx = torch.randint(0, 17, (3, 9))
    logits, hidden = model(idx, return_hidden=True)
    assert logits.shape == (3, 9, 17)
    assert len(hidden) == len(hidden_layer_names(2)) == 4
    assert torch.allclose(model.head(hidden[-1])[..., :17], logits)  # the head holds the padded vocabulary
    assert torch.allclose(model.ln_f(hidden[-2]), hidden[-1])


@settings(max_examples=10, deadline=None)
@given(cut=st.integers(min_value=1, max_value=9))
def test_causality_prefix_states_equal_full_states(cut):
    torch.manual_seed(0)
    model = DecoderLM(tiny()).eval()
    idx = torch.randint(0, 17, (2, 10))
    _, full = model(idx, return_hidden=True)
    _, prefix = model(idx[:, :cut], return_hidden=True)
    for a, b in zip(full, prefix, strict=True):
        assert torch.allclose(a[:, :cut], b, atol=1e-5)


def test_tied_embeddings_count_once():
    tied, untied = DecoderLM(tiny()), DecoderLM(tiny(tie_embeddings=False))
    assert tied.head.weight is tied.tok_emb.weight
    assert untied.num_parameters() - tied.num_parameters() == 17 * 16


def test_param_count_formula():
    cfg = tiny()
    d, f, v, n = cfg.d_model, cfg.d_ff, cfg.vocab_size, cfg.n_layer
    per_block = 2 * 2 * d + (3 * d * d + 3 * d) + (d * d + d) + (d * f + f) + (f * d + d)
    expected = v * d + cfg.max_len * d + n * per_block + 2 * d
    assert DecoderLM(cfg).num_parameters() == expected


def test_bias_free_model_has_no_bias_tensors_and_counts_them_out():
    cfg = tiny(bias=False)
    model = DecoderLM(cfg)
    names = [name for name, _ in model.named_parameters()]
    assert not [name for name in names if name.endswith("bias")]
    assert len(names) == 2 + 6 * cfg.n_layer + 1  # embeddings, 6 weights per block, final LayerNorm
    d, f, v, n = cfg.d_model, cfg.d_ff, cfg.vocab_size, cfg.n_layer
    per_block = 2 * d + 3 * d * d + d * d + d * f + f * d
    assert model.num_parameters() == v * d + cfg.max_len * d + n * per_block + d


def test_bias_defaults_to_true_so_saved_configs_and_results_do_not_change():
    spec = {"n_layer": 2, "d_model": 16, "n_head": 2, "d_ff": 32}
    assert ModelConfig.from_dict(spec, vocab_size=17).bias is True
    assert ModelConfig.from_dict({**spec, "bias": False}, vocab_size=17).bias is False
    saved = tiny().to_dict()
    del saved["bias"]  # a model.pt written before the option existed
    assert ModelConfig(**saved) == tiny()
    torch.manual_seed(3)
    explicit = DecoderLM(tiny(bias=True)).state_dict()
    torch.manual_seed(3)
    default = DecoderLM(tiny()).state_dict()
    assert list(explicit) == list(default) and all(torch.equal(explicit[k], default[k]) for k in explicit)


@settings(max_examples=5, deadline=None)
@given(cut=st.integers(min_value=1, max_value=9))
def test_bias_free_model_is_causal(cut):
    torch.manual_seed(1)
    model = DecoderLM(tiny(bias=False)).eval()
    idx = torch.randint(0, 17, (2, 10))
    _, full = model(idx, return_hidden=True)
    _, prefix = model(idx[:, :cut], return_hidden=True)
    for a, b in zip(full, prefix, strict=True):
        assert torch.allclose(a[:, :cut], b, atol=1e-5)
