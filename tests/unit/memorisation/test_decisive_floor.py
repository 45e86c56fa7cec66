"""The decisive column's GPU floor (assocmem.memorisation.decisive_floor): its FLOP count is what torch's own FLOP
counter finds in a real training step, its steps are the cost model's, and its record is today's code."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn import functional as F
from torch.utils.flop_counter import FlopCounterMode

from assocmem import checkout
from assocmem.memorisation import decisive
from assocmem.memorisation import decisive_floor as df
from assocmem.memorisation import power_alternatives as pa
from assocmem.model import DecoderLM, ModelConfig

DENSE_OPS = {"aten.mm", "aten.addmm"}


def _counted_step(cfg: ModelConfig, batch: int, tokens: int, vocab_multiple: int) -> dict[str, int]:
    """FLOPs per op that torch's counter sees in one forward and backward of a real model."""
    model = DecoderLM(cfg, vocab_multiple=vocab_multiple)
    idx = torch.randint(0, cfg.vocab_size, (batch, tokens + 1))
    with FlopCounterMode(display=False) as counter:
        logits = model(idx[:, :-1], padded=True)
        F.cross_entropy(logits.reshape(-1, logits.shape[-1]), idx[:, 1:].reshape(-1)).backward()
    return {str(op): flops for op, flops in counter.get_flop_counts()["Global"].items()}


@settings(max_examples=12, deadline=None)
@given(n_layer=st.integers(1, 3), heads=st.integers(1, 4), head_width=st.integers(1, 12), ff=st.integers(1, 5),
       vocab=st.integers(2, 80), batch=st.integers(1, 5), tokens=st.integers(1, 9))
def test_the_dense_count_is_what_torch_counts_in_a_real_step(n_layer, heads, head_width, ff, vocab, batch,
                                                             tokens) -> None:
    d_model = heads * head_width
    cfg = ModelConfig(vocab_size=vocab, n_layer=n_layer, d_model=d_model, n_head=heads, d_ff=ff * d_model,
                      max_len=10)
    counted = _counted_step(cfg, batch, tokens, vocab_multiple=1)
    dense = sum(flops for op, flops in counted.items() if op in DENSE_OPS)
    assert dense == 6 * batch * tokens * df.dense_macs_per_token(n_layer, d_model, cfg.d_ff, vocab)
    assert sum(counted.values()) >= dense
    padded = _counted_step(cfg, batch, tokens, vocab_multiple=64)  # the trainer's model: more rows, never fewer
    assert sum(padded.values()) >= dense


def test_the_columns_models_are_its_records_and_a_foreign_config_is_named(tmp_path) -> None:
    assert df.facts_shape() == (37, 9)  # <sos>, 5 key symbols, <sep>, 2 values; 5 specials, 16 keys, 16 values
    macs = df.column_models()
    assert sorted(macs) == sorted(decisive.N_PARAMS)
    smallest = DecoderLM(ModelConfig.from_dict({"n_layer": 2, "d_model": 32, "n_head": 4, "max_len": 10}, 37))
    assert macs[smallest.num_parameters()] == 2 * 12 * 32 * 32 + 37 * 32
    foreign = tmp_path / "column.yaml"
    facts = {"key_length": 5, "value_length": 2, "key_vocab": 16, "value_vocab": 16}
    foreign.write_text(json.dumps({"experiments": {"x": {"dataset": {"facts": facts}, "models": {
        "D0": {"n_layer": 1, "d_model": 16, "n_head": 2, "max_len": 10}}}}}))
    with pytest.raises(ValueError, match=f"{foreign}: models of"):
        df.column_models(foreign)


