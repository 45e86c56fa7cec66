"""The share of each candidate lever in one training step, measured in one process against the product's step.

``bench_train.py`` compares whole trainers in fresh processes; this script isolates the step's non-GEMM parts,
which is where any gain beyond the GEMM-only ceiling's reach must come from. Every variant trains its own copy
of the product's bias-free ``DecoderLM`` from the same initial weights on the same batches, so the variants'
losses after the same steps must agree (printed as the largest relative gap to the base). Variants run in
rounds in a rotating order; warm-up (and compilation) happens before the first round. The process runs under
the rules' GLIBC_TUNABLES (it re-executes itself with them unless --no-malloc), as the product's jobs do.

Variants (each changes one thing relative to ``base``, except the compiled ones, which add up):
  * base                       the product's step: SDPA attention, F.cross_entropy (sum), AdamW (foreach), clip
  * manual-attention           q k^T / sqrt(d), causal mask, softmax, @ v instead of SDPA (T = 64: the CPU flash
                               kernel's tiles are mostly empty)
  * fused-ce                   cross-entropy as one autograd function: logsumexp forward, softmax - onehot
                               backward (no log-softmax tensor and no dense nll_loss gradient)
  * fused-adamw                AdamW(fused=True)
  * compile-model              torch.compile(model) (what ``train.compile`` does)
  * compile-model+loss         torch.compile of the model and the loss together
  * compile-model+loss+optimizer  ... plus torch.compile(optimizer.step) with a tensor learning rate
  * compile-model+fused-ce+fused-adamw  the three cheapest-to-adopt levers together

    python benchmarks/bench_step_levers.py --quick
    python benchmarks/bench_step_levers.py --config small --rounds 5
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import numpy as np
import torch
from bench_train import CONFIGS, product_malloc_tunables
from torch.nn import functional as F

from assocmem.autotune.measure import rotated
from assocmem.model import DecoderLM, ModelConfig
from assocmem.testing.reference_train import HYPER

VARIANTS = ["base", "manual-attention", "fused-ce", "fused-adamw", "compile-model", "compile-model+loss",
            "compile-model+loss+optimizer", "compile-model+fused-ce+fused-adamw"]


class FusedCrossEntropy(torch.autograd.Function):
    """Summed cross-entropy of (rows, vocab) logits; the backward writes softmax - onehot in one pass."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        lse = torch.logsumexp(logits, dim=1)
        ctx.save_for_backward(logits, lse, targets)
        return (lse - logits.gather(1, targets[:, None])[:, 0]).sum()

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        logits, lse, targets = ctx.saved_tensors
        out = torch.exp(logits - lse[:, None])
        out[torch.arange(len(targets)), targets] -= 1.0
        return out.mul_(grad), None


def manual_attention(q, k, v, is_causal=True, dropout_p=0.0):
    length = q.shape[-2]
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    mask = torch.ones(length, length, dtype=torch.bool, device=q.device).triu(1)
    return scores.masked_fill(mask, float("-inf")).softmax(-1) @ v


@contextlib.contextmanager
def attention(variant: str) -> Iterator[None]:
    original = F.scaled_dot_product_attention
    if variant == "manual-attention":
        F.scaled_dot_product_attention = manual_attention
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original


def summed_nll(model, inputs: torch.Tensor, targets: torch.Tensor, fused: bool) -> torch.Tensor:
    logits = model(inputs).reshape(-1, model_vocab(model))
    if fused:
        return FusedCrossEntropy.apply(logits, targets.reshape(-1))
    return F.cross_entropy(logits, targets.reshape(-1), reduction="sum")


def model_vocab(model) -> int:
    return getattr(model, "_orig_mod", model).cfg.vocab_size


