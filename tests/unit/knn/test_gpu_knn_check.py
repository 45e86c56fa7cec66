"""benchmarks/gpu_knn_check.py's dry run on the CPU: every measurement is printed and kept, and the torch engine's
ids equal the faiss path's (the script the GPU check calls: benchmarks/gpu_check.sh)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import ROOT


def test_the_dry_run_measures_and_agrees(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                         capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    monkeypatch.setattr("os.cpu_count", lambda: 1)  # the script takes every core: one on a shared test box
    import gpu_knn_check

    rows = gpu_knn_check.main(["--dry-run", "--n", "600", "--dim", "16", "--out", str(tmp_path)])
    kept = [json.loads(line) for line in (tmp_path / "knn_check.jsonl").read_text().splitlines()]
    assert kept == rows
    assert [row["measure"] for row in rows] == ["torch_search", "torch_knn", "faiss_knn", "faiss_flat", "agreement",
                                                "host_finite_check", "host_duplicates", "host_mean",
                                                "host_centred_copy", "host_squared_norms"]
    assert all(row["seconds"] >= 0 and row["queries"] == 600 for row in rows if row["measure"].startswith("host_"))
    assert all(row["n"] == 600 and row["dim"] == 16 and row["k"] == 10 and row["cpu_threads"] == 1 for row in rows)
    assert all(row["seconds"] > 0 for row in rows[:4])
    agreement = next(row for row in rows if row["measure"] == "agreement")
    assert agreement["queries"] == 600 and agreement["ids_equal_faiss_knn"] == 1.0  # the same contract
    assert agreement["recall_vs_faiss_flat"] == 1.0
    printed = capsys.readouterr().out
    assert "ids equal on 600 queries: 100.0000% against knn on faiss" in printed


def test_faiss_is_timed_on_a_sample_and_extrapolated_past_its_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import gpu_knn_check

    sample = gpu_knn_check.query_sample(80_000)
    assert len(sample) == gpu_knn_check.MIN_SAMPLE and len(set(sample.tolist())) == len(sample)
    row, ids = gpu_knn_check.faiss_measurement("slow", lambda rows: rows, 80_000, sample, budget_s=0.0)
    assert row["extrapolated"] and row["queries"] == len(sample) and (ids == sample).all()
    row, _ = gpu_knn_check.faiss_measurement("fast", lambda rows: rows, 80_000, sample, budget_s=1e6)
    assert not row["extrapolated"] and row["queries"] == 80_000
