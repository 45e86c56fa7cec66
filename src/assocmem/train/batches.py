"""Training batches: padded whole sequences epoch by epoch, or nanoGPT-style random windows over a token stream.

The batch of step ``s`` is a pure function of (seed, s), so a resumed run sees the batches an uninterrupted run sees.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
from torch.nn import functional as F

from assocmem.errors import AssocmemError
from assocmem.stopping import IGNORE
from assocmem.tokenstore import TokenStore

Batch = tuple[torch.Tensor, torch.Tensor]
RECALL_SET = "recall"  # every training sequence, for the recall of a memorisation run (not a CE evaluation)
RECALL_BATCH = 256

class BatchSource(Protocol):
    def batch(self, step: int) -> Batch: ...


class SequenceBatches:
    """Padded batches of whole sequences, drawn epoch by epoch from rows [start, stop) of a sequences store.

    Epoch e visits the rows in the order of a permutation seeded by (seed, e), computed once per epoch."""

    def __init__(self, store: TokenStore, start: int, stop: int, batch_size: int, seed: int,
                 loss_from: int = 0) -> None:
        if stop <= start:
            raise AssocmemError(f"no training sequences in rows [{start}, {stop}) of {store.store_dir}")
        self.store, self.start, self.stop, self.batch_size, self.seed = store, start, stop, batch_size, seed
        self.loss_from = loss_from  # targets before this position of a sequence are not scored (store.loss_from)
        self._cached: tuple[int, np.ndarray] | None = None

    def _permutation(self, epoch: int) -> np.ndarray:
        if self._cached is None or self._cached[0] != epoch:
            self._cached = (epoch, np.random.default_rng([self.seed, epoch]).permutation(self.stop - self.start))
        return self._cached[1]

    def rows(self, step: int) -> list[int]:
        """Store rows of the batch of ``step``."""
        return self._rows(step).tolist()

    def _rows(self, step: int) -> np.ndarray:
        """:meth:`rows` as an array, epoch by epoch (a batch spans more than one where it crosses an epoch's end):
        a loop over the positions cost a stacked turn of 8 small replicas 0.4 ms of host time."""
        n = self.stop - self.start
        epoch, offset = divmod(step * self.batch_size, n)
        if offset + self.batch_size <= n:  # within one epoch: a slice of its permutation
            return self._permutation(epoch)[offset:offset + self.batch_size] + self.start
        epochs, offsets = np.divmod(np.arange(step * self.batch_size, (step + 1) * self.batch_size), n)
        rows = np.empty(self.batch_size, dtype=np.int64)
        for epoch in range(int(epochs[0]), int(epochs[-1]) + 1):
            inside = epochs == epoch
            rows[inside] = self._permutation(epoch)[offsets[inside]]
        return rows + self.start

    def batch(self, step: int) -> Batch:
        return to_lm_batch(self.store.padded_batch(self._rows(step)), self.store.pad_id, self.loss_from)


@dataclass(frozen=True)
class WindowBatches:
    """nanoGPT-style random windows of ``block_size`` tokens from a token store (any object with
    ``sample_windows(rng, batch_size, block_size)``); the windows of step s depend only on (seed, s)."""

    store: Any
    batch_size: int
    block_size: int
    seed: int

    def batch(self, step: int) -> Batch:
        x, y = self.store.sample_windows(np.random.default_rng([self.seed, step]), self.batch_size, self.block_size)
        return torch.from_numpy(x), torch.from_numpy(y)


def fixed_windows(store: Any, n_batches: int, batch_size: int, block_size: int, seed: int) -> list[Batch]:
    """The same evaluation windows at every eval step."""
    source = WindowBatches(store, batch_size, block_size, seed=seed + 7919)
    return [source.batch(i) for i in range(n_batches)]


def to_lm_batch(padded: np.ndarray, pad_id: int = 0, loss_from: int = 0) -> Batch:
    """Inputs and next-token targets of padded sequences; padding, and the tokens before position ``loss_from`` of
    each sequence (context only, e.g. a fact's key), are not scored."""
    inputs, targets = padded[:, :-1].copy(), padded[:, 1:].copy()  # numpy: a tenth of torch's per-op cost here
    targets[targets == pad_id] = IGNORE
    targets[:, :max(loss_from - 1, 0)] = IGNORE  # target column j is the token at position j + 1
    return torch.from_numpy(inputs), torch.from_numpy(targets)


def fixed_batches(store: TokenStore, rows: np.ndarray, batch_size: int) -> list[Batch]:
    return [to_lm_batch(store.padded_batch(rows[i:i + batch_size]), store.pad_id, store.loss_from)
            for i in range(0, len(rows), batch_size)]


def static_shape(batch: Batch, rows: int, width: int) -> Batch:
    """``batch`` padded to ``rows`` sequences of ``width`` tokens: a CUDA graph replays the shapes it captured. The
    padded targets are not scored and causal attention keeps padded positions from reaching earlier ones, so the
    summed loss and the gradients are the unpadded batch's, to rounding."""
    inputs, targets = batch
    if inputs.shape[0] > rows or inputs.shape[1] > width:
        raise ValueError(f"a batch of shape {tuple(inputs.shape)} does not fit the static shape {(rows, width)}")
    pad = (0, width - inputs.shape[1], 0, rows - inputs.shape[0])
    if not any(pad):
        return batch
    return F.pad(inputs, pad, value=0), F.pad(targets, pad, value=IGNORE)


def scored_targets(batch: Batch | None) -> int:
    """The targets ``batch`` scores (none for a frozen replica's None)."""
    return 0 if batch is None else int((batch[1] != IGNORE).sum())


def static_stack(batches: Sequence[Batch | None], rows: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Stacked replicas' batches as (K, rows, width) inputs and targets: each padded by :func:`static_shape`, a frozen
    replica's (None) all padding, so it scores nothing and gets no gradient."""
    inputs = torch.zeros((len(batches), rows, width), dtype=torch.long)
    targets = torch.full_like(inputs, IGNORE)
    for k, batch in enumerate(batches):
        if batch is not None:
            inputs[k], targets[k] = static_shape(batch, rows, width)
    return inputs, targets


def static_width(source: BatchSource, max_len: int) -> int:
    """The width of every batch ``source`` can give: its windows' length, its longest sequence's inputs, or (for
    any other source) the model's ``max_len``."""
    if isinstance(source, WindowBatches):
        return source.block_size
    if isinstance(source, SequenceBatches):
        return int(source.store.lengths()[source.start:source.stop].max()) - 1
    return max_len


def pinned(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``tensor`` ready for a ``non_blocking`` copy to ``device``: on CUDA a pinned copy, so the host queues the copy
    and goes on (from pageable memory "the driver may synchronize" with the stream, i.e. the host may wait for the
    device's earlier work: the CUDA runtime API's "API synchronization behavior"); torch's caching host allocator
    keeps the pinned block until the copy has run. Elsewhere ``tensor`` itself."""
    return tensor.pin_memory() if device.type == "cuda" else tensor


def upload(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor on ``device``, its copy queued without waiting for the device (:func:`pinned`)."""
    return pinned(tensor.contiguous(), device).to(device, non_blocking=True)


class DeviceBatches:
    """This rank's share of each step's batch, on the device, and the count of scored targets in the whole batch
    (counted on the host copy: no sync). On CUDA :meth:`prefetch` builds the next step's batch and starts its copy
    from pinned memory while the current step's kernels run; elsewhere it does nothing (the batch is used in place).
    The batch of a step is a pure function of the step, so a prefetched batch is the one the step would build."""

    def __init__(self, source: BatchSource, device: torch.device, rank: int = 0, world: int = 1) -> None:
        self.source, self.device, self.rank, self.world = source, device, rank, world
        self._ahead: tuple[int, Batch, int] | None = None

    def get(self, step: int) -> tuple[Batch, int]:
        ahead = self._ahead if self._ahead is not None and self._ahead[0] == step else self._load(step)
        self._ahead = None
        return ahead[1], ahead[2]

    def prefetch(self, step: int) -> None:
        if self.device.type == "cuda":
            self._ahead = self._load(step)

    def _load(self, step: int) -> tuple[int, Batch, int]:
        inputs, targets = self.source.batch(step)
        n_targets = int((targets != IGNORE).sum())
        local = inputs[self.rank::self.world], targets[self.rank::self.world]
        if self.device.type == "cuda":  # elsewhere the batch is used in place
            local = tuple(upload(t, self.device) for t in local)
        return step, local, n_targets
