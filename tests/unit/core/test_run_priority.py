"""The jobs' priority (assocmem.runtime.run_priority, workflow/rules/common_scheduling.smk): the costliest training and
its chain start first, so that on few cores the longest path of the DAG does not wait behind short jobs."""

from __future__ import annotations

import re

from helpers import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st

from assocmem.runtime import run_priority

L2 = {"n_layer": 2, "d_model": 64, "n_head": 4, "d_ff": 256}
L4 = {**L2, "n_layer": 4}
DEFAULT_TRAIN = {"max_steps": 7000, "batch_size": 32}


def test_the_default_runs_start_longest_first() -> None:
    """Measured on 2 cores (wall s of training): L4/pct100 260, L2/pct100 156, L4/pct1 87, L2/pct1 49."""
    order = sorted([("L2", 0.01), ("L4", 1.0), ("L2", 1.0), ("L4", 0.01)],
                   key=lambda run: -run_priority(L4 if run[0] == "L4" else L2, DEFAULT_TRAIN, run[1]))
    assert order[0] == ("L4", 1.0) and order[-1] == ("L2", 0.01)


@settings(max_examples=40, deadline=None)
@given(layers=st.integers(1, 24), width=st.sampled_from([16, 64, 256, 1024]), steps=st.integers(1, 10**6),
       batch=st.integers(1, 512), fraction=st.floats(0.001, 1.0))
def test_more_work_never_lowers_the_priority(layers, width, steps, batch, fraction) -> None:
    model = {"n_layer": layers, "d_model": width, "d_ff": 4 * width}
    train = {"max_steps": steps, "batch_size": batch}
    base = run_priority(model, train, fraction)
    assert run_priority({**model, "n_layer": layers + 1}, train, fraction) > base
    assert run_priority(model, {**train, "max_steps": 2 * steps}, fraction) > base
    assert run_priority(model, train, min(1.0, 2 * fraction)) >= base
    # a tenth of the fraction never outweighs doubling the work (log10 2 = 0.30 > 0.1)
    assert run_priority(model, {**train, "batch_size": 2 * batch}, 0.001) > run_priority(model, train, 1.0)


def test_each_stage_of_a_runs_chain_carries_its_priority() -> None:
    """train, activations and neighbours form a run's chain; evaluate is a leaf that only the report waits for, so
    it has none (priority 0): it fills cores the chains leave idle instead of delaying a chain (the record run at
    94aff19 started evaluate L4/pct100 before its activations, and the neighbours after them waited 20 s)."""
    rules = {"train.smk": 2, "activations.smk": 1, "neighbours.smk": 1, "evaluate.smk": 0}
    for name, count in rules.items():
        text = (ROOT / "workflow" / "rules" / name).read_text()
        assert len(re.findall(r"^\s+priority: priority_of_run$", text, re.M)) == count, name
