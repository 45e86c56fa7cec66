"""Stacked replicas: does training R same-shape models as one batched model pay on this machine? (issue 27)

A memorisation grid or a scaling sweep trains several seeds of each model size; each is its own job today. Stacking
them (every parameter with a leading replica axis, batched products, one AdamW over the stacked tensors, gradient
clipping per replica) turns R small steps into one step with R-times-larger products, which pays where a step is
dominated by per-operation overhead rather than arithmetic. This script measures that, before anything is built:
one step of R replicas stacked against R sequential steps of the product's model (fused AdamW, as the trainer runs
it), at the shapes of the memorisation grid's smallest, middle and largest models and the default's two, in rounds
of rotating order, 1 thread (the pipeline's ``threads_per_job``). It also checks that replica i of the stacked run
follows the sequential run of the same seed (the lever would have to be faithful to be worth building).

    python benchmarks/bench_replicas.py --quick
    python benchmarks/bench_replicas.py --rounds 5 --replicas 3
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
from torch.nn import functional as F

from assocmem.model import DecoderLM, ModelConfig

SHAPES = {  # name: (model spec, vocabulary, sequence length, batch) as the configs train them
    "M0": ({"n_layer": 1, "d_model": 6, "n_head": 1, "d_ff": 24}, 37, 8, 64),
    "M3": ({"n_layer": 1, "d_model": 16, "n_head": 2, "d_ff": 64}, 37, 8, 64),
    "M7": ({"n_layer": 2, "d_model": 48, "n_head": 4, "d_ff": 192}, 37, 8, 64),
    "L2": ({"n_layer": 2, "d_model": 64, "n_head": 4, "d_ff": 256}, 100, 30, 32),
    "L4": ({"n_layer": 4, "d_model": 64, "n_head": 4, "d_ff": 256}, 100, 30, 32),
}
LR, BETAS, DECAY, CLIP = 3e-3, (0.9, 0.95), 0.0, 1.0


def models(name: str, replicas: int) -> list[DecoderLM]:
    spec, vocab, length, _ = SHAPES[name]
    out = []
    for seed in range(replicas):
        torch.manual_seed(seed)
        out.append(DecoderLM(ModelConfig(vocab_size=vocab, max_len=length, **spec)))
    return out


def batches(name: str, replicas: int, steps: int) -> torch.Tensor:
    """(steps, replicas, batch, length + 1) token ids: each replica its own batches."""
    _, vocab, length, batch = SHAPES[name]
    return torch.from_numpy(np.random.default_rng(0).integers(0, vocab, size=(steps, replicas, batch, length + 1)))


def loss_of(model: torch.nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    logits = model(tokens[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


class Sequential:
    """R independent models, one fused AdamW each: R jobs' steps, one after another."""

    def __init__(self, name: str, replicas: int) -> None:
        self.models = models(name, replicas)
        self.optimizers = [torch.optim.AdamW(m.parameters(), lr=LR, betas=BETAS, weight_decay=DECAY, fused=True)
                           for m in self.models]

    def step(self, tokens: torch.Tensor) -> list[float]:
        losses = []
        for model, optimizer, batch in zip(self.models, self.optimizers, tokens, strict=True):
            loss = loss_of(model, batch)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.detach())
        return [float(v) for v in losses]


