"""Claim check rows: schema, verdict rules on controlled inputs, JSON-safe numbers: the energy bounds, the partition
function and Prop. 4, the literature rows, check_row's rules. The radius rows:
test_claims_radius.py; the scaling, loss-floor and over-fitting rows: test_claims_loss.py."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from assocmem.errors import AssocmemError
from assocmem.report import claims
from assocmem.report.claims.energy import eq8, fig1, prop1, prop2, prop3
from assocmem.report.claims.literature import literature, read_literature_csv
from assocmem.report.claims.partition import eq12, lemma5, prop4

KEYS = {"id", "claim", "computed", "numbers", "verdict", "evidence", "how", "quote", "statement_tex", "ours_tex",
        "limits"}


def assert_valid(row: dict) -> None:
    assert set(row) == KEYS
    assert row["verdict"] in claims.VERDICTS and row["how"] in claims.HOWS
    json.dumps(row, allow_nan=False)  # numbers are flat JSON numbers (or null)
    assert all(isinstance(v, int | float) or v is None for v in row["numbers"].values())
    assert row["quote"] and all(q["latex_source"] and q["where"] for q in row["quote"])
    assert row["statement_tex"].count("$") % 2 == 0 and row["ours_tex"].count("$") % 2 == 0
    assert row["how"] != "data" or row["limits"]


@pytest.fixture(scope="module")
def activations() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    rng = np.random.default_rng(3)
    train = {f"layer_{i}": rng.normal(size=(300, 24)) * (i + 1) for i in range(2)}
    queries = {k: v[:40] + 0.1 * rng.normal(size=(40, 24)) for k, v in train.items()}
    return train, queries


def test_prop1_prop2_reproduced_prop3_corrected(activations: tuple[dict, dict]) -> None:
    train, queries = activations
    row1, row2, row3 = (prop1(train, queries, 0), prop2(train, queries, 0),
                        prop3(train, queries, 0))
    for row in (row1, row2, row3):
        assert_valid(row)
    assert row1["verdict"] == "reproduced" and row2["verdict"] == "reproduced"
    assert row3["verdict"] == "corrected" and row3["how"] == "counterexample"
    assert row1["numbers"]["synthetic_single.frac_energy_equals_g"] == 1.0
    # 3 copies of each of 8 separated patterns, queries on a copy: E = g - log 3, so (g - E)/log 24
    assert row1["numbers"]["synthetic_duplicates.median_gap_fraction"] == pytest.approx(
        np.log(3) / np.log(24), rel=1e-6)
    assert row3["numbers"]["counterexample.violation"] > 0.6
    assert row2["numbers"]["printed_holds"] == 1 and row2["numbers"]["sharp_one_sided_holds"] == 1
    assert row3["numbers"]["sharp_one_sided_holds"] == 1
    # the extremes: gap reaches -spread and 0 (spread 4), Prop. 3 reaches 0 and -spread - log 2
    assert row2["numbers"]["extreme_beyond_min_norm.min_gap"] == pytest.approx(-4.0, abs=1e-9)
    assert row2["numbers"]["extreme_beyond_max_norm.max_gap"] == pytest.approx(0.0, abs=1e-9)
    assert row3["numbers"]["extreme_sphere_centre.max_value"] == pytest.approx(0.0, abs=1e-12)
    assert row3["numbers"]["extreme_beyond_min_norm.min_value_minus_sharp_lower"] == pytest.approx(0.0, abs=1e-9)
    assert any(q.get("note") and "absolute value" in q["note"] for q in row2["quote"])


def test_prop1_missing_query_layer_names_the_key(activations: tuple[dict, dict]) -> None:
    train, _ = activations
    with pytest.raises(AssocmemError, match="layer_1"):
        prop1(train, {"layer_0": train["layer_0"]}, 0)


def test_eq8_partition_and_single_layer() -> None:
    rng = np.random.default_rng(4)
    sets = {"l0": rng.normal(size=(30, 5)), "l1": rng.normal(size=(30, 5)) + 2.0}
    queries = rng.normal(size=(25, 5))
    row = eq8(sets, queries)
    assert_valid(row)
    assert row["verdict"] == "reproduced"
    assert row["numbers"]["max_abs_global_minus_union"] < 1e-10
    assert 0 <= row["numbers"]["offset_c_min"] <= row["numbers"]["offset_c_max"] < np.log(2)
    single = eq8({"l0": sets["l0"]}, queries)
    assert single["verdict"] == "corrected"


def test_eq12_and_lemma5_rows() -> None:
    row = eq12()
    assert_valid(row)
    n = row["numbers"]
    assert n["n3.r1.5.correct"] == pytest.approx(n["n3.r1.5.quadrature"], rel=1e-10)
    assert abs(n["n3.r1.5.printed"] / n["n3.r1.5.quadrature"] - 1) > 0.05
    lemma = lemma5([(80_000, 1024, "gpt2_medium"), (10, 4, "tiny")])
    assert_valid(lemma)
    assert lemma["verdict"] == "corrected" and "GPT-2 medium" in lemma["evidence"]
    assert "tiny" not in lemma["evidence"]  # r* < 1 there, the printed lower bound happens to hold
    with pytest.raises(AssocmemError):
        lemma5([])


def test_prop4_refuted_with_finite_json() -> None:
    frame = pd.DataFrame({"model": ["gpt2m", "tiny"], "nn_median": [20.0, 15.486], "n_dim": [1024, 1024],
                          "n_patterns": [80_000, 80_000], "n_layers": [24, 24], "train_ce": [2.9, 1.1],
                          "test_ce": [3.0, 1.2]})
    row = prop4(frame)
    assert_valid(row)
    assert row["verdict"] == "refuted"
    assert row["numbers"]["proof_constant_l24_c0.printed_a_then_b"] - row["numbers"][
        "proof_constant_l24_c0.printed_b"] == pytest.approx(np.log(24))
    marked = prop4(frame.assign(usable=[True, False], status=["converged", "not converged"]))
    assert "tiny.log_Z_t" not in marked["numbers"] and "tiny (not converged)" in marked["evidence"]
    assert row["numbers"]["gpt2m.log_Z_t"] == pytest.approx(169.39, abs=0.01)
    assert row["numbers"]["tiny.inv_Z_t"] > 1e20
    assert row["numbers"]["toy_d1_n1_l2_paper_L"] == pytest.approx(1.0 + np.log(2))
    assert row["numbers"]["toy_d1_n1_l2_exact_L"] == pytest.approx(0.0, abs=1e-12)


def test_check_row_requires_limits_for_data_rows() -> None:
    with pytest.raises(AssocmemError, match="limits"):
        claims.check_row("radius", "c", {}, "refuted", "e", "data", ours_tex="x")
    row = claims.check_row("eq12", "c", {}, "corrected", "e", "corrected", ours_tex="x")
    assert row["limits"] is None and row["quote"][0]["where"].startswith("§5")


def test_literature_from_shipped_csv() -> None:
    table = read_literature_csv()
    assert table["source"].notna().all() and (table["source"].str.len() > 10).all()
    row = literature(table)
    assert_valid(row)
    assert row["verdict"] == "corrected"
    assert row["numbers"]["chinchilla_E_printed"] == 1.61 and row["numbers"]["chinchilla_E_hoffmann"] == 1.69
    assert row["numbers"]["table2_rows"] == 6 and row["numbers"]["table2_all_above_1"] == 1


def test_fig1_row() -> None:
    row = fig1()
    assert_valid(row)
    assert row["numbers"]["minima_count.2d_proposed"] == 3
    assert all(row["numbers"][f"proposed_minimum_distance_to_pattern_{i}"] <= 0.05 for i in range(3))
    assert row["numbers"]["mchn_beta1_convexity_violation"] > 0
    assert row["verdict"] == "corrected"  # the text calls the regularised energy convex; it has two minima


def test_check_row_rejects_unknown_labels() -> None:
    with pytest.raises(AssocmemError, match="verdict"):
        claims.check_row("prop1", "c", {}, "maybe", "e", "derived", ours_tex="x")
    with pytest.raises(AssocmemError, match="how"):
        claims.check_row("prop1", "c", {}, "reproduced", "e", "vibes", ours_tex="x")
    with pytest.raises(AssocmemError, match="no claim 'x' is registered"):
        claims.check_row("x", "c", {}, "reproduced", "e", "derived", ours_tex="x")
    assert claims.check_row("prop1", "c", {"a": np.inf, "b": np.True_}, "reproduced", "e", "data",
                            ours_tex="x", limits="l")["numbers"] == {"a": None, "b": 1}
