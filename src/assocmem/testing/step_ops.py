"""What a training step runs outside its compiled graph (issue 41), counted with ``torch.profiler``.

Under ``train.compile`` the model and its loss are one graph; every ATen op the step still calls on its own (the
loss scaling, the loss sum, clipping, the optimizer) is at least one more kernel launch on a GPU, work the graph
could have fused. Where the step runs on CUDA the device's own events are counted too (kernels, copies and sets).
Used by ``benchmarks/bench_step_ops.py`` and the compiled-step test; never by the pipeline."""

from __future__ import annotations

from collections import Counter

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

COMPILED = ("Torch-Compiled Region", "CompiledFunction")  # the record functions around a compiled graph's work
OPTIMIZER = "Optimizer.step#"  # around every torch.optim optimizer's step


class StepProfiler:
    """An ``on_step`` hook that profiles the steps after ``first`` (numbered as the trainer counts them: the hook
    sees 1 after the first step), ``steps`` of them."""

    def __init__(self, first: int, steps: int) -> None:
        self.first, self.steps = first, steps
        cuda = torch.cuda.is_available()
        self._profile = profile(activities=[ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])])
        self._state = "waiting"

    def __call__(self, step: int) -> None:
        if step == self.first and self._state == "waiting":
            self._profile.__enter__()
            self._state = "on"
        elif step == self.first + self.steps and self._state == "on":
            self._profile.__exit__(None, None, None)
            self._state = "done"

    def _events(self) -> list:
        if self._state != "done":
            raise RuntimeError(f"profiled steps {self.first + 1}-{self.first + self.steps} did not all run")
        return list(self._profile.events())

    def eager_ops(self, optimizer: bool = False) -> dict[str, float]:
        """ATen ops a step called outside any compiled graph, by name, per step: the outermost ones only (an op
        inside another op is part of it); those of ``optimizer.step()`` (its profiler range) apart, with
        ``optimizer=True`` (nanoGPT's loop fuses AdamW on CUDA only, the project's on a CPU too)."""
        counts: Counter[str] = Counter()
        for event in self._events():
            if event.device_type == DeviceType.CPU and event.name.startswith("aten::"):
                where = _outside_graph(event)
                if where is not None and (where == "optimizer") == optimizer:
                    counts[event.name] += 1
        return {name: count / self.steps for name, count in sorted(counts.items())}

    def device_events(self) -> float | None:
        """Events on the GPU a step (kernels, copies, sets); None where nothing ran on CUDA."""
        events = [event for event in self._events() if event.device_type == DeviceType.CUDA]
        return len(events) / self.steps if events else None


def _outside_graph(event) -> str | None:
    """Where an outermost eager op ran ("optimizer": in ``optimizer.step()``; "step": elsewhere), or None for an
    op inside another op or inside a compiled graph."""
    where, parent = "step", event.cpu_parent
    while parent is not None:
        if parent.name.startswith("aten::") or parent.name.startswith(COMPILED):
            return None
        if parent.name.startswith(OPTIMIZER):
            where = "optimizer"
        parent = parent.cpu_parent
    return where