class Stacked:
    """The same R models as one: every parameter stacked on a leading replica axis, every Linear a batched product
    (``baddbmm``), attention on the replicas' sequences as one batch, per-replica gradient clipping, one AdamW.
    (``torch.func.vmap`` over the module was tried first: SDPA has no batching rule on the CPU, so vmap falls back
    to a Python loop over the replicas and runs slower than the sequential steps.)"""

    def __init__(self, name: str, replicas: int) -> None:
        originals = models(name, replicas)
        self.cfg = originals[0].cfg
        names = [key for key, _ in originals[0].named_parameters()]
        self.p = {key: torch.stack([dict(m.named_parameters())[key].detach() for m in originals]).requires_grad_(True)
                  for key in names}
        self.optimizer = torch.optim.AdamW(self.p.values(), lr=LR, betas=BETAS, weight_decay=DECAY, fused=True)

    def linear(self, x: torch.Tensor, key: str) -> torch.Tensor:
        weight, bias = self.p[f"{key}.weight"], self.p.get(f"{key}.bias")
        if bias is None:
            return torch.bmm(x, weight.transpose(1, 2))
        return torch.baddbmm(bias[:, None, :], x, weight.transpose(1, 2))

    def norm(self, x: torch.Tensor, key: str) -> torch.Tensor:
        out = F.layer_norm(x, x.shape[-1:]) * self.p[f"{key}.weight"][:, None, :]
        bias = self.p.get(f"{key}.bias")
        return out if bias is None else out + bias[:, None, :]

    def losses(self, tokens: torch.Tensor) -> torch.Tensor:
        """Per-replica mean next-token CE of (replicas, batch, length + 1) tokens."""
        replicas, batch, width = tokens.shape
        length, d, heads = width - 1, self.cfg.d_model, self.cfg.n_head
        idx = tokens[:, :, :-1]
        emb = self.p["tok_emb.weight"]
        x = emb[torch.arange(replicas)[:, None, None], idx] + self.p["pos_emb.weight"][:, None, :length]
        x = x.reshape(replicas, batch * length, d)
        for i in range(self.cfg.n_layer):
            block = f"blocks.{i}"
            q, k, v = self.linear(self.norm(x, f"{block}.ln1"), f"{block}.attn.qkv").split(d, dim=2)
            q, k, v = (t.reshape(replicas * batch, length, heads, d // heads).transpose(1, 2) for t in (q, k, v))
            att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.linear(att.transpose(1, 2).reshape(replicas, batch * length, d), f"{block}.attn.proj")
            h = F.gelu(self.linear(self.norm(x, f"{block}.ln2"), f"{block}.ff.0"))
            x = x + self.linear(h, f"{block}.ff.2")
        logits = torch.bmm(self.norm(x, "ln_f"), emb.transpose(1, 2))  # the tied head
        nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, :, 1:].reshape(-1), reduction="none")
        return nll.view(replicas, -1).mean(dim=1)

    def step(self, tokens: torch.Tensor) -> list[float]:
        losses = self.losses(tokens)
        losses.sum().backward()  # the replicas share no parameter: each gets its own loss's gradient
        grads = [value.grad for value in self.p.values()]
        norms = torch.sqrt(sum(g.reshape(g.shape[0], -1).pow(2).sum(1) for g in grads))
        scale = torch.clamp(CLIP / (norms + 1e-6), max=1.0)
        for g in grads:
            g.mul_(scale.view(-1, *([1] * (g.dim() - 1))))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return losses.detach().tolist()


def faithful(name: str, replicas: int, steps: int) -> float:
    """Largest relative gap between the stacked and the sequential losses over ``steps`` steps."""
    data = batches(name, replicas, steps)
    a, b = Sequential(name, replicas), Stacked(name, replicas)
    gap = 0.0
    for tokens in data:
        x, y = np.array(a.step(tokens)), np.array(b.step(tokens))
        gap = max(gap, float(np.max(np.abs(x - y) / x)))
    return gap


def timed(runner, data: torch.Tensor) -> float:
    for t in data[:5]:  # warm-up
        runner.step(t)
    start = time.perf_counter()
    for t in data[5:]:
        runner.step(t)
    return (time.perf_counter() - start) / (len(data) - 5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.shapes, args.steps, args.rounds = "M0,L2", 15, 1
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, 1 thread, {args.replicas} replicas, {args.steps} steps (5 warm-up), "
          f"{args.rounds} rounds")
    print(f"{'shape':6s} {'sequential ms/step':>19s} {'stacked ms/step':>16s} {'speed-up (min/median/max)':>27s} "
          f"{'loss gap':>9s}")
    for name in args.shapes.split(","):
        data = batches(name, args.replicas, args.steps)
        ratios, seq, stk = [], [], []
        for round_ in range(args.rounds):
            arms = [Sequential, Stacked] if round_ % 2 == 0 else [Stacked, Sequential]
            times = {arm.__name__: timed(arm(name, args.replicas), data) for arm in arms}
            seq.append(times["Sequential"])
            stk.append(times["Stacked"])
            ratios.append(times["Sequential"] / times["Stacked"])
        gap = faithful(name, args.replicas, 20)
        print(f"{name:6s} {1e3 * statistics.median(seq):19.2f} {1e3 * statistics.median(stk):16.2f} "
              f"{min(ratios):9.2f} / {statistics.median(ratios):.2f} / {max(ratios):.2f}     {gap:9.1e}")


if __name__ == "__main__":
    main()
