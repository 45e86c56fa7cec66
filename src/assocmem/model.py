"""A plain pre-LN decoder-only transformer (GPT-2 layout) with learned positions.

``forward(idx, return_hidden=True)`` also returns the residual stream after the embedding and after every
block, plus the final-LayerNorm output that feeds the unembedding: these are the "activations" whose
nearest-neighbour geometry the paper studies.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch.nn import functional as F

from assocmem.gemm import GemmBackend, onednn_linear
from assocmem.layout import FINAL_NORM_LAYER

# The token embedding and unembedding hold this many rows at least, rounded up (nanoGPT's 50,304 for GPT-2's 50,257):
# products whose width is a multiple of 64 run on the GPU's fast paths. The extra rows are internal: logits, the
# state dict (model files, checkpoints) and the parameter count keep the real vocabulary.
VOCAB_MULTIPLE = 64


def padded_vocab(vocab_size: int, multiple: int = VOCAB_MULTIPLE) -> int:
    return -(-vocab_size // multiple) * multiple


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    n_layer: int
    d_model: int
    n_head: int
    d_ff: int
    max_len: int
    tie_embeddings: bool = True
    dropout: float = 0.0
    bias: bool = True  # biases in the Linear and LayerNorm layers (False: nanoGPT's faster bias-free variant)

    @classmethod
    def from_dict(cls, spec: dict, vocab_size: int) -> ModelConfig:
        d_ff = spec.get("d_ff") or 4 * spec["d_model"]
        return cls(vocab_size=vocab_size, n_layer=spec["n_layer"], d_model=spec["d_model"],
                   n_head=spec["n_head"], d_ff=d_ff, max_len=spec.get("max_len", 64),
                   tie_embeddings=spec.get("tie_embeddings", True), dropout=spec.get("dropout", 0.0),
                   bias=spec.get("bias", True))

    def to_dict(self) -> dict:
        return asdict(self)


class Linear(nn.Linear):
    """``nn.Linear`` (same parameters and state dict) whose products run on the backend set by
    ``DecoderLM.set_gemm``: ``native`` is ``F.linear``; ``onednn`` is ``assocmem.gemm.onednn_linear``."""

    gemm: GemmBackend = "native"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.product(x, self.weight, self.bias)

    def product(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        if self.gemm == "onednn":
            return onednn_linear(x, weight, bias)
        return F.linear(x, weight, bias)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.qkv = Linear(cfg.d_model, 3 * cfg.d_model, bias=cfg.bias)
        self.proj = Linear(cfg.d_model, cfg.d_model, bias=cfg.bias)
        self.dropout = cfg.dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=2)
        shape = (batch, length, self.n_head, width // self.n_head)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        out = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0
        )
        return self.proj(out.transpose(1, 2).reshape(batch, length, width))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model, bias=cfg.bias)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model, bias=cfg.bias)
        self.ff = nn.Sequential(
            Linear(cfg.d_model, cfg.d_ff, bias=cfg.bias), nn.GELU(), Linear(cfg.d_ff, cfg.d_model, bias=cfg.bias)
        )
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop(self.attn(self.ln1(x)))
        return x + self.drop(self.ff(self.ln2(x)))


class DecoderLM(nn.Module):
    def __init__(self, cfg: ModelConfig, vocab_multiple: int = VOCAB_MULTIPLE) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.max_len, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model, bias=cfg.bias)
        self.head = Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.head.weight = self.tok_emb.weight
        self.apply(self._init_weights)
        for name, param in self.named_parameters():
            if name.endswith("proj.weight") or name.endswith("ff.2.weight"):
                nn.init.normal_(param, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))
        self._pad_vocab(padded_vocab(cfg.vocab_size, vocab_multiple) - cfg.vocab_size)

    def _pad_vocab(self, rows: int) -> None:
        """Append ``rows`` zero rows to the embedding and unembedding, after initialisation: the real rows draw the
        same random numbers as an unpadded model's, and every later parameter too."""
        self.vocab_pad = rows
        if rows == 0:
            return
        self.tok_emb.weight = nn.Parameter(F.pad(self.tok_emb.weight.detach(), (0, 0, 0, rows)))
        head = self.tok_emb.weight if self.cfg.tie_embeddings else F.pad(self.head.weight.detach(), (0, 0, 0, rows))
        self.head.weight = head if isinstance(head, nn.Parameter) else nn.Parameter(head)
        mask = torch.zeros(self.cfg.vocab_size + rows)
        mask[self.cfg.vocab_size:] = float("-inf")
        self.register_buffer("logit_mask", mask, persistent=False)  # added in the product: no pass over the logits
        self._register_state_dict_hook(_real_vocab_state)
        self._register_load_state_dict_pre_hook(self._pad_loaded_state)

    def _pad_loaded_state(self, state: dict[str, torch.Tensor], prefix: str, *args: object) -> None:
        """A real-vocabulary state dict (as saved) gets its padding rows back, zero (they are never read)."""
        for name in (f"{prefix}tok_emb.weight", f"{prefix}head.weight"):
            if name in state and state[name].shape[0] == self.cfg.vocab_size:
                state[name] = F.pad(state[name], (0, 0, 0, self.vocab_pad))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def set_gemm(self, backend: GemmBackend) -> DecoderLM:
        """Route every Linear (the unembedding included) through ``backend``; the weights are untouched."""
        for module in self.modules():
            if isinstance(module, Linear):
                module.gemm = backend
        return self

    def num_parameters(self) -> int:
        """Unique parameters (a tied head counts once)."""
        padding = self.vocab_pad * self.cfg.d_model * (1 if self.cfg.tie_embeddings else 2)
        return sum(p.numel() for p in self.parameters()) - padding

    def forward(
        self, idx: torch.Tensor, return_hidden: bool = False, padded: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, list[torch.Tensor]]:
        """Next-token logits over the real vocabulary; ``padded``: over the padded one (contiguous, for the loss),
        the padding columns -inf, so they are never predicted and take no probability."""
        length = idx.shape[1]
        if length > self.cfg.max_len:
            raise ValueError(f"sequence length {length} exceeds model max_len {self.cfg.max_len}")
        positions = torch.arange(length, device=idx.device)
        x = self.drop(self.tok_emb(idx) + self.pos_emb(positions))
        hidden = [x]
        for block in self.blocks:
            x = block(x)
            hidden.append(x)
        x = self.ln_f(x)
        logits = self._unembed(x, padded)
        if return_hidden:
            return logits, [*hidden, x]
        return logits

    def _unembed(self, x: torch.Tensor, padded: bool) -> torch.Tensor:
        if not self.vocab_pad:
            return self.head(x)
        if padded:
            return self.head.product(x, self.head.weight, self.logit_mask)
        return self.head.product(x, self.head.weight[:self.cfg.vocab_size], None)  # the first rows: no copy


def _real_vocab_state(module: DecoderLM, state: dict[str, torch.Tensor], prefix: str, *args: object) -> None:
    """The state dict of a padded model as an unpadded one's: the real vocabulary's rows only."""
    for name in (f"{prefix}tok_emb.weight", f"{prefix}head.weight"):
        if name in state:
            state[name] = state[name][:module.cfg.vocab_size].clone()  # a view would save the padded storage


def hidden_layer_names(n_layer: int) -> list[str]:
    """Names of the states returned by ``forward(return_hidden=True)``, in order."""
    return ["emb", *[f"block{i}" for i in range(1, n_layer + 1)], FINAL_NORM_LAYER]


def flops_per_token(cfg: ModelConfig, seq_len: int, n_params: int) -> float:
    """Training FLOPs per token: 6N for the dense weights plus attention scores (PaLM appendix B)."""
    return 6.0 * n_params + 12.0 * cfg.n_layer * cfg.d_model * seq_len
