"""The memorisation grid in the report: its loading beside the scaling sweep, its section and figures, and the
memorisation claim's verdict rule on every branch (no grid, no fit, unpowered, span too small, refuted, reproduced,
ambiguous)."""

from __future__ import annotations

import copy
import math

import numpy as np
import pandas as pd
import pytest

from assocmem.report import build, claims
from assocmem.report.artifacts import Experiment, load_sweep_analysis
from assocmem.report.claims.memorisation import (
    GRID_COMMAND,
    in_words,
    interval_verdict,
    memorisation,
    memorisation_verdict,
)
from assocmem.report.evidence import Evidence
from assocmem.report.memorisation import memorisation_section

LAWS = {"allen_zhu": 1.0, "kaplan": 1 / 0.74, "paper": 2.0}
LAW_LABELS = {"allen_zhu": "capacity (Allen-Zhu & Li 2024, b = 1)", "kaplan": "Kaplan et al. 2020 (b = 1/0.74)",
              "paper": "the paper (Niu et al. 2024, b = 2)"}
N_VALUES = [780, 1232, 2424, 4000, 7280, 15528, 26848, 58704]
D_VALUES = [128, 256, 512, 1024]


def _runs(b: float, k: float = 3.0, seeds: int = 3, seed: int = 0) -> pd.DataFrame:
    """A grid's runs (the columns of assocmem.memorisation.cells.read_runs) drawn from the logistic boundary model
    with exponent ``b``, its boundary at D_ref in the middle of the N grid."""
    rng = np.random.default_rng(seed)
    log_n_mid, log_d_ref = np.mean(np.log(N_VALUES)), np.mean(np.log(D_VALUES))
    rows = []
    for m, n in enumerate(N_VALUES):
        for j, d in enumerate(D_VALUES):
            for s in range(seeds):
                p = 1 / (1 + np.exp(-k * (np.log(n) - log_n_mid - b * (np.log(d) - log_d_ref))))
                stored = bool(rng.random() < p)
                recall = 0.97 if stored else float(rng.uniform(0.2, 0.85))
                budget = not stored and m % 2 == 0
                rows.append({"model": f"M{m}", "seed": s, "label": f"M{m}", "subset": f"pct{100 / 2 ** (3 - j):g}",
                             "fraction": d / 1024, "n_params": n, "n_facts": d, "recall": recall, "stored": stored,
                             "steps": 2000, "max_steps": 8000, "stop_rule": "budget" if budget else "recall",
                             "budget_limited": budget, "recall_half_budget": recall - 0.05,
                             "stored_at_half_budget": recall - 0.05 >= 0.9})
    return pd.DataFrame(rows)


def _power(coverage: float = 0.95, separation: float = 0.9) -> dict:
    by_b = []
    for law, b in LAWS.items():
        excludes = {other: separation for other in LAWS if other != law}
        by_b.append({"b": b, "law": law, "coverage": coverage, "mean_b": b, "median_b": b, "median_width": 0.4,
                     "failed": 0.0, "excludes": excludes})
    return {"n_sim": 50, "k": 3.0, "seed": 0, "jitter": False, "level": 0.95, "by_b": by_b}


def _per_d(runs: pd.DataFrame, b: float) -> list[dict]:
    rows = []
    n_mid = math.exp(np.mean(np.log(N_VALUES)))
    d_ref = math.exp(np.mean(np.log(D_VALUES)))
    for d, group in runs.groupby("n_facts"):
        stored = group["stored"].to_numpy(bool)
        censoring = "below grid" if stored.all() else ("above grid" if not stored.any() else "inside")
        n_b = n_mid * (d / d_ref) ** b
        row = {"n_facts": float(d), "runs": len(group), "stored": int(stored.sum()),
               "budget_limited": int((group["budget_limited"] & ~group["stored"]).sum()), "censoring": censoring,
               "n_b": np.nan, "n_b_low": np.nan, "n_b_high": np.nan, "bound": np.nan, "converged": True}
        if censoring == "inside":
            row.update(n_b=n_b, n_b_low=n_b / 1.8, n_b_high=n_b * 1.8 if d < 1024 else math.inf)
        else:
            row["bound"] = float(min(N_VALUES) if censoring == "below grid" else max(N_VALUES))
        rows.append(row)
    return rows


