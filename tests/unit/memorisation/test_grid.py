"""A memorisation grid's runs, analysis and stored patterns (issue 25): what counts as stored and as budget-limited,
the analysis JSON's power gate and sensitivity rows, and the patterns' exact nearest-neighbour distances."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from assocmem.errors import AssocmemError
from assocmem.facts.generate import FactsSpec, write_facts
from assocmem.facts.tokenize import tokenize_facts_dir, vocabulary
from assocmem.memorisation import boundary_power as bp
from assocmem.memorisation.analysis import analyse, headline, pattern_summary
from assocmem.memorisation.cells import grid_table, run_row, stored_at
from assocmem.memorisation.patterns import nearest_neighbour_distances, pattern_row, pattern_states
from assocmem.model import DecoderLM, ModelConfig
from assocmem.sweep.cells import SweepRunSpec
from assocmem.tokenstore import TokenStore

RUN = SweepRunSpec("M1", 1, 0.5, None, 100)
INFORMATION = {"information": {"bits_per_fact": 8.0}}


def summary(**kw) -> dict:
    base = {"recall": 0.97, "stored": True, "n_params": 4000, "subset": {"n_docs": 512}, "steps": 800,
            "max_steps": 8000, "stop_rule": "recall"}
    return {**base, **kw}


def metrics(recalls: list[float], interval: int = 100) -> pd.DataFrame:
    return pd.DataFrame({"step": interval * np.arange(1, len(recalls) + 1), "train_recall": recalls})


def test_a_run_that_hit_its_budget_unstored_is_budget_limited() -> None:
    row = run_row(RUN, summary(recall=0.5, stored=False, steps=8000, stop_rule="budget"),
                  metrics([0.1] * 79 + [0.5]), "x")
    assert row["budget_limited"] and not row["stored"] and row["label"] == "M1.s1" and row["n_facts"] == 512
    stored = run_row(RUN, summary(), metrics([0.2] * 7 + [0.97]), "x")
    assert stored["stored"] and not stored["budget_limited"] and stored["recall_half_budget"] == 0.97


def test_recall_in_the_summary_must_be_the_last_evaluations() -> None:
    with pytest.raises(AssocmemError, match="differs from the last evaluation"):
        run_row(RUN, summary(recall=0.97), metrics([0.2, 0.9]), "results/x/summary.json")
    with pytest.raises(AssocmemError, match="stop_at_recall"):
        run_row(RUN, {k: v for k, v in summary().items() if k != "recall"}, metrics([0.97]), "x")


def test_stored_at_a_lower_threshold_and_the_grid_table() -> None:
    runs = pd.DataFrame([run_row(SweepRunSpec(f"M{i}", 0, 1.0, None, 100), summary(
        n_params=n, recall=r, stored=r >= 0.95, stop_rule="recall" if r >= 0.95 else "budget",
        steps=800 if r >= 0.95 else 8000), metrics([r]), "x") for i, (n, r) in enumerate([(10, 0.5), (20, 0.92),
                                                                                             (40, 0.96)])])
    at_90 = stored_at(runs, 0.9)
    assert at_90["stored"].tolist() == [False, True, True]
    assert at_90["budget_limited"].tolist() == [True, False, False]
    table = grid_table(at_90)
    assert table[["n_params", "stored", "runs", "budget_limited"]].values.tolist() == [[10, 0, 1, 1], [20, 1, 1, 0],
                                                                                      [40, 1, 1, 0]]


def simulated(b: float, k: float, seeds: int = 3, seed: int = 0) -> pd.DataFrame:
    n_values = np.geomspace(800, 60_000, 8).round()
    design = pd.DataFrame([(n, d, s) for n in n_values for d in (128, 256, 512, 1024) for s in range(seeds)],
                          columns=["n_params", "n_facts", "seed"])
    runs = bp.simulate_runs(design, b, k, np.random.default_rng(seed))
    recall = np.where(runs["stored"], 0.97, 0.6)
    return runs.assign(recall=recall, stop_rule=np.where(runs["stored"], "recall", "budget"),
                       recall_half_budget=recall - 0.1, budget_limited=~runs["stored"])


def test_the_analysis_gates_the_verdict_on_both_power_simulations() -> None:
    runs = simulated(1.0, 8.0)  # stored within half the budget where stored at the end: a budget truth to simulate
    analysis = analyse(runs.assign(recall_half_budget=runs["recall"]), INFORMATION, 0.9, 0.95, power_sims=40, seed=3,
                       alternative_sims=2)
    assert analysis["kind"] == "memorisation" and analysis["n_runs"] == 96 and analysis["seeds"] == 3
    assert analysis["power"]["k"] == pytest.approx(analysis["power_k"]) and analysis["power_sharp"]["k"] == 100.0
    assert analysis["power"]["jitter"] and analysis["power_sharp"]["jitter"]
    assert isinstance(analysis["can_decide"], bool) and isinstance(analysis["tells_every_law_apart"], bool)
    assert analysis["fit"]["b_low"] <= analysis["fit"]["b"] <= analysis["fit"]["b_high"]
    bits = analysis["bits_per_param"]
    assert bits["low"] <= bits["value"] <= bits["high"]
    n_b = dict(zip(analysis["fit"]["sizes"], analysis["fit"]["n_b"], strict=True))
    assert bits["value"] == pytest.approx(bits["d"] * 8.0 / np.exp(analysis["fit"]["c"]))  # c = log N_b(D_ref)
    assert {row["n_facts"] for row in analysis["bits_per_param_by_d"]} == set(n_b)
    choices = [row["choice"] for row in analysis["sensitivity"]]
    assert choices[0].endswith("(primary)") and "without the smallest D" in choices
    assert "recall >= 0.95 counts as stored" in choices and "recall >= 0.99 counts as stored" not in choices
    assert "one budget: stored within half the exposure budget" in choices and choices[-1].startswith("pure power law")
    assert "one budget: the overhead fit to the full-budget outcomes alone" in choices
    assert choices[-1].startswith("pure power law") and analysis["sensitivity"][-1]["b"] == analysis["fit"]["b"]
    overhead = analysis["overhead_fit"]  # the primary since issue 38, with the power against the alternatives
    assert overhead["b_low"] <= overhead["b"] <= overhead["b_high"] and overhead["n0_low"] <= overhead["n0"]
    assert analysis["alternatives"]["n_sim"] == 2 and len(analysis["alternatives"]["rows"]) == 9
    assert isinstance(analysis["alternatives_can_decide"], bool)
    assert headline(analysis).startswith("storage boundary N_b = N0 + c D^b: b = ")


def test_an_unfittable_grid_says_why() -> None:
    runs = simulated(1.0, 8.0).assign(stored=True, recall=0.99)
    analysis = analyse(runs, INFORMATION, 0.9, 0.95, power_sims=20, seed=0)
    assert analysis["fit"] is None and "every run stored" in analysis["reason"]
    assert analysis["overhead_fit"] is None and "every run stored" in analysis["overhead_reason"]
    assert headline(analysis).startswith("no storage boundary fit: ")


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 40), st.integers(1, 6), st.integers(0, 2**16))
def test_nearest_neighbour_distances_match_a_brute_force_scan(rows, dim, seed) -> None:
    states = np.random.default_rng(seed).normal(size=(rows, dim))
    brute = [min(np.linalg.norm(states[i] - states[j]) for j in range(rows) if j != i) for i in range(rows)]
    assert nearest_neighbour_distances(states) == pytest.approx(brute, rel=1e-9, abs=1e-9)


def test_patterns_are_the_final_state_at_each_facts_sep(tmp_path) -> None:
    spec = FactsSpec(count=40, unseen=4, key_length=3, value_length=2, key_vocab=6, value_vocab=5,
                     min_key_distance=1, seed=2)
    write_facts(spec, tmp_path / "facts")
    tokenize_facts_dir(tmp_path / "facts", spec, tmp_path / "tokens")
    store = TokenStore(tmp_path / "tokens", "train")
    torch.manual_seed(0)
    model = DecoderLM(ModelConfig(vocab_size=store.vocab_size, n_layer=1, d_model=8, n_head=2, d_ff=16,
                                  max_len=16)).eval()
    states = pattern_states(model, store)
    sep = store.loss_from - 1
    assert int(store.sequence(0)[sep]) == vocabulary(6, 5).index("<sep>")
    with torch.no_grad():  # the whole sequence gives the same state at <sep> (attention is causal)
        _, hidden = model(torch.from_numpy(store.padded_batch(np.arange(len(store)))), return_hidden=True)
    assert states == pytest.approx(hidden[-1][:, sep].double().numpy(), abs=1e-6)
    row = pattern_row(model, tmp_path / "tokens")
    assert row["patterns"] == 40 and row["n"] == 8 and row["radius"] == pytest.approx(row["nn_median"] / 2)
    assert row["r_star"] == pytest.approx(np.sqrt(8 / (2 * np.pi * np.e)))
    summary_ = pattern_summary([{**row, "recall": 0.99}, {**row, "recall": 0.1}], 0.9)
    assert summary_["stored_runs"] == 1 and summary_["stored_ratio_median"] == pytest.approx(row["radius_over_r_star"])
