"""A plain nanoGPT-style training loop: the oracle that the project's trainer (assocmem.train.TrainJob) must agree
with, and the baseline that benchmarks/bench_train.py times it against.

Written from scratch in the standard nanoGPT formulation (fp32, SDPA attention, AdamW with decay on the >= 2-D
tensors, warmup + cosine learning rate, gradient clipping), with no project code in the loop: it imports neither
the trainer nor the model. Seeded alike, both sides draw the same random windows of the synthetic token stream
and start from the same weights, so their per-step losses must agree.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

# nanoGPT's defaults; TrainSettings takes the same names, so both sides run with **HYPER
HYPER = {"lr": 6e-4, "min_lr_ratio": 0.1, "warmup_steps": 10, "weight_decay": 0.1, "beta1": 0.9, "beta2": 0.95,
         "grad_clip": 1.0}

Batch = tuple[torch.Tensor, torch.Tensor]


class RandomTokens:
    """A synthetic token stream with nanoGPT's window sampler (the project's store interface)."""

    def __init__(self, vocab: int, n_tokens: int, seed: int) -> None:
        self.tokens = np.random.default_rng(seed).integers(0, vocab, size=n_tokens, dtype=np.int64)

    def sample_windows(self, rng: np.random.Generator, batch_size: int, block: int) -> tuple[np.ndarray, np.ndarray]:
        offsets = rng.integers(0, len(self.tokens) - block, size=batch_size)
        rows = np.stack([self.tokens[o:o + block + 1] for o in offsets])
        return rows[:, :-1].copy(), rows[:, 1:].copy()


class SelfAttention(nn.Module):
    def __init__(self, d: int, n_head: int, bias: bool) -> None:
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(d, 3 * d, bias=bias)
        self.c_proj = nn.Linear(d, d, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.n_head, d // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, d))


class GPTBlock(nn.Module):
    def __init__(self, d: int, n_head: int, bias: bool) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(d, bias=bias)
        self.attn = SelfAttention(d, n_head, bias)
        self.ln_2 = nn.LayerNorm(d, bias=bias)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d, bias=bias), nn.GELU(), nn.Linear(4 * d, d, bias=bias))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """nanoGPT's model: learned positions, pre-LN blocks, tied unembedding, GPT-2 initialisation.

    It creates its modules in the project's order (DecoderLM's), so that from the same torch seed both sides start
    from the same weights."""

    def __init__(self, vocab: int, block: int, n_layer: int, n_head: int, d: int, bias: bool) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(block, d)
        self.h = nn.ModuleList(GPTBlock(d, n_head, bias) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d, bias=bias)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def cosine_lr(step: int, max_steps: int, hyper: dict) -> float:
    lr, warmup = hyper["lr"], hyper["warmup_steps"]
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, max_steps - warmup))
    floor = lr * hyper["min_lr_ratio"]
    return floor + 0.5 * (lr - floor) * (1 + math.cos(math.pi * progress))


def next_token_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    logits = model(x)
    return F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))


def reference_train(model: nn.Module, get_batch: Callable[[int], Batch], steps: int, hyper: dict,
                    on_step: Callable[[int], object] | None = None, *,
                    optimizer: torch.optim.Optimizer | None = None,
                    loss_of: Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor] = next_token_loss,
                    ) -> list[float]:
    """The standard loop; returns the loss of every step (read once at the end: no host sync per step).
    ``optimizer`` (default: AdamW with decay on the >= 2-D tensors) and ``loss_of`` let another model's own pieces
    run in the same loop (benchmarks/bench_train.py: real nanoGPT's configure_optimizers and forward)."""
    if optimizer is None:
        decay = [p for p in model.parameters() if p.dim() >= 2]
        no_decay = [p for p in model.parameters() if p.dim() < 2]
        optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": hyper["weight_decay"]},
                                       {"params": no_decay, "weight_decay": 0.0}],
                                      lr=hyper["lr"], betas=(hyper["beta1"], hyper["beta2"]))
    losses = []
    model.train()
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = cosine_lr(step, steps, hyper)
        x, y = get_batch(step)
        loss = loss_of(model, x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), hyper["grad_clip"])
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.detach())
        if on_step is not None:
            on_step(step)
    return [float(v) for v in losses]


def window_batches(store: RandomTokens, batch: int, block: int, seed: int) -> Callable[[int], Batch]:
    """Step -> (inputs, targets), drawn as the project's WindowBatches draws them (one generator per step)."""

    def get_batch(step: int) -> Batch:
        x, y = store.sample_windows(np.random.default_rng([seed, step]), batch, block)
        return torch.from_numpy(x), torch.from_numpy(y)

    return get_batch


def route_linears_to_onednn(model: nn.Module) -> None:
    """The reference model with every nn.Linear computed by assocmem.gemm.onednn_linear (nothing else changes):
    the one opt-in piece of project code here, the GEMM library alone."""
    from assocmem.gemm import onednn_linear

    for module in model.modules():
        if isinstance(module, nn.Linear):
            module.forward = lambda x, m=module: onednn_linear(x, m.weight, m.bias)
