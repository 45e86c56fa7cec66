"""Where one training step of a config's model goes on this host: the step's time, its ops grouped by kind
(products, attention, GELU, LayerNorm, loss, optimizer, the rest) from ``torch.profiler``'s self CPU times, and the
products' own rate against the host's fp32 GEMM peak (``assocmem.gemm.measure_peak_flops``, the trainer's MFU
denominator). Issue 40, item 5: it tells a host that loses on arithmetic (a low peak) from one that loses elsewhere.

The step is the trainer's (``assocmem.train.loss.step_loss``, backward, clipping, ``make_optimizer``'s fused
AdamW) on one fixed batch of random tokens: the config's batch size, ``--width`` tokens a sequence (the default's
full-data batches are padded to about 36), its model, ``--threads`` threads (a job's default: 1).

    python benchmarks/profile_step.py                        # the default config's L4 model
    python benchmarks/profile_step.py --model L2 --steps 50
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from assocmem.autotune.measure import cpu_model_and_flags
from assocmem.config import load_config, load_schema, run_settings
from assocmem.gemm import measure_peak_flops
from assocmem.model import DecoderLM, ModelConfig, padded_vocab
from assocmem.schemas import config_schema_path
from assocmem.train.loss import step_loss
from assocmem.train.settings import TrainSettings, make_optimizer

ROOT = Path(__file__).resolve().parents[1]
GROUPS = {  # first match wins; op names as torch.profiler prints them
    "products": ("aten::mm", "aten::addmm", "aten::bmm"),
    "attention": ("scaled_dot_product",),
    "GELU": ("gelu",),
    "LayerNorm": ("layer_norm",),
    "loss": ("log_softmax", "nll_loss"),
    "optimizer": ("adamw", "Optimizer.", "zero_", "linalg_vector_norm", "clip_grad"),
}


def group_of(op: str) -> str:
    """An ``aten::`` name in GROUPS matches exactly; any other name matches as a case-free part of the op's."""
    for group, names in GROUPS.items():
        if any(op == n if n.startswith("aten::") else n.lower() in op.lower() for n in names):
            return group
    return "other"


def product_flops(cfg: ModelConfig, rows: int) -> float:
    """Forward and backward FLOPs of every Linear product of one step (2 per multiply-add, backward twice the
    forward), the tied output head over the padded vocabulary included; attention's products are counted apart."""
    per_layer = cfg.d_model * 3 * cfg.d_model + cfg.d_model * cfg.d_model + 2 * cfg.d_model * cfg.d_ff
    macs = rows * (cfg.n_layer * per_layer + cfg.d_model * padded_vocab(cfg.vocab_size))
    return 3 * 2.0 * macs


def build(config: Path, exp: str, model: str, vocab: int) -> tuple[ModelConfig, TrainSettings]:
    """The model and train settings of one run of the config, validated (schema defaults filled in)."""
    spec, train = run_settings(load_config(config, load_schema(config_schema_path()))["experiments"][exp], model)
    return ModelConfig.from_dict(spec, vocab), TrainSettings.from_config(train)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, default=ROOT / "config" / "config.yaml")
    parser.add_argument("--exp", default="qf")
    parser.add_argument("--model", default="L4")
    parser.add_argument("--vocab", type=int, default=72, help="the tokenizer's vocabulary (the default's: 72)")
    parser.add_argument("--width", type=int, default=36, help="tokens per sequence of the batch")
    parser.add_argument("--steps", type=int, default=30, help="profiled steps (as many again are timed unprofiled)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg, settings = build(args.config, args.exp, args.model, args.vocab)
    model = DecoderLM(cfg)
    optimizer = make_optimizer(model, settings, torch.device("cpu"))
    inputs = torch.randint(0, cfg.vocab_size, (settings.batch_size, args.width))
    targets = torch.randint(0, cfg.vocab_size, (settings.batch_size, args.width))

    def step() -> None:
        loss, _ = step_loss(model, inputs, targets, 1, targets.numel())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), settings.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(10):
        step()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    step_ms = (time.perf_counter() - start) / args.steps * 1e3
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(args.steps):
            step()
    shares: dict[str, float] = {}
    for event in prof.key_averages():
        group = group_of(event.key)
        shares[group] = shares.get(group, 0.0) + event.self_cpu_time_total
    total = sum(shares.values())
    peak = measure_peak_flops(torch.device("cpu"))
    products_seconds = shares.get("products", 0.0) / 1e6 / args.steps
    products_rate = product_flops(cfg, settings.batch_size * args.width) / products_seconds
    print(f"host: {cpu_model_and_flags()[0]}; torch {torch.__version__}, {args.threads} thread(s)")
    print(f"{args.exp}/{args.model}: batch {settings.batch_size} x {args.width} tokens; step {step_ms:.2f} ms "
          f"unprofiled, mean of {args.steps}")
    print(f"{'group':<10} {'share':>6} {'ms/step':>8}")
    for group, micros in sorted(shares.items(), key=lambda item: -item[1]):
        print(f"{group:<10} {micros / total:6.1%} {step_ms * micros / total:8.2f}")
    print(f"products: {products_rate / 1e9:.1f} GFLOP/s in the step against a peak of {peak / 1e9:.1f} GFLOP/s "
          f"(1024^3 fp32, best library) = {products_rate / peak:.0%}")


if __name__ == "__main__":
    main()
