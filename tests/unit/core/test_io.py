import numpy as np
import pandas as pd
import pytest

from assocmem.io import (
    AssocmemError,
    atomic_path,
    count_nonfinite,
    expect_rows,
    load_npy,
    read_json,
    read_table,
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


def test_count_nonfinite_reads_a_memory_map_slice_by_slice(tmp_path):
    array = np.zeros((3, 50, 4), dtype=np.float32)
    array[0, 1, 2], array[2, 49, 3], array[1, 7, 0] = np.nan, np.inf, -np.inf
    np.save(tmp_path / "a.npy", array)
    mapped = np.load(tmp_path / "a.npy", mmap_mode="r")
    assert count_nonfinite(mapped, chunk_bytes=64) == 3  # 16 values a slice
    assert count_nonfinite(np.asfortranarray(array), chunk_bytes=40) == 3
    assert count_nonfinite(np.arange(5)) == 0 and count_nonfinite(np.zeros((0, 4), dtype=np.float32)) == 0


def test_load_npy_refuses_non_finite_values_naming_file_count_and_fix(tmp_path):
    array = np.ones((2, 10, 3), dtype=np.float32)
    array[1, 4, :2] = np.nan
    path = tmp_path / "qf" / "activations" / "tiny" / "pct100" / "train.npy"
    path.parent.mkdir(parents=True)
    np.save(path, array)
    with pytest.raises(AssocmemError) as err:
        load_npy(path, dtype="float32", shape=(2, 10, 3))
    message = str(err.value)
    assert f"{path}: 2 of 60 values are not finite (NaN or inf)" in message
    assert f"delete {path} and rerun" in message and "--forcerun activations" in message
    assert np.isnan(load_npy(path, finite=False)[1, 4, 0])  # the check can be skipped


def test_load_npy_accepts_finite_arrays(tmp_path):
    np.save(tmp_path / "ok.npy", np.eye(3, dtype=np.float32))
    assert load_npy(tmp_path / "ok.npy", dtype="float32", shape=(3, None)).shape == (3, 3)


def test_expect_rows_names_the_file_the_counts_the_reason_and_the_fix(tmp_path):
    path = tmp_path / "qf" / "neighbours" / "tiny" / "pct100" / "summary.csv"
    frame = pd.DataFrame({"a": range(11)})
    expect_rows(frame, path, 11, "why")  # the right count passes
    with pytest.raises(AssocmemError) as err:
        expect_rows(frame, path, 12, "4 layers x 3")
    assert str(err.value).startswith(f"{path} has 11 rows, expected 12 (4 layers x 3): damaged or cut; delete {path}")
    assert "--forcerun neighbours" in str(err.value)


def test_read_table_refuses_a_csv_cut_mid_row(tmp_path):
    path = tmp_path / "summary.csv"
    pd.DataFrame({"layer": ["emb", "final_ln"], "mean": [0.5, 0.25]}).to_csv(path, index=False)
    assert read_table(path, columns=("layer", "mean"))["mean"].tolist() == [0.5, 0.25]
    path.write_bytes(path.read_bytes()[:-3])  # "final_ln,0.2": a row that parses, with a changed number
    with pytest.raises(AssocmemError, match=r"summary\.csv is cut mid-row \(it does not end with a line break\)"):
        read_table(path)
    path.write_bytes(b"")
    with pytest.raises(AssocmemError, match=r"corrupt table .*summary\.csv"):
        read_table(path)
    write_parquet(tmp_path / "t.parquet", pd.DataFrame({"mean": [1.0]}))
    with pytest.raises(AssocmemError, match=r"lacks column\(s\) \['median'\]"):
        read_table(tmp_path / "t.parquet", columns=("mean", "median"))