def test_the_floor_counts_the_cost_models_steps_and_scales_with_the_rate() -> None:
    recorded = decisive.recorded_runs()
    cost = decisive.cost(recorded, pa.truths(recorded))
    rows = df.floor({"slow": 1e12, "fast": 4e12})
    assert [row["steps"] for row in rows] == pytest.approx([row["steps"] for row in cost["by_truth"]])
    assert [row["law"] for row in rows] == [row["law"] for row in cost["by_truth"]]
    for row in rows:
        assert row["floor_s"]["slow"] == pytest.approx(4 * row["floor_s"]["fast"])
        assert row["floor_s"]["slow"] == pytest.approx(row["dense_flops"] / 1e12)
        assert row["share_of_rate_for_goal"]["slow"] == pytest.approx(row["floor_s"]["slow"] / df.GOAL_S)
        assert row["longest_run_steps"] == max(cost["budget_steps"].values())
        assert 0 < row["largest_model_share"] < 1


def test_the_record_is_todays_floor_and_results_md_quotes_it() -> None:
    rec = json.loads(df.RECORD.read_text())
    today = df.record(df.MEASURED_FLOPS)
    assert rec["by_truth"] == pytest.approx(today["by_truth"])
    assert rec["rates_flops"] == today["rates_flops"] and rec["fits_at_rate"] == today["fits_at_rate"]
    assert rec["fits_at_rate"] == {"fp32": False, "bf16": True}
    text = (ROOT / "docs" / "results.md").read_text()
    floors = {p: [row["floor_s"][p] / 60 for row in rec["by_truth"]] for p in rec["rates_flops"]}
    assert rec["commit"] in text
    for p, minutes in floors.items():
        assert f"{min(minutes):.1f}–{max(minutes):.1f} minutes" in text, p
    shares = {p: [row["share_of_rate_for_goal"][p] for row in rec["by_truth"]] for p in rec["rates_flops"]}
    assert f"{min(shares['fp32']):.1f}–{max(shares['fp32']):.1f} times the goal" in text
    assert f"{100 * min(shares['bf16']):.0f}–{100 * max(shares['bf16']):.0f}% of that rate" in text
    flops = [row["dense_flops"] / 1e16 for row in rec["by_truth"]]
    assert f"{min(flops):.1f}–{max(flops):.1f} × 10^16 FLOPs" in text


def test_measure_needs_a_cuda_device(monkeypatch, capsys) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit):
        df.main(["--measure"])
    assert "torch sees no CUDA device here" in capsys.readouterr().err


def test_measure_prints_the_floor_at_the_rates_measured_here_and_writes_no_record(monkeypatch, capsys,
                                                                                   tmp_path) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(df, "measured_rates", lambda: {"fp32": (50e12, "here"), "bf16": (1e18, "here")})
    monkeypatch.setattr(df, "RECORD", tmp_path / "record.json")
    rec = df.main(["--measure"])
    out = capsys.readouterr().out
    assert "decisive column at fp32, 50.0 TFLOP/s: floor" in out and "(cannot fit in 10 min)" in out
    assert "decisive column at bf16, 1000000.0 TFLOP/s" in out and "(can fit in 10 min)" in out
    assert rec["fits_at_rate"] == {"fp32": False, "bf16": True} and not df.RECORD.exists()


def test_a_record_made_where_there_is_no_git_names_that_instead_of_failing(monkeypatch) -> None:
    """The GPU machine may lack git: its measured record is written all the same (the commit read 'no git')."""
    def no_git(*args, **kwargs):
        raise FileNotFoundError("git")

    monkeypatch.setattr(checkout.subprocess, "run", no_git)
    assert df.record({"fp32": (50e12, "here")})["commit"] == "no git"


def test_a_record_made_outside_a_git_checkout_names_no_commit(monkeypatch, tmp_path) -> None:
    """Code copied out of its checkout (an unpacked archive) has git but no repository: the commit reads 'no git',
    not an empty hash or '+changes'."""
    monkeypatch.setattr(checkout, "CHECKOUT", tmp_path)
    assert df.record({"fp32": (50e12, "here")})["commit"] == "no git"
