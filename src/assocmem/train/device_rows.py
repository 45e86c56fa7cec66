"""Stacked replicas' training sequences held on the device, each turn's batches gathered there (issue 41).

A turn of K stacked replicas built K batches on the host, padded and stacked them and copied (K, rows, width)
inputs and targets to the device: on a 2-core AMD EPYC Zen 4 host 0.34 ms of host time a turn for the decisive
column's 8 replicas of 64 facts, more than the whole turn ten minutes on one GPU leave one group after another
(0.16-0.28 ms); with the rows on the device, 0.014 ms (``benchmarks/bench_device_rows.py``, benchmarks/README.md).
Where every replica draws whole sequences (:class:`~assocmem.train.batches.SequenceBatches`) their rows are few
(16,384 facts of 10 tokens are 2.4 MB as inputs and targets), so they go to the device once, padded to the step's
static width; a turn then picks each replica's rows on the host (its epoch's permutation, as the replica's own batch
source picks them; replicas in lockstep, a group's seeds, in one slice), uploads one (K, rows) index, and the CUDA
graph gathers inputs and targets from it. Replicas that read the same rows of the same store share one table. A
frozen replica, and the rows that round a batch up to whole micro-batches, read a last row of padding that scores
nothing.

The gathered batch is :func:`~assocmem.train.batches.static_stack`'s of the replicas' own batches, except past the
batch's longest row: there the host's batch holds token 0, a table row token 0, the pad id (up to the table's
longest row) or the sequence's last token (an input of no batch row, whose target is padding). No scored target sees
those positions (attention is causal) and they score nothing, so the losses and gradients are the same (bit for bit
on the CPU: tested)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from assocmem.stopping import IGNORE
from assocmem.train.batches import BatchSource, SequenceBatches, static_shape, to_lm_batch


def _table(source: SequenceBatches, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every training sequence of ``source`` as one row of inputs and targets, padded to ``width`` tokens as a
    batch is (:func:`static_shape`)."""
    store, rows = source.store, source.stop - source.start
    batch = to_lm_batch(store.padded_batch(np.arange(source.start, source.stop)), store.pad_id, source.loss_from)
    return static_shape(batch, rows, width)


def _key(source: SequenceBatches) -> tuple:
    """What a source's table holds: the same key, the same rows."""
    return str(source.store.store_dir), source.store.split, source.start, source.stop, source.loss_from


class DeviceRows:
    """The replicas' training sequences on ``device`` (:meth:`of`); :meth:`index` picks a turn's rows on the host,
    :meth:`gather` reads them on the device."""

    def __init__(self, sources: Sequence[SequenceBatches], rows: int, width: int, device: torch.device) -> None:
        self.sources, self.rows = list(sources), rows
        offsets: dict[tuple, int] = {}
        inputs, targets = [], []
        for source in self.sources:
            if _key(source) not in offsets:
                offsets[_key(source)] = sum(len(t) for t in inputs)
                table = _table(source, width)
                inputs.append(table[0])
                targets.append(table[1])
        self.pad_row = sum(len(t) for t in inputs)  # a last row of padding: frozen replicas, micro-batch rounding
        inputs.append(torch.zeros((1, width), dtype=torch.long))
        targets.append(torch.full((1, width), IGNORE, dtype=torch.long))
        host_targets = torch.cat(targets)
        self.scored = (host_targets != IGNORE).sum(dim=1).numpy()  # per row, for the host's counts
        self.inputs, self.targets = torch.cat(inputs).to(device), host_targets.to(device)
        self.offsets = [offsets[_key(source)] - source.start for source in self.sources]
        # replicas with as many rows and as large a batch step through their epochs together: one permutation row
        # each, a turn inside an epoch then one slice of all of them (the rows their own sources pick)
        self._lockstep = len({(s.stop - s.start, s.batch_size) for s in self.sources}) == 1
        self._epoch: tuple[int, np.ndarray] | None = None

    @classmethod
    def of(cls, sources: Sequence[BatchSource], rows: int, width: int,
           device: torch.device) -> DeviceRows | None:
        """The sources' rows on the device where every source draws whole sequences, else None."""
        if not all(isinstance(source, SequenceBatches) for source in sources):
            return None
        return cls(sources, rows, width, device)  # type: ignore[arg-type]

    def index(self, step: int, active: Sequence[bool]) -> tuple[np.ndarray, list[int]]:
        """The table rows of each replica's batch of ``step`` as a (K, rows) array (a frozen replica's all padding)
        and each replica's scored targets."""
        index = np.full((len(self.sources), self.rows), self.pad_row, dtype=np.int64)
        first = self.sources[0]
        epoch, offset = divmod(step * first.batch_size, first.stop - first.start)
        if self._lockstep and offset + first.batch_size <= first.stop - first.start:
            index[:, :first.batch_size] = self._permutations(epoch)[:, offset:offset + first.batch_size]
            index[~np.asarray(active, dtype=bool)] = self.pad_row
        else:
            for k, (source, shift, on) in enumerate(zip(self.sources, self.offsets, active, strict=True)):
                if on:
                    picked = source._rows(step) + shift
                    index[k, :len(picked)] = picked
        return index, self.scored[index].sum(axis=1).tolist()

    def _permutations(self, epoch: int) -> np.ndarray:
        """(K, rows) table rows of every replica's permutation of ``epoch`` (each its source's), kept an epoch."""
        if self._epoch is None or self._epoch[0] != epoch:
            self._epoch = (epoch, np.stack([source._permutation(epoch) + source.start + shift
                                            for source, shift in zip(self.sources, self.offsets, strict=True)]))
        return self._epoch[1]

    def gather(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and targets (K, rows, width) of a device ``index`` from :meth:`index` (``index_select``, as an
        embedding reads its table: no host sync, so a CUDA graph can hold it)."""
        shape = (*index.shape, self.inputs.shape[1])
        flat = index.reshape(-1)
        return (torch.index_select(self.inputs, 0, flat).view(shape),
                torch.index_select(self.targets, 0, flat).view(shape))