def make_analysis(ci: tuple[float, float] = (1.7, 2.4), *, b_true: float = 2.0, can_decide: bool = True,
                  n_values: list[int] | None = None, fit: bool = True,
                  sensitivity_ci: tuple[float, float] | None = None) -> dict:
    """A memorisation analysis.json as :func:`assocmem.memorisation.analysis.analyse` writes it (its keys, built by
    hand: the boundary fit is not on this branch yet), for runs simulated with exponent ``b_true`` and a fit whose
    95% interval for b is ``ci``."""
    runs = _runs(b_true)
    if n_values is not None:
        runs = runs[runs["n_params"].isin(n_values)].reset_index(drop=True)
    grid = (runs.groupby(["n_params", "n_facts"])
            .agg(stored=("stored", "sum"), runs=("stored", "size"), budget_limited=("budget_limited", "sum"),
                 recall=("recall", "median")).reset_index())
    n_span = runs["n_params"].max() / runs["n_params"].min()
    d_span = runs["n_facts"].max() / runs["n_facts"].min()
    per_d = _per_d(runs, b_true)
    analysis = {
        "kind": "memorisation", "threshold": 0.9, "stop_at_recall": 0.95, "bits_per_fact": 8.0,
        "n_runs": len(runs), "seeds": 3, "n_params": sorted(int(n) for n in runs["n_params"].unique()),
        "n_facts": D_VALUES, "runs": runs.to_dict(orient="records"), "grid": grid.to_dict(orient="records"),
        "per_d": per_d, "laws": dict(LAWS), "law_labels": dict(LAW_LABELS), "n_span": float(n_span),
        "d_span": float(d_span), "n_span_covers_d_squared": bool(n_span >= d_span ** 2)}
    if not fit:
        return {**analysis, "fit": None,
                "reason": "storage boundary: every run stored its facts, so the boundary lies below the smallest "
                          "model of the grid at every D and b is not identified"}
    b = float(np.clip(np.mean(ci), *ci))
    d_ref = float(math.exp(np.mean(np.log(D_VALUES))))
    c = float(np.mean(np.log(N_VALUES)))
    n_b = [math.exp(c) * (d / d_ref) ** b for d in D_VALUES]
    record = {"b": b, "b_low": ci[0], "b_high": ci[1], "c": c, "k": 3.0, "d_ref": d_ref, "sizes": D_VALUES,
              "n_b": n_b, "n_b_low": [n / 1.5 for n in n_b], "n_b_high": [n * 1.5 for n in n_b[:-1]] + [math.inf],
              "loglik": -20.0, "converged": True, "n_runs": len(runs)}
    included = {name: ci[0] <= value <= ci[1] for name, value in LAWS.items()}
    power = _power() if can_decide else _power(separation=0.4)
    reason = ("calibrated (coverage >= 95% at every b) and able to tell the laws apart: the weakest, paper against "
              "kaplan, excluded in 90% of simulated grids" if can_decide else
              "it cannot tell b = 1.35 (kaplan) from b = 2 (paper): simulated at 1.35, its interval excludes 2 in "
              "40% of grids (needed 80%)")
    bits = [{"n_facts": d, "bits_per_param": d * 8 / n, "low": d * 8 / (n * 1.5), "high": d * 8 / (n / 1.5)}
            for d, n in zip(D_VALUES, n_b, strict=True)]
    s_low, s_high = sensitivity_ci or ci
    sensitivity = [
        {"choice": "recall >= 0.9 counts as stored (primary)", "b": b, "low": ci[0], "high": ci[1],
         "runs": len(runs), "note": ""},
        {"choice": "recall >= 0.8 counts as stored", "b": (s_low + s_high) / 2, "low": s_low, "high": s_high,
         "runs": len(runs), "note": ""},
        {"choice": "without the smallest D", "b": np.nan, "low": np.nan, "high": np.nan, "runs": len(runs) - 24,
         "note": "storage boundary: no run stored its facts, so ..."},
    ]
    return {**analysis, "fit": record, "power": power, "power_k": 3.0, "can_decide": can_decide,
            "power_reason": reason,
            "law_verdict": {"b": b, "interval": list(ci),
                            "laws": {name: {"label": LAW_LABELS[name], "b": value, "included": included[name]}
                                     for name, value in LAWS.items()},
                            "supported": [n for n in LAWS if included[n]],
                            "excluded": [n for n in LAWS if not included[n]]},
            "bits_per_param": {"d": d_ref, "value": d_ref * 8 / math.exp(c), "low": d_ref * 8 / math.exp(c) / 1.4,
                               "high": d_ref * 8 / math.exp(c) * 1.4},
            "bits_per_param_by_d": bits, "censored_d": [r["n_facts"] for r in per_d if r["censoring"] != "inside"],
            "sensitivity": sensitivity}


