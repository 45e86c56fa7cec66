"""Parameter counts: exact decoder counts, the paper's App. D approximation N ~= A l d_emb^2, and N vs D^2.

Exact count for a pre-LN decoder (GPT-2 layout): token embedding V*d, learned positions T*d, per block
2 LayerNorms (2*2d), fused qkv (3d^2 + 3d), output projection (d^2 + d), FF in (d*d_ff + d_ff) and out
(d_ff*d + d), a final LayerNorm (2d), and an untied bias-free head (V*d) unless tied to the embedding.
"""

from __future__ import annotations

from dataclasses import dataclass

from assocmem.errors import AssocmemError


@dataclass(frozen=True)
class DecoderConfig:
    vocab: int
    n_ctx: int
    d: int
    n_layer: int
    d_ff: int
    tied: bool = True


GPT2_SMALL = DecoderConfig(vocab=50257, n_ctx=1024, d=768, n_layer=12, d_ff=3072)
GPT2_MEDIUM = DecoderConfig(vocab=50257, n_ctx=1024, d=1024, n_layer=24, d_ff=4096)
GPT2_SMALL_HF_COUNT = 124_439_808
GPT2_MEDIUM_HF_COUNT = 354_823_168

# Table 3 of v2 (App. F.3): transformer parameters N and the selected data size D* (tokens), with the
# printed ratio N / D*^2 in units of 1e-10.
PAPER_TABLE3 = (
    {"n_params": 39.95e6, "d_star": 214.18e6, "printed_ratio_e10": 8.71},
    {"n_params": 60.26e6, "d_star": 261.78e6, "printed_ratio_e10": 8.79},
    {"n_params": 80.20e6, "d_star": 309.37e6, "printed_ratio_e10": 8.38},
)


def block_params(d: int, d_ff: int, bias: bool = True, ln_bias: bool = True) -> int:
    """Parameters of one pre-LN transformer block."""
    ln = 2 * (d + (d if ln_bias else 0))
    attention = 3 * d * d + d * d + (4 * d if bias else 0)
    feed_forward = 2 * d * d_ff + ((d_ff + d) if bias else 0)
    return ln + attention + feed_forward


def count_decoder_params(vocab: int, n_ctx: int, d: int, n_layer: int, d_ff: int, tied: bool,
                         bias: bool = True, ln_bias: bool = True) -> dict[str, int]:
    """Exact parameter count by component; ``total`` matches HF's num_parameters() for GPT-2."""
    for name, value in {"vocab": vocab, "n_ctx": n_ctx, "d": d, "n_layer": n_layer, "d_ff": d_ff}.items():
        if value <= 0:
            raise AssocmemError(f"{name} must be positive, got {value}")
    parts = {
        "token_embedding": vocab * d,
        "position_embedding": n_ctx * d,
        "blocks": n_layer * block_params(d, d_ff, bias, ln_bias),
        "final_ln": d + (d if ln_bias else 0),
        "head": 0 if tied else vocab * d,
    }
    parts["attention_and_ff"] = n_layer * (4 * d * d + 2 * d * d_ff + ((4 * d + d_ff + d) if bias else 0))
    summed = ("token_embedding", "position_embedding", "blocks", "final_ln", "head")
    parts["total"] = sum(parts[k] for k in summed)
    return parts


def count_config(config: DecoderConfig) -> dict[str, int]:
    return count_decoder_params(config.vocab, config.n_ctx, config.d, config.n_layer, config.d_ff,
                                config.tied)


def paper_appendix_terms(d: int, n_layer: int, d_ff: int | None = None) -> dict[str, float]:
    """The three terms printed in App. D (App. E in arXiv v2) for GPT-2 medium and the implied A = N / (l d^2).

    Printed: attention 3 l d^2, 'dense weights and layer normalization' l (d^2 + 2d), feed-forward
    l (2 d d_ff + d + d_ff) with d_ff = 3072 called '3 d_emb' (GPT-2 medium actually has d_ff = 4096 = 4 d).
    """
    d_ff = 3 * d if d_ff is None else d_ff
    attention = 3 * n_layer * d * d
    dense_ln = n_layer * (d * d + 2 * d)
    feed_forward = n_layer * (2 * d * d_ff + d + d_ff)
    total = attention + dense_ln + feed_forward
    return {"attention": attention, "dense_ln": dense_ln, "feed_forward": feed_forward, "total": total,
            "A": total / (n_layer * d * d)}


def a_constant(n_params: float, n_layer: int, d: int) -> float:
    """A in N ~= A l d_emb^2 (eq. 2)."""
    return n_params / (n_layer * d * d)


def n_over_d_squared(n_params: float, n_tokens: float) -> float:
    """N / D^2, the ratio Sec. 5 says should be constant at the optimum."""
    if n_tokens <= 0:
        raise AssocmemError(f"n_tokens must be positive, got {n_tokens}")
    return n_params / (n_tokens * n_tokens)
