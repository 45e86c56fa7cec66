"""train.compile on a CPU: the compiled run (Inductor's kernels, its products included) trains as the eager one
does, to fp32 rounding, and records that the products were Inductor's."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
from test_train import make_job

pytestmark = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                                reason="Inductor's CPU kernels need a C++ compiler")


def test_a_compiled_cpu_run_follows_the_eager_run(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    curves = {}
    for compiled in (False, True):
        name = "compiled" if compiled else "eager"
        summary = make_job(tmp_path, run_name=name, compile=compiled, max_steps=8, eval_interval=4).run()
        curves[name] = pd.read_csv(tmp_path / name / "metrics.csv")[["train_loss", "val_ce"]].to_numpy()
        how = json.loads((tmp_path / name / "timing.json").read_text())["gemm_choice"]["how"]
        assert (how == "compile") is compiled and summary["steps"] == 8
    assert curves["compiled"] == pytest.approx(curves["eager"], rel=1e-5)
