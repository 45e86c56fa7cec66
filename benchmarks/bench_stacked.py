"""The stacked-replicas trainer (``assocmem.train.stacked``) against K single runs, step for step (issue 41).

For each grid shape and each K, one arm runs K single-run training steps one after another (``TrainJob``'s own
step: what K jobs on one device do in turn), the other runs one stacked step of the K replicas
(``StackedTraining``'s own step: per-replica clipping, lr and masking included); the batches are random tokens of
the shape's vocabulary and length, a fresh batch per step as the trainer draws them. Rounds alternate the order;
each round prints one JSON line per measurement (the caller, e.g. benchmarks/gpu_check.sh, collects them) and a
summary line per (shape, K) gives min / median / max of the speed-up over the rounds. CUDA when available
(``--device auto``), else the CPU at ``--threads`` threads.

    python benchmarks/bench_stacked.py --dry-run            # a few steps of two tiny shapes: checks it runs
    python benchmarks/bench_stacked.py --shapes M0,M3,M7 --replicas 1,4,16 --steps 60 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from assocmem.model import ModelConfig
from assocmem.train import TrainJob, TrainSettings, make_optimizer
from assocmem.train.stacked import StackedTraining
from assocmem.train.stacked_model import StackedDecoder, stacked_optimizer

SHAPES = {  # name: (model spec, vocabulary, sequence length, batch) as the configs train them
    "M0": ({"n_layer": 1, "d_model": 6, "n_head": 1, "d_ff": 24}, 37, 8, 64),  # config/memorisation.yaml
    "M3": ({"n_layer": 1, "d_model": 16, "n_head": 2, "d_ff": 64}, 37, 8, 64),
    "M7": ({"n_layer": 2, "d_model": 48, "n_head": 4, "d_ff": 192}, 37, 8, 64),
    "G3": ({"n_layer": 2, "d_model": 48, "n_head": 4, "d_ff": 192}, 40, 10, 256),  # config/memorisation_gpu.yaml
    "G5": ({"n_layer": 4, "d_model": 96, "n_head": 4, "d_ff": 384}, 40, 10, 256),
    "G7": ({"n_layer": 6, "d_model": 192, "n_head": 6, "d_ff": 768}, 40, 10, 256),
    "L4": ({"n_layer": 4, "d_model": 64, "n_head": 4, "d_ff": 256}, 100, 30, 32),  # config/config.yaml
}


@dataclass(frozen=True)
class RandomBatches:
    """Random next-token batches; the batch of step s depends only on (seed, s), like the trainer's sources."""

    vocab: int
    length: int
    batch_size: int
    seed: int

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = np.random.default_rng([self.seed, step]).integers(1, self.vocab, (self.batch_size, self.length + 1))
        tokens = torch.from_numpy(tokens)
        return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def jobs(shape: str, replicas: int, device: str) -> list[TrainJob]:
    spec, vocab, length, batch = SHAPES[shape]
    settings = TrainSettings(batch_size=batch, micro_batch_size=None, max_steps=10**6, lr=3e-3, min_lr_ratio=0.1,
                             warmup_steps=10, weight_decay=0.0, beta1=0.9, beta2=0.95, grad_clip=1.0,
                             eval_interval=10**6, eval_batches=1, checkpoint_interval=10**6, device=device,
                             gemm="native")
    cfg = ModelConfig(vocab_size=vocab, max_len=length, **spec)
    return [TrainJob(run_dir=Path(f"unused{seed}"), model_config=cfg, settings=settings, seed=seed,
                     tokens_per_sequence=length, train_batches=RandomBatches(vocab, length, batch, seed), eval_sets={})
            for seed in range(replicas)]  # nothing is written: only the training step runs


class Singles:
    """K single runs' steps, one after another (``TrainJob._train_step``: the trainer's step)."""

    def __init__(self, shape: str, replicas: int, device: torch.device) -> None:
        self.jobs = jobs(shape, replicas, device.type)
        self.device = device
        self.models, self.optimizers = [], []
        for job in self.jobs:
            torch.manual_seed(job.seed)
            model = StackedTraining([job])._models()[0]
            self.models.append(model.train())
            self.optimizers.append(make_optimizer(model, job.settings, device))
        self.autocast = self.jobs[0]._autocast(device)

    def step(self, step: int) -> None:
        for job, model, optimizer in zip(self.jobs, self.models, self.optimizers, strict=True):
            job._train_step(model, optimizer, step, self.device, self.autocast)


class Stacked:
    """One stacked step of the K replicas (``StackedTraining._step``)."""

    def __init__(self, shape: str, replicas: int, device: torch.device) -> None:
        self.training = StackedTraining(jobs(shape, replicas, device.type))
        s = self.training.settings
        self.stack = StackedDecoder(self.training._models()).to(device).train()
        self.optimizer = stacked_optimizer(self.stack, s.weight_decay, s.lr, (s.beta1, s.beta2), device)
        self.active = [True] * replicas
        self.autocast = self.training.jobs[0]._autocast(device)

    def step(self, step: int) -> None:
        self.training._step(self.stack, self.optimizer, step, self.active, self.autocast)


def timed(arm, steps: int, warmup: int, device: torch.device) -> float:
    """Seconds per step after ``warmup`` steps."""
    for step in range(warmup):
        arm.step(step)
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for step in range(warmup, warmup + steps):
        arm.step(step)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps


def measure(shape: str, replicas: int, args, device: torch.device) -> None:
    ratios = []
    for round_ in range(args.rounds):
        arms = (Singles, Stacked) if round_ % 2 == 0 else (Stacked, Singles)
        seconds = {arm.__name__: timed(arm(shape, replicas, device), args.steps, args.warmup, device) for arm in arms}
        ratio = seconds["Singles"] / seconds["Stacked"]
        ratios.append(ratio)
        print(json.dumps({"bench": "stacked", "shape": shape, "k": replicas, "round": round_, "device": str(device),
                          "threads": torch.get_num_threads(), "singles_ms_per_step": 1e3 * seconds["Singles"],
                          "stacked_ms_per_step": 1e3 * seconds["Stacked"],
                          "singles_replica_steps_per_s": replicas / seconds["Singles"],
                          "stacked_replica_steps_per_s": replicas / seconds["Stacked"], "speedup": ratio}),
              flush=True)
    print(json.dumps({"bench": "stacked_summary", "shape": shape, "k": replicas, "device": str(device),
                      "rounds": args.rounds, "speedup_min": min(ratios), "speedup_median": statistics.median(ratios),
                      "speedup_max": max(ratios)}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default="M0,M3,M7,G3,G5")
    parser.add_argument("--replicas", default="1,4,16", help="values of K, comma-separated")
    parser.add_argument("--steps", type=int, default=50, help="timed steps per arm and round")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="auto", help="auto (CUDA when available), cpu or cuda")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (the pipeline's threads_per_job)")
    parser.add_argument("--dry-run", action="store_true", help="a few steps of M0 and M3 at K = 1, 4: checks it runs")
    args = parser.parse_args()
    if args.dry_run:
        args.shapes, args.replicas, args.steps, args.warmup, args.rounds = "M0,M3", "1,4", 3, 1, 2
    name = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    torch.set_num_threads(args.threads)
    for shape in args.shapes.split(","):
        for replicas in (int(k) for k in args.replicas.split(",")):
            measure(shape, replicas, args, device)


if __name__ == "__main__":
    main()
