"""A job's CUDA start (assocmem.runtime.cuda_start): timed and logged once per process on a CUDA device, nothing on
the CPU, read back by gpu_check.py; every stage of the main run that can run on a GPU starts it where it resolves
its device."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from assocmem import stages
from assocmem.runtime import cuda_start
from assocmem.runtime.cuda_start import cuda_ready, parse_cuda_start


def test_the_cpu_is_left_alone(monkeypatch) -> None:
    monkeypatch.setattr(torch, "empty", lambda *a, **k: pytest.fail("no allocation on the CPU"))
    assert cuda_ready("cpu") is None and cuda_ready(torch.device("cpu")) is None


@pytest.fixture
def fake_cuda(monkeypatch) -> list[str]:
    """torch.cuda as if one uninitialised H200 were there: the calls cuda_ready makes, recorded."""
    calls: list[str] = []
    monkeypatch.setattr(cuda_start, "_READIED", set())
    monkeypatch.setattr(torch, "empty", lambda *shape, device: calls.append(f"empty {device}"))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(f"synchronize {device}"))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")
    return calls


def test_a_cuda_device_s_context_is_created_timed_and_logged(fake_cuda, caplog) -> None:
    with caplog.at_level(logging.INFO, logger="assocmem"):
        seconds = cuda_ready("cuda:1")
    assert fake_cuda == ["empty cuda:1", "synchronize cuda:1"]
    assert seconds is not None and seconds >= 0
    assert "CUDA: context on cuda:1 (NVIDIA H200) created in" in caplog.text
    assert parse_cuda_start(caplog.text) == pytest.approx(seconds, abs=0.005)


def test_a_device_readied_once_is_not_readied_again(fake_cuda) -> None:
    assert cuda_ready("cuda") is not None and len(fake_cuda) == 2
    assert cuda_ready("cuda") is None and len(fake_cuda) == 2


def test_cuda_initialised_by_another_call_still_has_the_context_created_and_timed(fake_cuda, monkeypatch) -> None:
    """A training's memory check reads the GPU's properties first (torch's lazy init, no context): the stage's
    CUDA start is still timed and logged, as the main run's record needs (benchmarks/gpu_check.py cpu)."""
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert cuda_ready("cuda") is not None and fake_cuda == ["empty cuda", "synchronize cuda"]


@given(seconds=st.floats(0, 1e4, allow_nan=False))
def test_the_line_reads_back_to_its_printed_rounding(seconds: float) -> None:
    line = f"2026-11-29 13:00:00,000 INFO assocmem: CUDA: context on cuda (NVIDIA H200) created in {seconds:.2f} s"
    assert parse_cuda_start(f"before\n{line}\nafter") == float(f"{seconds:.2f}")
    assert parse_cuda_start("train L4/pct100: val CE 1.043 in 27.3 s") is None


@pytest.fixture
def started(monkeypatch) -> list[str]:
    devices: list[str] = []
    monkeypatch.setattr(cuda_start, "cuda_ready", lambda device: devices.append(str(device)))
    return devices


def test_evaluate_and_activations_start_the_device_they_resolved(started, monkeypatch, tmp_path) -> None:
    import assocmem.activations.decoder as decoder
    import assocmem.evaluation as evaluation
    import assocmem.train as train

    monkeypatch.setattr(train, "load_model", lambda path, device, expect=None: SimpleNamespace(cfg=None))
    monkeypatch.setattr(evaluation, "evaluate_files", lambda model, store, files: {})
    monkeypatch.setattr(decoder, "check_decoder_activations_memory", lambda *a: None)
    monkeypatch.setattr(decoder, "dump_decoder_activations", lambda *a, **k: None)
    monkeypatch.setattr(stages, "_activation_shape", lambda out_dir: "")
    stages.evaluate({"threads": 1, "files": {}, "device": "cpu", "expect": None}, tmp_path / "m.pt", tmp_path,
                    tmp_path)
    acts = {key: None for key in ("heldout_split", "n_chunks", "chunk_len", "layers", "batch_size", "radius_chunks",
                                  "checkpoint")}
    stages.activations({"threads": 1, "activations": {**acts, "device": "cpu"}, "expect": None, "seed": 0},
                       tmp_path / "m.pt", tmp_path, tmp_path)
    assert started == ["cpu", "cpu"]


def test_neighbours_starts_its_engine_s_device(started, tmp_path: Path) -> None:
    acts = tmp_path / "acts"
    acts.mkdir()
    rows = np.random.default_rng(0).normal(size=(1, 60, 4)).astype(np.float32)
    for name in ("train", "heldout", "radius"):
        np.save(acts / f"{name}.npy", rows)
    meta = {"layers": ["final_ln"], "d_model": 4, "splits": {"train": {"n_chunks": 60}, "heldout": {"n_chunks": 60}},
            "radius": {"n_chunks": 60}}
    (acts / "meta.json").write_text(json.dumps(meta))
    cfg = {"k": 3, "fractions": [1.0], "device": "cpu", "method": "exact"}
    stages.neighbours({"neighbours": cfg, "seed": 0, "threads": 1}, acts, tmp_path / "out")
    assert started == ["cpu"]