class Variant:
    """One model + optimizer trained with one lever switched on."""

    def __init__(self, name: str, cfg: dict, hyper: dict) -> None:
        self.name = name
        torch.manual_seed(0)
        config = ModelConfig(vocab_size=cfg["vocab"], n_layer=cfg["n_layer"], d_model=cfg["d_model"],
                             n_head=cfg["n_head"], d_ff=4 * cfg["d_model"], max_len=cfg["block"], bias=False)
        self.model = DecoderLM(config)
        decay = [p for p in self.model.parameters() if p.dim() >= 2]
        no_decay = [p for p in self.model.parameters() if p.dim() < 2]
        lr = torch.tensor(hyper["lr"]) if name.endswith("+optimizer") else hyper["lr"]
        self.optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": hyper["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
            lr=lr, betas=(hyper["beta1"], hyper["beta2"]), **({"fused": True} if "fused-adamw" in name else {}))
        fused_ce = "fused-ce" in name
        self.loss: Callable = lambda x, y: summed_nll(self.model, x, y, fused=fused_ce)
        if name == "compile-model" or name.startswith("compile-model+fused"):
            compiled = torch.compile(self.model)
            self.loss = lambda x, y: summed_nll(compiled, x, y, fused=fused_ce)
        elif name.startswith("compile-model+loss"):
            self.loss = torch.compile(lambda x, y: summed_nll(self.model, x, y, fused=False))
        self.optimizer_step = torch.compile(self.optimizer.step) if name.endswith("+optimizer") else self.optimizer.step
        self.grad_clip = hyper["grad_clip"]

    def step(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        with attention(self.name):
            nll = self.loss(inputs, targets)
            (nll / targets.numel()).backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
        self.optimizer_step()
        self.optimizer.zero_grad(set_to_none=True)
        return nll.detach()


def batches(cfg: dict, count: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    rng = np.random.default_rng(seed)
    shape = (cfg["batch"], cfg["block"])
    return [tuple(torch.from_numpy(rng.integers(0, cfg["vocab"], shape)) for _ in "xy") for _ in range(count)]


def run(cfg: dict, names: list[str], rounds: int, steps: int, warmup: int) -> None:
    data = batches(cfg, steps, seed=0)
    variants, compile_s = [], {}
    for name in names:
        start = time.perf_counter()
        variant = Variant(name, cfg, HYPER)
        for inputs, targets in data[:warmup]:
            variant.step(inputs, targets)
        compile_s[name] = time.perf_counter() - start
        variants.append(variant)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    last_loss: dict[str, float] = {}
    for round_ in range(rounds):
        for variant in rotated(variants, round_):
            start = time.perf_counter()
            for inputs, targets in data:
                loss = variant.step(inputs, targets)
            seconds[variant.name].append((time.perf_counter() - start) / len(data))
            last_loss[variant.name] = float(loss)
        print(f"  round {round_ + 1}/{rounds} done (1-min load average {os.getloadavg()[0]:.2f})", flush=True)
    report(names, seconds, last_loss, compile_s)


def report(names: list[str], seconds: dict[str, list[float]], last_loss: dict[str, float],
           compile_s: dict[str, float]) -> None:
    base = names[0]
    print(f"{'variant':36s} {'ms/step best':>12s} {'median':>8s} {'x ' + base + ' per round':>20s} {'median':>7s} "
          f"{'set-up s':>8s} {'loss gap':>9s}")
    for name in names:
        ratio = [b / s for b, s in zip(seconds[base], seconds[name], strict=True)]
        gap = abs(last_loss[name] - last_loss[base]) / abs(last_loss[base])
        print(f"{name:36s} {1e3 * min(seconds[name]):12.1f} {1e3 * np.median(seconds[name]):8.1f} "
              f"{min(ratio):9.2f}-{max(ratio):<10.2f} {np.median(ratio):7.2f} {compile_s[name]:8.1f} {gap:9.1e}")
    print("   (ratio > 1: faster than the base; loss gap: relative difference of the last step's loss after the same "
          "steps from the same weights; set-up: construction, warm-up steps and compilation)")


def split_probe(config: str, rounds: int, steps: int, warmup: int) -> None:
    """Data parallelism over the cores, before its all-reduce: one 2-thread process on the whole batch against
    two 1-thread processes on half batches each, run at the same time (rounds alternate the two set-ups)."""
    def launch(threads: int, batch: int) -> subprocess.Popen:
        args = ["--config", config, "--rounds", "1", "--steps", str(steps), "--warmup", str(warmup), "--threads",
                str(threads), "--variants", "base", "--batch", str(batch)]
        return subprocess.Popen([sys.executable, __file__, *args], stdout=subprocess.PIPE, text=True)

    def ms_per_step(proc: subprocess.Popen) -> float:
        out = proc.communicate()[0]
        return float(next(line.split()[1] for line in out.splitlines() if line.startswith("base ")))

    batch = CONFIGS[config]["batch"]
    whole, halves = [], []
    for _ in range(rounds):
        whole.append(ms_per_step(launch(2, batch)))
        pair = [launch(1, batch // 2), launch(1, batch // 2)]
        halves.append(max(ms_per_step(proc) for proc in pair))
    print(f"split probe ({config}): one process, 2 threads, batch {batch}: {min(whole):.1f}-{max(whole):.1f} ms/step;"
          f" two processes, 1 thread, batch {batch // 2} each, side by side: {min(halves):.1f}-{max(halves):.1f} "
          f"ms/step (the slower of the pair; before any gradient all-reduce); {rounds} rounds")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="small", help="a configuration of bench_train.py (small, large, ...)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, from: {', '.join(VARIANTS)}")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20, help="timed steps per variant and round")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps before the first round")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-malloc", action="store_true", help="do not re-execute under the rules' GLIBC_TUNABLES")
    parser.add_argument("--batch", type=int, help="override the configuration's batch size")
    parser.add_argument("--split-probe", action="store_true",
                        help="time one 2-thread process against two 1-thread half-batch processes side by side")
    parser.add_argument("--quick", action="store_true", help="tiny model, 2 rounds, 3 variants")
    args = parser.parse_args(argv)
    if not args.no_malloc and "GLIBC_TUNABLES" not in os.environ:
        env = dict(os.environ, GLIBC_TUNABLES=product_malloc_tunables())
        os.execve(sys.executable, [sys.executable, __file__, *sys.argv[1:]], env)
    if args.quick:
        args.config, args.rounds, args.steps, args.warmup = "quick", 2, 5, 2
        args.variants = "base,manual-attention,fused-ce"
    if args.split_probe:
        split_probe(args.config, args.rounds, args.steps, args.warmup)
        return
    names = args.variants.split(",")
    unknown = [n for n in names if n not in VARIANTS]
    if unknown or args.config not in CONFIGS:
        raise SystemExit(f"unknown variants {unknown} or config {args.config!r} (configs: {', '.join(CONFIGS)})")
    torch.set_num_threads(args.threads)
    cfg = dict(CONFIGS[args.config], **({"batch": args.batch} if args.batch else {}))
    print(f"torch {torch.__version__}, {args.threads} threads, config {args.config} {cfg}, {args.rounds} rounds x "
          f"{args.steps} steps, GLIBC_TUNABLES={os.environ.get('GLIBC_TUNABLES', '(unset)')}")
    run(cfg, names, args.rounds, args.steps, args.warmup)


if __name__ == "__main__":
    main()
