"""Exact decoder parameter counts and the paper's App. E arithmetic."""

from __future__ import annotations

import pytest

from assocmem.errors import AssocmemError
from assocmem.theory import params as pr


def test_gpt2_exact_counts_match_huggingface() -> None:
    assert pr.count_config(pr.GPT2_SMALL)["total"] == pr.GPT2_SMALL_HF_COUNT == 124_439_808
    assert pr.count_config(pr.GPT2_MEDIUM)["total"] == pr.GPT2_MEDIUM_HF_COUNT == 354_823_168


def test_untied_head_and_biasless_variants() -> None:
    tied = pr.count_decoder_params(100, 16, 8, 2, 32, tied=True)
    untied = pr.count_decoder_params(100, 16, 8, 2, 32, tied=False)
    assert untied["total"] - tied["total"] == 100 * 8
    no_bias = pr.count_decoder_params(100, 16, 8, 2, 32, tied=True, bias=False, ln_bias=False)
    assert tied["total"] - no_bias["total"] == 2 * (4 * 8 + 32 + 8) + 2 * (2 * 8) + 8
    # hand count of one block: 2 LN (w+b) + qkv (w+b) + out (w+b) + ff in/out (w+b)
    assert pr.block_params(8, 32) == 4 * 8 + (3 * 64 + 24) + (64 + 8) + (8 * 32 + 32) + (32 * 8 + 8)
    with pytest.raises(AssocmemError, match="d_ff"):
        pr.count_decoder_params(100, 16, 8, 2, 0, tied=True)


def test_paper_appendix_terms_reproduce_printed_numbers() -> None:
    terms = pr.paper_appendix_terms(1024, 24)
    assert terms["attention"] == 75_497_472
    assert terms["dense_ln"] == 25_214_976
    assert terms["feed_forward"] == 151_093_248  # printed, with d_FF = 3072 = 3 d_emb
    assert terms["A"] == pytest.approx(10.0, abs=0.01)
    exact_ff = pr.paper_appendix_terms(1024, 24, d_ff=4096)["feed_forward"]
    assert exact_ff == 201_449_472  # GPT-2 medium really has d_FF = 4096


def test_a_constant_readings_for_gpt2_medium() -> None:
    counts = pr.count_config(pr.GPT2_MEDIUM)
    assert pr.a_constant(counts["attention_and_ff"], 24, 1024) == pytest.approx(12.0, abs=0.02)
    assert pr.a_constant(counts["total"], 24, 1024) == pytest.approx(14.1, abs=0.01)


def test_table3_ratios_reproduce() -> None:
    for row in pr.PAPER_TABLE3:
        ratio = pr.n_over_d_squared(row["n_params"], row["d_star"]) * 1e10
        assert ratio == pytest.approx(row["printed_ratio_e10"], abs=0.005)
    with pytest.raises(AssocmemError):
        pr.n_over_d_squared(1.0, 0.0)
