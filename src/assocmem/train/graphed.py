"""The whole training step in one CUDA graph (``train.cuda_graphs``): forward, backward, clipping and AdamW are
captured once and replayed, so a small model's step costs its kernels' time rather than the host's launches
(issue 41: the default's L4 step took 7.8 ms eager and 4.2 ms with only the model in graphs on an H200).

A replay reads static buffers. Each step's batch is copied into fixed-shape inputs and targets (padded with unscored
targets to the source's widest batch: :func:`static_shape`), the learning rate and the loss scale (1 / scored
targets; one process, no DDP) into device scalars, and the step's summed loss is written to a device scalar. The
first steps run the same code without a graph (CUDA needs them before a capture: cuBLAS workspaces, AdamW's state);
they are training steps like any other. Off CUDA nothing is captured and every step runs that code eagerly, which
is what the CPU tests check against the eager step of :class:`~assocmem.train.loop.TrainJob`."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import torch

from assocmem.stopping import IGNORE
from assocmem.train.batches import Batch, static_shape
from assocmem.train.loss import summed_nll
from assocmem.train.settings import TrainSettings, lr_at

log = logging.getLogger(__name__)

WARMUP_STEPS = 3  # eager steps on a side stream before the capture, as torch.cuda.graph's documentation asks


def on_side_stream(work: Callable[[], None]) -> None:
    """Run ``work`` on a side stream, ordered after and before the current stream's work (torch.cuda.graph's
    documentation asks the warmup steps before a capture to run so)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        work()
    torch.cuda.current_stream().wait_stream(side)


class CapturedStep(ABC):
    """An optimizer step over static buffers (``inputs``, ``optimizer``) that runs eagerly off CUDA, eagerly on a
    side stream for its first steps on CUDA, then is captured once in a CUDA graph and replayed. A subclass fills
    its buffers and defines :meth:`_body`, what the graph holds."""

    inputs: torch.Tensor
    optimizer: torch.optim.Optimizer

    def _start_graphs(self, device: torch.device) -> None:
        self.capture = device.type == "cuda"
        self.graph: torch.cuda.CUDAGraph | None = None
        self.eager_steps = 0

    def _advance(self) -> None:
        """Run the step over the buffers as they are now: replayed, eager, or captured (then replayed)."""
        if self.graph is not None:
            self.graph.replay()
        elif not self.capture:
            self._eager()
        elif self.eager_steps < WARMUP_STEPS:
            on_side_stream(self._eager)
        else:
            self._capture()

    @abstractmethod
    def _body(self) -> None:
        """What the graph holds: the step's work over the static buffers."""

    def _eager(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        self._body()
        self.eager_steps += 1

    def _capture(self) -> None:
        """Capture the step (a capture runs nothing) and replay it for this step. The gradients are set to None
        first, so the captured backward writes them (into the graph's memory) instead of adding to them."""
        self.optimizer.zero_grad(set_to_none=True)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._body()
        self.graph = graph
        log.info("train.cuda_graphs: %s is captured after %d eager steps; inputs %s", type(self).__name__,
                 self.eager_steps, tuple(self.inputs.shape))
        graph.replay()


class GraphedStep(CapturedStep):
    """The optimizer step over static buffers of (rows, ``width``) tokens, captured in a CUDA graph on CUDA; rows
    are the batch rounded up to whole micro-batches. The optimizer's groups get a device tensor for their learning
    rate and ``capturable`` (its step counters live on the device already: AdamW is fused)."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, settings: TrainSettings,
                 width: int, device: torch.device, autocast: Callable[[], Any]) -> None:
        self.model, self.optimizer, self.settings, self.autocast = model, optimizer, settings, autocast
        self.micro_rows = settings.micro_batch_size or settings.batch_size
        shape = (-(-settings.batch_size // self.micro_rows) * self.micro_rows, width)
        self.inputs = torch.zeros(shape, dtype=torch.long, device=device)
        self.targets = torch.full(shape, IGNORE, dtype=torch.long, device=device)
        self.scale = torch.ones((), dtype=torch.float32, device=device)
        self.lr = torch.tensor(settings.lr, dtype=torch.float32, device=device)
        self.loss = torch.zeros((), dtype=torch.float64, device=device)
        self._start_graphs(device)
        for group in optimizer.param_groups:
            group["lr"], group["capturable"] = self.lr, self.capture

    def run(self, step: int, batch: Batch, n_targets: int) -> torch.Tensor:
        """The optimizer step of ``step`` on ``batch`` (on the device); returns the step's summed loss, a device
        scalar that the next step overwrites (add it up before then)."""
        inputs, targets = static_shape(batch, *self.inputs.shape)
        self.inputs.copy_(inputs, non_blocking=True)
        self.targets.copy_(targets, non_blocking=True)
        self.scale.fill_(1.0 / n_targets)
        self.lr.fill_(lr_at(step, self.settings))
        self._advance()
        return self.loss

    def _body(self) -> None:
        """What the graph holds: the micro-batches' forward and backward, clipping, AdamW."""
        self.loss.zero_()
        for first in range(0, self.inputs.shape[0], self.micro_rows):
            inputs, targets = self.inputs[first:first + self.micro_rows], self.targets[first:first + self.micro_rows]
            with self.autocast():
                nll = summed_nll(self.model, inputs, targets)
            (nll * self.scale).backward()
            self.loss += nll.detach()
        if self.settings.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.settings.grad_clip)
        self.optimizer.step()