def _facts_experiment(analysis: dict | None = None) -> Experiment:
    config = {"dataset": {"name": "facts"}, "train": {"max_epochs": 1000, "max_steps": 20000},
              "subsets": {"fractions": [1.0, 0.5]}, "sweep": {"seeds": 3}}
    information = {"settings": {"key_length": 4, "key_vocab": 16},
                   "keys": {"space": 65536, "min_distance_requested": 2, "min_distance_train": 2},
                   "information": {"bits_per_fact": 8.0}}
    return Experiment(name="memorisation", config=config, token_meta={}, source={}, manifest=information,
                      memorisation=analysis)


def _evidence(*experiments: Experiment, tmp_path=None) -> Evidence:
    return Evidence(list(experiments), {"synthetic_seed": 0}, tmp_path)


# ---------------------------------------------------------------- the verdict rule


def test_the_interval_rule() -> None:
    assert interval_verdict(0.8, 1.2, LAWS)[0] == "refuted"
    assert interval_verdict(2.1, 3.0, LAWS)[0] == "refuted"
    assert interval_verdict(1.6, 2.4, LAWS)[0] == "reproduced"
    assert interval_verdict(1.2, 2.4, LAWS)[0] == "not-testable"  # includes 1.35 too
    assert interval_verdict(0.9, 2.4, LAWS)[0] == "not-testable"
    assert interval_verdict(1.5, math.inf, LAWS)[0] == "reproduced"  # an open upper end
    assert interval_verdict(np.nan, np.nan, LAWS)[0] == "not-testable"


def test_reproduced_refuted_and_ambiguous_grids() -> None:
    reproduced = memorisation(make_analysis((1.7, 2.4)))
    assert reproduced["verdict"] == "reproduced"
    assert "Laws inside the interval: the paper's 2; excluded: Allen-Zhu & Li's 1, Kaplan et al.'s 1.35" \
        in reproduced["evidence"]
    assert reproduced["numbers"]["b_low"] == 1.7 and reproduced["numbers"]["power_paper.coverage"] == 0.95
    assert reproduced["numbers"]["n_span_covers_d_squared"] == 1 and reproduced["numbers"]["seeds"] == 3
    assert "Robust" in reproduced["evidence"] and "No fit under: without the smallest D" in reproduced["evidence"]
    refuted = memorisation(make_analysis((0.8, 1.2), b_true=1.0))
    assert refuted["verdict"] == "refuted" and "lies below the paper's 2" in refuted["evidence"]
    assert "bits per parameter" in refuted["evidence"] and "Allen-Zhu & Li's about 2 bits" in refuted["evidence"]
    ambiguous = memorisation(make_analysis((1.2, 2.3)))
    assert ambiguous["verdict"] == "not-testable" and "also Kaplan et al.'s 1.35" in ambiguous["evidence"]
    for row in (reproduced, refuted, ambiguous):
        assert row["limits"] and row["how"] == "data" and row["quote"]


def test_power_comes_first_then_the_span() -> None:
    """A refuting interval counts for nothing on an unpowered design or a grid whose N span is too small."""
    unpowered = memorisation(make_analysis((0.8, 1.2), b_true=1.0, can_decide=False))
    assert unpowered["verdict"] == "not-testable"
    assert "power first" in unpowered["evidence"] and "(Kaplan et al.'s 1.35)" in unpowered["evidence"]
    narrow = make_analysis((0.8, 1.2), b_true=1.0, n_values=N_VALUES[2:6])
    assert not narrow["n_span_covers_d_squared"]
    row = memorisation(narrow)
    assert row["verdict"] == "not-testable" and "smaller than the square of its $D$ span" in row["evidence"]


def test_no_fit_and_no_grid_are_not_testable() -> None:
    unfitted = memorisation(make_analysis(fit=False))
    assert unfitted["verdict"] == "not-testable" and "every run stored its facts" in unfitted["evidence"]
    assert "b" not in unfitted["numbers"] and unfitted["numbers"]["n_runs"] == 96
    row = claims.get("memorisation").row(_evidence())
    assert row["verdict"] == "not-testable" and GRID_COMMAND in row["evidence"]
    assert "config/memorisation.yaml" in GRID_COMMAND


def test_a_verdict_that_changes_under_a_sensitivity_row_is_fragile() -> None:
    fragile = memorisation(make_analysis((0.8, 1.2), b_true=1.0, sensitivity_ci=(1.1, 2.2)))
    assert fragile["verdict"] == "refuted"
    assert "Fragile: the interval rule gives another verdict under recall ≥ 0.8 counts as stored: not-testable" \
        in fragile["evidence"]
    assert memorisation_verdict(make_analysis((0.8, 1.2), b_true=1.0))[0] == "refuted"


