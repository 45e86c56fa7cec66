"""The stacked replicas' whole step in one CUDA graph (``train.cuda_graphs`` with ``stack_replicas``): the batched
forward and backward of the K replicas, the per-replica clipping and masking, AdamW and the per-replica learning
rates are captured once and replayed, as :mod:`assocmem.train.graphed` does for one model (issue 41: a stacked step
of small models is the host's kernel launches, and the decisive memorisation column's smallest groups step 256,000
times one after another).

A replay reads static buffers: the replicas' batches padded to (K, rows, width) with unscored targets (a frozen
replica's batch wholly unscored), gathered in the graph from the replicas' training sequences on the device where
every replica draws whole sequences (:mod:`assocmem.train.device_rows`: the host uploads a (K, rows) index) or
copied from the host otherwise; each replica's loss scale (1 / its scored targets), which replicas are active and
each replica's share of the largest learning rate (one (3, K) upload, from pinned memory on CUDA); and the largest
learning rate (AdamW's, a device scalar). Where the eager stacked step takes
a shortcut on the host (no rescaling when every replica has the same learning rate), the graph always rescales:
``lerp`` toward the weights before the step by 1 - lr_k / lr_max: 0 for a replica at the largest rate (the step as
taken, exactly), 1 for a frozen one (its old weight, exactly) and the share between for a replica whose own schedule
gives it a lower rate (AdamW's change is linear in lr; to rounding, as the eager step's rescaling).
The first steps run the same code on a side stream without a graph (CUDA needs them before a capture); off CUDA
nothing is captured and every step runs that code eagerly, which is what the CPU tests check against the eager
stacked step."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from assocmem.stopping import IGNORE
from assocmem.train.batches import BatchSource, pinned, scored_targets, static_stack
from assocmem.train.device_rows import DeviceRows
from assocmem.train.graphed import CapturedStep
from assocmem.train.settings import TrainSettings
from assocmem.train.stacked_model import StackedDecoder, clip_and_mask, per_replica, summed_nll

log = logging.getLogger(__name__)


class StackedGraphedStep(CapturedStep):
    """The stacked optimizer step over static buffers, captured in a CUDA graph on CUDA (:class:`GraphedStep`'s
    warmup and capture). ``clips``: each replica's ``grad_clip`` on the device; ``sources``: each replica's batch
    source. Where every source draws whole sequences, their rows live on the device and the graph gathers each
    turn's batches from one uploaded index (:mod:`assocmem.train.device_rows`); otherwise the host builds and copies
    the batches."""

    def __init__(self, stack: StackedDecoder, optimizer: torch.optim.Optimizer, settings: TrainSettings,
                 clips: torch.Tensor, width: int, device: torch.device, autocast: Callable[[], Any],
                 sources: Sequence[BatchSource]) -> None:
        self.stack, self.optimizer, self.settings, self.autocast = stack, optimizer, settings, autocast
        self.clips, self.sources = clips, list(sources)
        self.micro_rows = settings.micro_batch_size or settings.batch_size
        k = clips.shape[0]
        shape = (k, -(-settings.batch_size // self.micro_rows) * self.micro_rows, width)
        self.inputs = torch.zeros(shape, dtype=torch.long, device=device)
        self.targets = torch.full(shape, IGNORE, dtype=torch.long, device=device)
        self.rows = DeviceRows.of(self.sources, shape[1], width, device)
        self.index = None if self.rows is None else torch.full(shape[:2], self.rows.pad_row, device=device)
        self.factors = torch.ones((3, k), dtype=torch.float32, device=device)  # one upload a turn: the three below
        self.scale, self.active, self.back = self.factors  # views: 1 / scored targets, active, 1 - lr_k / lr_max
        self.lr = torch.tensor(settings.lr, dtype=torch.float32, device=device)
        self.loss = torch.zeros(k, dtype=torch.float64, device=device)
        self._start_graphs(device)
        for group in optimizer.param_groups:
            group["lr"], group["capturable"] = self.lr, self.capture

    def run(self, step: int, active: Sequence[bool], lrs: Sequence[float]) -> tuple[torch.Tensor, list[int]]:
        """One step of the stack from ``step``: replica k trains on its batch of the step where ``active[k]``
        (frozen otherwise) at learning rate ``lrs[k]``. Returns the replicas' summed losses (K,), a device tensor
        the next step overwrites (add it up before then), and their scored-target counts."""
        uploads, counts = self.feed(step, active)
        top = max(lrs)
        factors = torch.from_numpy(np.array([[1.0 / max(c, 1) for c in counts], active,
                                             [1.0 - lr / top if top > 0 else 1.0 for lr in lrs]], dtype=np.float32))
        for buffer, host in (*uploads, (self.factors, factors)):
            buffer.copy_(pinned(host, buffer.device), non_blocking=True)
        self.lr.fill_(top)
        self._advance()
        return self.loss, counts

    def feed(self, step: int, active: Sequence[bool]) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], list[int]]:
        """The host's part of a turn's batches: (device buffer, host tensor) pairs to upload, and each replica's
        scored targets. With device rows, one (K, rows) index; otherwise the replicas' batches, stacked."""
        if self.rows is not None:
            index, counts = self.rows.index(step, active)
            return [(self.index, torch.from_numpy(index))], counts
        batches = [source.batch(step) if on else None for source, on in zip(self.sources, active, strict=True)]
        stacked = static_stack(batches, *self.inputs.shape[1:])
        return list(zip((self.inputs, self.targets), stacked, strict=True)), [scored_targets(b) for b in batches]

    def _body(self) -> None:
        """What the graph holds: the micro-batches' forward and backward, clipping and masking, AdamW and the
        per-replica learning rates."""
        self.loss.zero_()
        if self.rows is not None:
            inputs, targets = self.rows.gather(self.index)
            self.inputs.copy_(inputs)
            self.targets.copy_(targets)
        for first in range(0, self.inputs.shape[1], self.micro_rows):
            inputs = self.inputs[:, first:first + self.micro_rows]
            targets = self.targets[:, first:first + self.micro_rows]
            with self.autocast():
                nll = summed_nll(self.stack, inputs, targets)
            (nll * self.scale).sum().backward()  # the replicas share no weight: each gets its own gradient
            self.loss += nll.detach()
        clip_and_mask(self.stack, self.clips, self.active)
        params = [p for _, p in self.stack.named_stacked()]
        before = [p.detach().clone() for p in params]
        self.optimizer.step()
        with torch.no_grad():
            for p, old in zip(params, before, strict=True):
                p.lerp_(old, per_replica(self.back.to(p.dtype), p))
