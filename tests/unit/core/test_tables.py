"""assocmem.tables: the columns and row counts a reader expects of each table hold for what the producers write."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from assocmem import layout
from assocmem.errors import AssocmemError
from assocmem.knn import SUMMARY_COLUMNS, Engine, search_activations
from assocmem.knn.radius import RADIUS_COLUMNS as RADIUS_FRAME_COLUMNS
from assocmem.knn.radius import radius_searches
from assocmem.tables import (
    NN_HELDOUT_COLUMNS,
    NN_SELF_COLUMNS,
    NN_SUMMARY_COLUMNS,
    RADIUS_COLUMNS,
    check_neighbour_tables,
    metric_rows,
    radius_rows,
)

LAYERS = ["emb", "block1", "final_ln"]
CFG = {"k": 3, "fractions": [0.3, 0.5, 1.0], "device": "cpu", "method": "exact"}


def at(name: str) -> Path:
    return layout.path("results", name, exp="qf", model="tiny", subset="pct100")


@pytest.fixture(scope="module")
def searched():
    rng = np.random.default_rng(0)
    train = rng.normal(size=(len(LAYERS), 47, 8)).astype(np.float32)
    heldout = rng.normal(size=(len(LAYERS), 13, 8)).astype(np.float32)
    self_df, held_df, summary = search_activations(train, heldout, LAYERS, CFG, seed=1)
    meta = {"layers": LAYERS, "splits": {"train": {"n_chunks": 47}, "heldout": {"n_chunks": 13}}}
    radius, numbers = radius_searches(train[-1], CFG["fractions"], 1, engine=Engine("faiss"))
    tables = {"nn_summary": summary, "nn_self": self_df, "nn_heldout": held_df, "nn_radius": radius}
    return tables, meta, numbers


def test_the_columns_are_the_producers(searched):
    tables, _, _ = searched
    assert set(NN_SUMMARY_COLUMNS) == set(tables["nn_summary"].columns) > set(SUMMARY_COLUMNS)
    assert set(NN_SELF_COLUMNS) == set(tables["nn_self"].columns)
    assert set(NN_HELDOUT_COLUMNS) == set(tables["nn_heldout"].columns)
    assert list(RADIUS_COLUMNS) == RADIUS_FRAME_COLUMNS


def test_the_neighbour_row_counts_are_the_producers(searched):
    tables, meta, numbers = searched
    check_neighbour_tables(tables, meta, numbers, CFG, at)  # passes
    assert len(tables["nn_summary"]) == 12


@pytest.mark.parametrize("name", ["nn_summary", "nn_self", "nn_heldout", "nn_radius"])
def test_a_table_missing_its_last_row_is_refused_naming_it(searched, name):
    tables, meta, numbers = searched
    cut = {**tables, name: tables[name].iloc[:-1]}
    with pytest.raises(AssocmemError) as err:
        check_neighbour_tables(cut, meta, numbers, CFG, at)
    message = str(err.value)
    expected = len(tables[name])
    assert message.startswith(f"{at(name)} has {expected - 1} rows, expected {expected} (")
    assert "damaged or cut; delete" in message and "--forcerun neighbours" in message


@pytest.mark.parametrize("max_size", [None, 20])
def test_radius_rows_with_and_without_the_gain_free_set(max_size):
    vectors = np.random.default_rng(2).normal(size=(40, 6)).astype(np.float32)
    vectors[5] = vectors[4]  # a duplicate: one distinct vector fewer
    affine = (np.full(6, 2.0), np.zeros(6))
    for given in (None, affine):
        frame, numbers = radius_searches(vectors, [0.01, 0.5, 1.0], 0, given, max_size=max_size, engine=Engine("faiss"))
        assert len(frame) == radius_rows(numbers)  # 0.01 of 39 is 0 rows: skipped


@pytest.mark.parametrize(("steps", "interval", "rows"), [(60, 20, 3), (10, 4, 3), (3, 20, 1), (8, 4, 2)])
def test_metric_rows(steps, interval, rows):
    assert metric_rows(steps, interval) == rows
