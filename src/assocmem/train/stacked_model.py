"""K same-shape :class:`~assocmem.model.DecoderLM` replicas as one module with batched products (issue 41).

Every parameter carries a leading replica axis; the Linear layers are batched products (``bmm``/``baddbmm``), the
LayerNorms scale and shift per replica, the token embedding is one gather into the stacked table with per-replica
offsets, and attention runs on the replicas' sequences as one batch (B*K rows through
``scaled_dot_product_attention``: no ``vmap``, whose SDPA backward fails on CUDA). Replica i computes what
``DecoderLM`` computes with replica i's weights, up to fp32 rounding (other summation orders).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional as F

from assocmem.errors import AssocmemError
from assocmem.model import DecoderLM
from assocmem.stopping import IGNORE


def _key(name: str) -> str:
    return name.replace(".", "__")  # ParameterDict keys may not hold dots


class StackedDecoder(nn.Module):
    """The replicas' parameters stacked (``DecoderLM.named_parameters`` order; a tied head is the token table)."""

    def __init__(self, models: Sequence[DecoderLM]) -> None:
        super().__init__()
        cfg = models[0].cfg
        if any(m.cfg != cfg for m in models):
            raise AssocmemError("stacked replicas need one model shape: the replicas' model configs differ")
        if cfg.dropout:
            raise AssocmemError(f"stacked replicas train without dropout (model dropout {cfg.dropout}): dropout's "
                                "random draws of a single run cannot be reproduced per replica")
        self.cfg, self.replicas = cfg, len(models)
        self.names = [name for name, _ in models[0].named_parameters()]
        per_model = [dict(m.named_parameters()) for m in models]
        self.stacked = nn.ParameterDict({
            _key(name): nn.Parameter(torch.stack([p[name].detach() for p in per_model])) for name in self.names})
        # decay follows make_optimizer's rule on the single model's tensors (a stacked bias is 2-D)
        self.decayed = {name for name, p in models[0].named_parameters() if p.dim() >= 2}

    def param(self, name: str) -> torch.Tensor:
        return self.stacked[_key(name)]

    def named_stacked(self) -> list[tuple[str, nn.Parameter]]:
        return [(name, self.stacked[_key(name)]) for name in self.names]

    @torch.no_grad()
    def export(self, replica: int, model: DecoderLM) -> DecoderLM:
        """Copy replica ``replica``'s weights into ``model`` (a DecoderLM of the same config) and return it."""
        for name, p in model.named_parameters():
            p.copy_(self.param(name)[replica])
        return model

    def _linear(self, x: torch.Tensor, prefix: str) -> torch.Tensor:
        weight = self.param(f"{prefix}.weight").transpose(1, 2)
        if f"{prefix}.bias" not in self.names:
            return torch.bmm(x, weight)
        return torch.baddbmm(self.param(f"{prefix}.bias").unsqueeze(1), x, weight)

    def _norm(self, x: torch.Tensor, prefix: str) -> torch.Tensor:
        out = F.layer_norm(x, x.shape[-1:]) * self.param(f"{prefix}.weight").unsqueeze(1)
        return out + self.param(f"{prefix}.bias").unsqueeze(1) if f"{prefix}.bias" in self.names else out

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Logits (K, B*T, V) over the real vocabulary of token ids ``idx`` (K, B, T): replica k reads ``idx[k]``."""
        replicas, batch, length = idx.shape
        width, heads = self.cfg.d_model, self.cfg.n_head
        if length > self.cfg.max_len:
            raise ValueError(f"sequence length {length} exceeds model max_len {self.cfg.max_len}")
        table = self.param("tok_emb.weight")  # (K, V, d)
        offsets = torch.arange(replicas, device=idx.device).view(-1, 1, 1) * table.shape[1]
        x = F.embedding(idx + offsets, table.reshape(-1, width)) + self.param("pos_emb.weight")[:, None, :length]
        x = x.reshape(replicas, batch * length, width)
        for i in range(self.cfg.n_layer):
            block = f"blocks.{i}"
            q, k, v = self._linear(self._norm(x, f"{block}.ln1"), f"{block}.attn.qkv").split(width, dim=2)
            shape = (replicas * batch, length, heads, width // heads)
            q, k, v = (t.reshape(shape).transpose(1, 2) for t in (q, k, v))
            att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self._linear(att.transpose(1, 2).reshape(replicas, batch * length, width), f"{block}.attn.proj")
            x = x + self._linear(F.gelu(self._linear(self._norm(x, f"{block}.ln2"), f"{block}.ff.0")), f"{block}.ff.2")
        x = self._norm(x, "ln_f")
        head = table if self.cfg.tie_embeddings else self.param("head.weight")
        # the real vocabulary's rows only: a model's padding rows (assocmem.model.padded_vocab) are never predicted
        return torch.bmm(x, head[:, :self.cfg.vocab_size].transpose(1, 2))

    def summed_nll(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return summed_nll(self, idx, targets)


def summed_nll(stack: nn.Module, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per-replica summed next-token cross-entropy (K,) in nats over the non-padding targets (K, B, T); ``stack``:
    a :class:`StackedDecoder` or its ``torch.compile`` (whose attributes are the uncompiled module's)."""
    logits = stack(idx)
    nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1),
                          ignore_index=IGNORE, reduction="none")
    return nll.view(idx.shape[0], -1).sum(dim=1)


