"""The stacked replicas' evaluations in one batched pass (issue 41): every replica's CE sets and recall of its
training facts through the stack's forward at once, instead of each replica copied out to a single model and run
alone (on a GPU a small model's evaluation is the host's kernel launches, and the decisive memorisation column
evaluates every 2,000 steps of 2.1-3.7 M).

Replica k reads its own evaluation batches (``TrainJob.eval_sets``), stacked on the device once as (K, rows, width)
and padded to the replicas' widest batch with unscored targets (a causal model's earlier positions never see the
padding; a recall counts an unscored target as recalled). Each replica's metrics are those of
:func:`assocmem.train.loop.evaluate` and :func:`assocmem.stopping.recall` on its own batches (the same sums in the
same order, float64 across batches), up to fp32 rounding of the batched products. The replicas' sets must match in
names, batch count and rows a batch (:meth:`StackedEvaluation.of` returns None otherwise: each replica is then
evaluated alone)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from assocmem.stopping import IGNORE
from assocmem.train.batches import RECALL_SET, Batch, static_stack
from assocmem.train.stacked_model import StackedDecoder, summed_nll


def stack_padded(batches: Sequence[Batch], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The replicas' batches (one each, same rows) as (K, rows, width) on ``device``, padded to the widest."""
    inputs, targets = static_stack(batches, batches[0][0].shape[0], max(x.shape[1] for x, _ in batches))
    return inputs.to(device), targets.to(device)


class StackedEvaluation:
    """The replicas' evaluation sets, stacked on the device once; :meth:`metrics` evaluates every replica."""

    def __init__(self, sets: Sequence[dict[str, list[Batch]]], device: torch.device) -> None:
        self.names = list(sets[0])
        self.batches = {name: [stack_padded([s[name][b] for s in sets], device) for b in range(len(sets[0][name]))]
                        for name in self.names}

    @classmethod
    def of(cls, sets: Sequence[dict[str, list[Batch]]], device: torch.device) -> StackedEvaluation | None:
        """The stacked sets, or None where the replicas' sets differ in names, batch counts or rows a batch."""
        first = sets[0]
        for other in sets[1:]:
            if list(other) != list(first):
                return None
            for name, batches in first.items():
                if [b[0].shape[0] for b in other[name]] != [b[0].shape[0] for b in batches]:
                    return None
        return cls(sets, device)

    @torch.no_grad()
    def metrics(self, stack: StackedDecoder, autocast: Callable[[], Any]) -> list[dict[str, float]]:
        """Each replica's row values: ``{name}_ce`` per CE set, in the sets' order, then ``train_recall``."""
        was_training = stack.training
        stack.eval()
        values: dict[str, list[float]] = {}
        for name in self.names:
            if name != RECALL_SET:
                values[f"{name}_ce"] = self._mean_nll(stack, self.batches[name], autocast)
        if RECALL_SET in self.batches:
            values["train_recall"] = self._recall(stack, self.batches[RECALL_SET], autocast)
        stack.train(was_training)
        return [{key: per_replica[k] for key, per_replica in values.items()} for k in range(stack.replicas)]

    @staticmethod
    def _mean_nll(stack: StackedDecoder, batches, autocast) -> list[float]:
        total = torch.zeros(stack.replicas, dtype=torch.float64, device=batches[0][0].device)
        scored = torch.zeros(stack.replicas, dtype=torch.int64, device=total.device)
        for inputs, targets in batches:
            with autocast():
                total += summed_nll(stack, inputs, targets)
            scored += (targets != IGNORE).sum(dim=(1, 2))
        return [t / max(s, 1) for t, s in zip(total.tolist(), scored.tolist(), strict=True)]  # read once

    @staticmethod
    def _recall(stack: StackedDecoder, batches, autocast) -> list[float]:
        exact = torch.zeros(stack.replicas, dtype=torch.int64, device=batches[0][0].device)
        rows = 0
        for inputs, targets in batches:
            with autocast():
                predicted = stack(inputs).argmax(dim=-1).view(targets.shape)
            exact += ((predicted == targets) | (targets == IGNORE)).all(dim=2).sum(dim=1)
            rows += targets.shape[1]
        return [e / max(rows, 1) for e in exact.tolist()]
