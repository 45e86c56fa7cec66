"""train.compile on a CPU: the compiled run (Inductor's kernels, its products included) trains as the eager one
does, to fp32 rounding, and records that the products were Inductor's; its loss scaling is part of the compiled
graph, so the step calls no more ops of its own than clipping and the loss sum (issue 41: each is a kernel on a
GPU)."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
from test_train import make_job

from assocmem.testing.step_ops import StepProfiler

pytestmark = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                                reason="Inductor's CPU kernels need a C++ compiler")


def test_a_compiled_cpu_run_follows_the_eager_run(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    curves, ops = {}, {}
    for compiled in (False, True):
        name = "compiled" if compiled else "eager"
        profiler = StepProfiler(first=4, steps=2)  # steps 5 and 6: after the evaluation at 4, before the one at 8
        summary = make_job(tmp_path, run_name=name, compile=compiled, max_steps=8, eval_interval=4).run(profiler)
        curves[name], ops[name] = (pd.read_csv(tmp_path / name / "metrics.csv")[["train_loss", "val_ce"]].to_numpy(),
                                   profiler.eager_ops())
        how = json.loads((tmp_path / name / "timing.json").read_text())["gemm_choice"]["how"]
        assert (how == "compile") is compiled and summary["steps"] == 8
    assert curves["compiled"] == pytest.approx(curves["eager"], rel=1e-5)
    # eager, every op of the step is counted, the scaling's div and its backward's among them
    assert ops["eager"]["aten::div"] >= 2 and sum(ops["eager"].values()) > 2 * sum(ops["compiled"].values())
    # compiled, what is left outside the graph: clipping (its one mul and no div) and the loss sum
    assert "aten::div" not in ops["compiled"] and "aten::zeros" not in ops["compiled"]
    assert ops["compiled"]["aten::mul"] == 1 and ops["compiled"]["aten::add_"] == 1