def stacked_optimizer(stack: StackedDecoder, weight_decay: float, lr: float, betas: tuple[float, float],
                      device: torch.device) -> torch.optim.AdamW:
    """``make_optimizer``'s AdamW over the stacked tensors: AdamW is elementwise, so one optimizer over stacked
    tensors is K independent ones while the replicas share lr, betas and eps (per-replica lr: :func:`rescale_step`)."""
    decay = [p for name, p in stack.named_stacked() if name in stack.decayed]
    no_decay = [p for name, p in stack.named_stacked() if name not in stack.decayed]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, fused=device.type in ("cuda", "cpu"))


def per_replica(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``values`` (K,) shaped to scale ``like`` (K, ...) replica by replica."""
    return values.view(-1, *([1] * (like.dim() - 1)))


@torch.no_grad()
def clip_and_mask(stack: StackedDecoder, max_norms: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
    """``clip_grad_norm_`` per replica (each over its own slices; ``max_norms`` <= 0: no clipping), and zero
    gradients for the replicas not ``active``. Returns the per-replica gradient norms before clipping."""
    grads = [p.grad for _, p in stack.named_stacked() if p.grad is not None]
    per_tensor = torch.stack([torch.linalg.vector_norm(g.reshape(g.shape[0], -1), dim=1) for g in grads])
    norms = torch.linalg.vector_norm(per_tensor, dim=0)
    coef = torch.clamp(max_norms / (norms + 1e-6), max=1.0)
    scale = torch.where(max_norms > 0, coef, torch.ones_like(coef)) * active
    for g in grads:
        g.mul_(per_replica(scale.to(g.dtype), g))
    return norms


def optimizer_step(optimizer: torch.optim.Optimizer, stack: StackedDecoder, lrs: list[float]) -> None:
    """One AdamW step in which replica k moves with learning rate ``lrs[k]`` (0: frozen, its weights unchanged).

    AdamW's change of a weight is linear in lr (decoupled decay and the Adam update both scale with it), so the
    step runs at the largest lr and each replica's change is scaled by lrs[k] / max: exact where the ratio is 1
    (the common case: no copy at all) or 0 (``lerp`` returns the old weight bit for bit)."""
    top = max(lrs)
    for group in optimizer.param_groups:
        group["lr"] = top
    if top == 0 or all(lr == top for lr in lrs):
        optimizer.step()
        return
    params = [p for _, p in stack.named_stacked()]
    before = [p.detach().clone() for p in params]
    optimizer.step()
    back = (1 - torch.tensor(lrs, dtype=torch.float64) / top).to(params[0].device, params[0].dtype)  # one copy
    with torch.no_grad():
        for p, old in zip(params, before, strict=True):
            p.lerp_(old, per_replica(back, p))
