"""The 'params' check row: GPT-2 counts vs the paper's appendix, and measured vs counted pipeline models."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from assocmem.errors import AssocmemError
from assocmem.model import DecoderLM, ModelConfig
from assocmem.report.claims.literature import params

KEYS = {"id", "claim", "computed", "numbers", "verdict", "evidence", "how", "quote", "statement_tex", "ours_tex",
        "limits"}


def model_row(label: str, cfg: ModelConfig, n_params: int, n_train_tokens: int = 10_000) -> dict:
    return {"model": label, "n_params": n_params, "vocab": cfg.vocab_size, "n_ctx": cfg.max_len,
            "d": cfg.d_model, "n_layer": cfg.n_layer, "d_ff": cfg.d_ff, "tied": cfg.tie_embeddings,
            "n_train_tokens": n_train_tokens}


def measured_row(label: str, cfg: ModelConfig, n_train_tokens: int = 10_000) -> dict:
    return model_row(label, cfg, DecoderLM(cfg).num_parameters(), n_train_tokens)


@pytest.fixture(scope="module")
def configs() -> dict[str, ModelConfig]:
    return {name: ModelConfig(vocab_size=37, n_layer=2, d_model=16, n_head=2, d_ff=48, max_len=12,
                              tie_embeddings=tied) for name, tied in (("tied", True), ("untied", False))}


@pytest.fixture(scope="module")
def row(configs: dict[str, ModelConfig]) -> dict:
    return params(pd.DataFrame([measured_row(name, cfg, 2_000 * (i + 1))
                                       for i, (name, cfg) in enumerate(configs.items())]))


def test_row_schema_and_json(row: dict) -> None:
    assert set(row) == KEYS and row["id"] == "params" and row["how"] == "derived"
    assert any("A\\approx 15" in q["latex_source"] for q in row["quote"])  # printed, not only in a brief
    json.dumps(row, allow_nan=False)
    assert all(isinstance(v, int | float) for v in row["numbers"].values())


def test_gpt2_exact_counts_and_appendix_numbers(row: dict) -> None:
    n = row["numbers"]
    assert n["gpt2_small.exact_total"] == n["gpt2_small.hf_count"] == 124_439_808
    assert n["gpt2_medium.exact_total"] == n["gpt2_medium.hf_count"] == 354_823_168
    assert n["gpt2_medium.exact_equals_hf"] == 1 and n["gpt2_small.exact_equals_hf"] == 1
    # the printed appendix: d_FF = 3072 = 3 d_emb for medium, terms summing to 251,805,696 (A ~= 10)
    assert n["gpt2_medium.d_ff_appendix"] == 3072 and n["gpt2_medium.d_ff_real"] == 4096
    assert n["gpt2_medium.appendix_total"] == 75_497_472 + 25_214_976 + 151_093_248
    assert n["gpt2_medium.appendix_A"] == pytest.approx(10.006, abs=1e-3)
    assert n["gpt2_medium.appendix_rel_err_total"] == pytest.approx(251_805_696 / 354_823_168 - 1)
    assert n["gpt2_medium.appendix_real_dff_total"] == 75_497_472 + 25_214_976 + 201_449_472
    assert n["gpt2_medium.exact_blocks"] - n["gpt2_medium.appendix_real_dff_total"] == 6 * 24 * 1024
    assert n["gpt2_small.d_ff_appendix"] == 2304 and n["gpt2_small.d_ff_real"] == 3072
    # A readings: 12 + 13/d for blocks, 12 + 13/d + (V + T + 2)/(l d) in total
    assert n["gpt2_medium.exact_A_blocks"] == pytest.approx(12 + 13 / 1024)
    assert n["gpt2_medium.exact_A_total"] == pytest.approx(12 + 13 / 1024 + (50257 + 1024 + 2) / (24 * 1024))
    assert n["gpt2_small.exact_A_total"] == pytest.approx(17.581, abs=1e-3)
    assert n["paper_A"] == 15.0
    assert n["gpt2_medium.paper_A_rel_err_total"] == pytest.approx(15 * 24 * 1024**2 / 354_823_168 - 1)
    assert n["gpt2_small.paper_A_rel_err_total"] == pytest.approx(15 * 12 * 768**2 / 124_439_808 - 1)


def test_verdict_corrected_with_corrected_statement(row: dict) -> None:
    assert row["verdict"] == "corrected"
    assert r"$d_{\mathrm{FF}}=4d_{\mathrm{emb}}$" in row["evidence"] and "354,823,168" in row["evidence"]
    assert "-29.0%" in row["evidence"]


def test_pipeline_models_match_torch_count(row: dict, configs: dict[str, ModelConfig]) -> None:
    n = row["numbers"]
    for i, (name, cfg) in enumerate(configs.items()):
        measured = DecoderLM(cfg).num_parameters()
        assert n[f"{name}.n_params_measured"] == n[f"{name}.n_params_counted"] == measured
        assert n[f"{name}.count_matches"] == 1
        assert n[f"{name}.n_over_d_squared"] == pytest.approx(measured / (2_000 * (i + 1)) ** 2)
    assert n["untied.n_params_counted"] - n["tied.n_params_counted"] == 37 * 16


def test_wrong_n_params_flips_to_refuted(configs: dict[str, ModelConfig]) -> None:
    good = measured_row("good", configs["tied"])
    # an untied model reported with the tied count: the head's V*d parameters are missing
    bad = model_row("bad-head", configs["untied"], DecoderLM(configs["tied"]).num_parameters())
    row = params(pd.DataFrame([good, bad]))
    assert row["verdict"] == "refuted" and "bad-head" in row["evidence"]
    assert "good (" not in row["evidence"]
    assert row["numbers"]["bad-head.count_matches"] == 0 and row["numbers"]["good.count_matches"] == 1
    off_by_one = params(pd.DataFrame([model_row("m", configs["tied"], good["n_params"] + 1)]))
    assert off_by_one["verdict"] == "refuted" and "m (measured" in off_by_one["evidence"]


def test_verdict_rule_uses_thresholds_not_data(row: dict, configs: dict[str, ModelConfig]) -> None:
    # even with a huge tolerance the d_FF = 3 d_emb assumption is false for GPT-2, so still corrected
    loose = params(pd.DataFrame([measured_row("m", configs["tied"])]), paper_a=14.1, rel_tol=0.5)
    assert loose["verdict"] == "corrected"
    medium_rel_err = loose["numbers"]["gpt2_medium.paper_A_rel_err_total"]
    assert medium_rel_err == pytest.approx(14.1 / 14.0994 - 1, abs=1e-4)


def test_the_derivation_needs_no_pipeline_model() -> None:
    row = params(pd.DataFrame(columns=["model", "n_params", "vocab", "n_ctx", "d", "n_layer", "d_ff", "tied",
                                       "n_train_tokens"]))
    assert row["verdict"] == "corrected" and "per pipeline model" not in row["evidence"]
    assert row["numbers"]["gpt2_medium.exact_equals_hf"] == 1


def test_bad_inputs_raise(configs: dict[str, ModelConfig]) -> None:
    good = measured_row("m", configs["tied"])
    with pytest.raises(AssocmemError, match="n_train_tokens"):
        params(pd.DataFrame([{k: v for k, v in good.items() if k != "n_train_tokens"}]))
    with pytest.raises(AssocmemError, match="duplicate"):
        params(pd.DataFrame([good, good]))
    with pytest.raises(AssocmemError, match="'m'.*positive"):
        params(pd.DataFrame([{**good, "n_train_tokens": 0}]))
    with pytest.raises(AssocmemError, match="tied"):
        params(pd.DataFrame([{**good, "tied": "False"}]))


@settings(max_examples=15, deadline=None)
@given(vocab=st.integers(2, 60), n_layer=st.integers(1, 3), heads=st.integers(1, 3),
       head_dim=st.integers(1, 4), d_ff=st.integers(1, 40), max_len=st.integers(1, 20), tied=st.booleans())
def test_count_matches_decoder_lm_for_any_shape(vocab: int, n_layer: int, heads: int, head_dim: int,
                                               d_ff: int, max_len: int, tied: bool) -> None:
    cfg = ModelConfig(vocab_size=vocab, n_layer=n_layer, d_model=heads * head_dim, n_head=heads, d_ff=d_ff,
                      max_len=max_len, tie_embeddings=tied)
    row = params(pd.DataFrame([measured_row("m", cfg)]))
    assert row["numbers"]["m.count_matches"] == 1 and row["verdict"] == "corrected"