def test_messages_become_report_words() -> None:
    text = in_words("it cannot tell b = 1 (allen_zhu) from b = 2 (paper); coverage >= 90%; n_params bad", LAWS)
    assert "(Allen-Zhu & Li's 1)" in text and "(the paper's 2)" in text and "≥ 90%" in text
    assert "`n_params`" in text
    assert in_words("the paper says", LAWS) == "the paper says"


# ---------------------------------------------------------------- loading and routing


def test_loading_keeps_a_memorisation_grid_out_of_the_scaling_sweeps() -> None:
    exp = _facts_experiment()
    load_sweep_analysis(exp, make_analysis())
    assert exp.memorisation is not None and exp.sweep is None
    evidence = _evidence(exp)
    assert evidence.sweeps == {} and set(evidence.memorisation_grids) == {"memorisation"}
    # the scaling and loss-floor claims see no scaling sweep and no floor: not testable, without a crash
    for claim_id in ("scaling", "loss_floor", "overfit"):
        assert claims.get(claim_id).row(evidence)["verdict"] == "not-testable"
    assert claims.get("memorisation").row(evidence)["verdict"] == "reproduced"


def test_claim_order_puts_memorisation_right_after_scaling() -> None:
    ids = [claim.id for claim in claims.all_claims()]
    assert ids[ids.index("scaling") + 1] == "memorisation"


def test_build_routes_each_experiment_to_its_own_section(monkeypatch, tmp_path) -> None:
    calls: list[str] = []
    monkeypatch.setattr(build, "data_section", lambda exp: build.Section(f"data {exp.name}"))
    monkeypatch.setattr(build, "memorisation_section",
                        lambda exp, analysis, information, fig_dir: calls.append(f"memorisation {exp.name}")
                        or build.Section("memorisation"))
    monkeypatch.setattr(build, "sweep_section",
                        lambda exp, analysis, floor, fig_dir: calls.append(f"sweep {exp.name}") or build.Section("s"))
    monkeypatch.setattr(build, "training_section", lambda *a: calls.append("training") or build.Section("t"))
    monkeypatch.setattr(build, "neighbour_section", lambda *a: calls.append("neighbours") or build.Section("n"))
    facts = _facts_experiment(make_analysis())
    scaling = Experiment(name="scaling", config={"dataset": {"name": "question_formation"}}, token_meta={},
                         source={}, sweep={"kind": "scaling"})
    evidence = _evidence(facts, scaling, tmp_path=tmp_path)
    assert [s.title for s in build.experiment_sections(facts, evidence, tmp_path)] == ["data memorisation",
                                                                                      "memorisation"]
    build.experiment_sections(scaling, evidence, tmp_path)
    assert calls == ["memorisation memorisation", "sweep scaling"]


# ---------------------------------------------------------------- the section


@pytest.mark.parametrize("case", ["reproduced", "unfitted"])
def test_the_section_renders_with_its_figures(case, tmp_path) -> None:
    analysis = make_analysis() if case == "reproduced" else make_analysis(fit=False)
    analysis = copy.deepcopy(analysis)
    exp = _facts_experiment(analysis)
    section = memorisation_section(exp, analysis, exp.manifest, tmp_path)
    text = "\n".join(section.paragraphs + section.tables)
    assert section.title == "Memorisation grid: memorisation"
    assert "8 bits per fact" in text and "at least 2 symbols apart" in text and "1,000 exposures" in text
    assert "covers the square of the D span" in text and "| D = 128 |" in text.replace("D = 128 |", "D = 128 |")
    assert "below grid" in text or "above grid" in text or "inside" in text
    assert len(section.figures) == 2
    for png, caption in section.figures:
        assert png.suffix == ".png" and png.stat().st_size > 1000 and png.with_suffix(".pdf").exists()
        assert caption
    if case == "reproduced":
        assert "b = 2.050, 95% interval [1.700, 2.400]" in text
        assert "true b" in text and "share excluding the paper's 2" in text
        assert "The design can carry a verdict" in text and "Allen-Zhu & Li's about 2 bits" in text
        assert "interval rule's verdict" in text and "no fit" in text
        assert "**Verdict (the memorisation claim's rule).** reproduced" in text
        assert "reference slopes" in section.figures[1][1] and "dash-dot vermillion line" in section.figures[1][1]
    else:
        assert "Not fitted: storage boundary: every run stored" in text
