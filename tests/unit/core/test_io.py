import numpy as np
import pandas as pd
import pytest

from assocmem.io import (
    AssocmemError,
    atomic_path,
    read_json,
    sha256_file,
    write_json,
    write_npy,
    write_parquet,
)


def test_atomic_path_leaves_nothing_on_failure(tmp_path):
    dest = tmp_path / "out.txt"
    with pytest.raises(RuntimeError), atomic_path(dest) as tmp:
        tmp.write_text("partial")
        raise RuntimeError("killed")
    assert not dest.exists()
    assert list(tmp_path.iterdir()) == []


def test_atomic_path_replaces_existing(tmp_path):
    dest = tmp_path / "out.txt"
    dest.write_text("old")
    with atomic_path(dest) as tmp:
        tmp.write_text("new")
        assert dest.read_text() == "old"
    assert dest.read_text() == "new"


def test_writers_roundtrip(tmp_path):
    write_json(tmp_path / "a.json", {"x": np.float32(1.5), "y": np.arange(3)})
    assert read_json(tmp_path / "a.json") == {"x": 1.5, "y": [0, 1, 2]}
    write_npy(tmp_path / "a.npy", np.eye(2))
    assert np.array_equal(np.load(tmp_path / "a.npy"), np.eye(2))
    write_parquet(tmp_path / "a.parquet", pd.DataFrame({"a": [1, 2]}))
    assert pd.read_parquet(tmp_path / "a.parquet")["a"].tolist() == [1, 2]
    assert len(sha256_file(tmp_path / "a.npy")) == 64


def test_read_json_errors_name_the_file(tmp_path):
    with pytest.raises(AssocmemError, match="missing file"):
        read_json(tmp_path / "none.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(AssocmemError, match="bad.json"):
        read_json(bad)
