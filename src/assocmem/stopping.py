"""When a training run stops, and what it measures to decide: early stopping on the validation CE, and the exact
recall of a memorisation run's training facts (issue 25)."""

from __future__ import annotations

from typing import Any

import torch

IGNORE = -100  # the target id that no loss or recall counts (padding, a fact's key)
Batch = tuple[torch.Tensor, torch.Tensor]


def is_new_best(metrics: list[dict[str, float]]) -> bool:
    """True when the last evaluation's validation CE is lower than every earlier one (the first minimum wins)."""
    values = [row["val_ce"] for row in metrics]
    return bool(values) and all(values[-1] < earlier for earlier in values[:-1])


def early_stop_reached(metrics: list[dict[str, float]], patience: int | None, min_delta: float) -> bool:
    """True when validation CE has not improved on its best by more than ``min_delta`` for ``patience``
    consecutive evaluations (None: never stop early)."""
    if patience is None or len(metrics) <= patience:
        return False
    values = [row["val_ce"] for row in metrics]
    best_before = min(values[:-patience])
    return min(values[-patience:]) > best_before - min_delta


@torch.no_grad()
def recall(model: torch.nn.Module, batches: list[Batch], device: torch.device, autocast: Any) -> float:
    """Share of the sequences whose every scored target is the model's most likely next token (teacher-forced; for a
    fact: its whole value recalled from its key, exactly what greedy decoding would produce)."""
    was_training = model.training
    model.eval()
    exact = torch.zeros((), dtype=torch.int64, device=device)  # counted on the device, read once
    total = 0
    for inputs, targets in batches:
        targets = targets.to(device)
        with autocast():
            predicted = model(inputs.to(device)).argmax(dim=-1)
        exact += ((predicted == targets) | (targets == IGNORE)).all(dim=1).sum()
        total += int(targets.shape[0])
    model.train(was_training)
    return int(exact) / max(total, 1)


def recall_reached(metrics: list[dict[str, float]], threshold: float | None) -> bool:
    return threshold is not None and bool(metrics) and metrics[-1].get("train_recall", 0.0) >= threshold
