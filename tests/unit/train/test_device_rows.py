"""Stacked replicas' training rows on the device (assocmem.train.device_rows, issue 41): the batches a turn gathers
are the replicas' own batches, stacked and padded as the host stacks them, whatever the step (across and spanning
epochs), the replicas' seeds and row ranges, and which replicas are frozen."""

from __future__ import annotations

import json
import math
import sys

import numpy as np
import pytest
import torch
from helpers import ROOT, make_token_dir
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from assocmem.stopping import IGNORE
from assocmem.tokenstore import TokenStore
from assocmem.train.batches import SequenceBatches, WindowBatches, scored_targets, static_shape
from assocmem.train.device_rows import DeviceRows

ROWS, BATCH = 6, 4  # a batch of 4 rounded up to micro-batches of 3


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> TokenStore:
    return TokenStore(make_token_dir(tmp_path_factory.mktemp("rows"), repeat=4), "train")


def sources(store: TokenStore) -> list[SequenceBatches]:
    n = len(store)
    return [SequenceBatches(store, 0, n, BATCH, seed=1), SequenceBatches(store, 0, n, BATCH, seed=2),  # one table
            SequenceBatches(store, 2, n - 1, BATCH, seed=1)]  # other rows: a second table


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(step=st.integers(0, 400), active=st.lists(st.booleans(), min_size=3, max_size=3), lockstep=st.booleans())
def test_a_turn_gathers_each_replicas_own_batch(store, step, active, lockstep):
    """Replicas of other row ranges, each from its own rows; replicas in lockstep (as many rows, as large a batch:
    a group's seeds) from one slice of their epoch's permutations."""
    feeds = sources(store)
    if lockstep:
        feeds[2] = SequenceBatches(store, 0, len(store), BATCH, seed=3)
    width = int(store.lengths().max()) - 1
    rows = DeviceRows(feeds, ROWS, width, torch.device("cpu"))
    assert rows._lockstep is lockstep
    index, counts = rows.index(step, active)
    inputs, targets = rows.gather(torch.from_numpy(index))
    assert inputs.shape == targets.shape == (3, ROWS, width)
    for k, (source, on) in enumerate(zip(feeds, active, strict=True)):
        if not on:
            assert counts[k] == 0 and bool((targets[k] == IGNORE).all()) and bool((inputs[k] == 0).all())
            continue
        batch = source.batch(step)
        longest = batch[0].shape[1]
        want_inputs, want_targets = static_shape(batch, ROWS, width)
        assert torch.equal(targets[k], want_targets) and counts[k] == scored_targets(batch)
        assert torch.equal(inputs[k, :, :longest], want_inputs[:, :longest])  # past it: unscored, unseen
        assert bool((inputs[k, BATCH:] == 0).all())  # the micro-batch rounding: the padding row


def test_replicas_reading_the_same_rows_share_one_table(store):
    rows = DeviceRows(sources(store), ROWS, int(store.lengths().max()) - 1, torch.device("cpu"))
    assert rows.pad_row == len(store) + (len(store) - 3) and len(rows.inputs) == rows.pad_row + 1
    assert rows.offsets == [0, 0, len(store) - 2]
    assert np.array_equal(rows.scored[:-1], [(t != IGNORE).sum() for t in rows.targets[:-1]])


def test_sources_that_are_not_whole_sequences_stay_on_the_host(store):
    windows = WindowBatches(store, BATCH, 8, seed=1)
    assert DeviceRows.of([sources(store)[0], windows], ROWS, 8, torch.device("cpu")) is None
    assert isinstance(DeviceRows.of(sources(store), ROWS, int(store.lengths().max()) - 1, torch.device("cpu")),
                      DeviceRows)


def test_the_benchmark_times_both_feeds_and_both_turns(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_device_rows

    rec = bench_device_rows.main(["--turns", "3", "--rounds", "1", "--out", str(tmp_path / "rows.json")])
    assert json.loads((tmp_path / "rows.json").read_text()) == rec
    assert rec["replicas"] == 8 and rec["n_facts"] == 16384
    assert all(rec[f"{arm}_us"] > 0 for arm in ("host", "rows", "turn_host", "turn_rows"))
    assert math.isclose(rec["ratio_turn_rows_over_turn_host"], rec["turn_rows_us"] / rec["turn_host_us"], rel_tol=1e-12)
