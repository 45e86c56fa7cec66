"""A run's settings and the rules they set: the learning-rate schedule, the optimizer and the step budget."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class TrainSettings:
    batch_size: int
    micro_batch_size: int | None
    max_steps: int
    lr: float
    min_lr_ratio: float
    warmup_steps: int
    weight_decay: float
    beta1: float
    beta2: float
    grad_clip: float
    eval_interval: int
    eval_batches: int
    checkpoint_interval: int
    device: str = "auto"
    precision: str = "fp32"
    compile: bool = False
    cuda_graphs: bool = False  # on CUDA: the step in CUDA graphs, batches of static shapes; elsewhere a no-op
    gemm: str = "auto"  # fp32 CPU GEMM library: auto (the faster here, timed), native (MKL via F.linear), onednn
    early_stopping_patience: int | None = None  # evaluations without improvement before stopping
    early_stopping_min_delta: float = 0.0  # nats: an improvement smaller than this does not count
    max_epochs: float | None = None  # passes over the training sequences; sets the step budget (capped by max_steps)
    stop_at_recall: float | None = None  # stop once this share of the training facts is recalled exactly

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> TrainSettings:
        names = cls.__dataclass_fields__.keys()
        return cls(**{k: cfg[k] for k in names if k in cfg})


def lr_at(step: int, s: TrainSettings) -> float:
    """Linear warmup to ``lr``, then cosine decay to ``min_lr_ratio * lr`` at ``max_steps``."""
    if s.warmup_steps and step < s.warmup_steps:
        return s.lr * (step + 1) / s.warmup_steps
    span = max(1, s.max_steps - s.warmup_steps)
    progress = min(1.0, (step - s.warmup_steps) / span)
    floor = s.lr * s.min_lr_ratio
    return floor + 0.5 * (s.lr - floor) * (1 + math.cos(math.pi * progress))


def make_optimizer(model: torch.nn.Module, s: TrainSettings, device: torch.device) -> torch.optim.AdamW:
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": s.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    # fused on a CPU too: one kernel per tensor instead of a dozen, the same update to fp32 rounding
    return torch.optim.AdamW(groups, lr=s.lr, betas=(s.beta1, s.beta2), fused=device.type in ("cuda", "cpu"))


def step_budget(settings: TrainSettings, n_sequences: int) -> int:
    """The run's step budget: ``max_steps``, or fewer where ``max_epochs`` passes over the training sequences end
    sooner (so every fact of a memorisation grid gets the same number of exposures, whatever D)."""
    if settings.max_epochs is None:
        return settings.max_steps
    return max(1, min(settings.max_steps, math.ceil(settings.max_epochs * n_sequences / settings.batch_size)))

