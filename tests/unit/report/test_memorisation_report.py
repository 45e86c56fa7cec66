"""The memorisation grid in the report: its loading beside the scaling sweep, its section and figures, and the
memorisation claim's verdict rule on every branch (no grid, no fit, unpowered, span too small, refuted, reproduced,
ambiguous).

Since issue 38 the verdict reads the overhead model's interval behind the power against the alternatives; that
simulation is measured in tests/unit/memorisation/test_boundary_overhead.py, so the fixture runs 2 grids per truth
only and the verdict branches set its outcome (``powered``). The pure power law's own simulation no longer gates a
verdict: 20 grids per b here (it was 100)."""

from __future__ import annotations

import copy
import math

import numpy as np
import pandas as pd
import pytest

from assocmem import layout
from assocmem.io import read_json, write_json
from assocmem.report import build, claims, html_page, render
from assocmem.report.artifacts import Experiment, load_grid_analysis
from assocmem.report.claims.memorisation import (
    GRID_COMMAND,
    in_words,
    interval_verdict,
    memorisation,
    memorisation_verdict,
    primary_interval,
)
from assocmem.report.evidence import Evidence
from assocmem.report.memorisation import memorisation_section

LAWS = {"allen_zhu": 1.0, "kaplan": 1 / 0.74, "paper": 2.0}
D_VALUES = (128, 256, 512, 1024)  # 8x in D
N_SMALL = (780, 1232, 2424, 4000, 7280, 15528, 26848, 58704)  # 75x in N: config/memorisation.yaml's sizes
N_DENSE = tuple(np.geomspace(400, 40_000, 12).round())  # 100x in N, 12 sizes
INFORMATION = {"settings": {"key_length": 4, "key_vocab": 16},
               "keys": {"space": 65536, "min_distance_requested": 2, "min_distance_train": 2},
               "information": {"bits_per_fact": 8.0}}


def simulate_runs(b: float, n_values: tuple[float, ...], seeds: int, k: float, *, offset: float = 0.0,
                  seed: int = 0) -> pd.DataFrame:
    """A grid's runs (the columns of assocmem.memorisation.cells.read_runs) drawn from the logistic boundary model:
    P(stored) = expit(k (log N - log N_b(D))), N_b(D) ∝ D^b, its boundary at the geometric middle of the D grid
    ``offset`` (natural log) above the middle of the N grid. A run that did not store ran into its budget on even
    model indices (so both kinds of "not stored" occur)."""
    rng = np.random.default_rng(seed)
    log_n_mid, log_d_ref = np.mean(np.log(n_values)), np.mean(np.log(D_VALUES))
    rows = []
    for m, n in enumerate(n_values):
        for d in D_VALUES:
            for s in range(seeds):
                logit = k * (np.log(n) - log_n_mid - offset - b * (np.log(d) - log_d_ref))
                stored = bool(rng.random() < 1 / (1 + np.exp(-logit)))
                recall = 0.97 if stored else float(rng.uniform(0.2, 0.85))
                budget = not stored and m % 2 == 0
                rows.append({"model": f"M{m}", "seed": s, "label": f"M{m}", "subset": f"pct{100 * d / 1024:g}",
                             "fraction": d / 1024, "n_params": int(n), "n_facts": d, "recall": recall,
                             "stored": stored, "steps": 2000, "max_steps": 8000,
                             "stop_rule": "budget" if budget else "recall", "budget_limited": budget,
                             "recall_half_budget": recall - 0.05})
    return pd.DataFrame(rows)


GRIDS = {  # name: (b, N values, seeds, k, offset, seed); powered: 12 N x 4 D x 4 seeds at k = 6 (analyse says so)
    "b2": (2.0, N_DENSE, 4, 6.0, 0.0, 1),
    "b2_missed": (2.0, N_DENSE, 4, 6.0, 0.0, 0),  # one of the 5% of grids whose interval misses the true b
    "b1": (1.0, N_DENSE, 4, 6.0, 0.0, 0),
    "unpowered": (1.0, N_SMALL, 3, 3.0, 0.0, 0),  # config/memorisation.yaml's grid, blurred: 1.35 and 2 look alike
    "censored": (2.0, N_SMALL, 3, 6.0, -1.5, 0),  # the boundary low: every run at the smallest D stores
    "unfitted": (2.0, N_SMALL, 2, 6.0, -20.0, 0),  # every run stores: no boundary inside the grid
}


@pytest.fixture(scope="module")
def grids(tmp_path_factory) -> dict[str, dict]:
    """Each grid's analysis.json as the sweep stage writes and the report reads it (analyse, then JSON)."""
    from assocmem.memorisation.analysis import analyse

    out = tmp_path_factory.mktemp("memorisation")
    analyses = {}
    for name, (b, n_values, seeds, k, offset, seed) in GRIDS.items():
        runs = simulate_runs(b, n_values, seeds, k, offset=offset, seed=seed)
        write_json(out / f"{name}.json", analyse(runs, INFORMATION, 0.9, 0.95, power_sims=20, seed=0,
                                                     alternative_sims=2))
        analyses[name] = read_json(out / f"{name}.json")
    return analyses


def powered(analysis: dict, decide: bool = True, reason: str = "calibrated (set by the test)") -> dict:
    """The analysis with the power against the alternatives decided one way (its simulation is tested apart)."""
    changed = copy.deepcopy(analysis)
    changed.update(alternatives_can_decide=decide, alternatives_reason=reason,
                   alternatives_tell_every_law_apart=decide, alternatives_every_law_reason=reason)
    return changed


def with_interval(analysis: dict, low: float, high: float) -> dict:
    """The analysis with another 95% interval for b (and the law verdict that goes with it)."""
    changed = copy.deepcopy(analysis)
    for fit in ("overhead_fit", "two_budget_fit", "fit"):
        if changed.get(fit) is not None:
            changed[fit].update(b_low=low, b_high=high)
    laws = changed["law_verdict"]["laws"]
    for law in laws.values():
        law["included"] = bool(low <= law["b"] <= high)
    changed["law_verdict"].update(interval=[low, high], supported=[n for n in laws if laws[n]["included"]],
                                  excluded=[n for n in laws if not laws[n]["included"]])
    changed["sensitivity"][0].update(low=low, high=high)
    return changed


def _facts_experiment(analysis: dict | None = None) -> Experiment:
    config = {"dataset": {"name": "facts"}, "train": {"max_epochs": 1000, "max_steps": 20000},
              "subsets": {"fractions": [1.0, 0.5]}, "sweep": {"seeds": 3}}
    return Experiment(name="memorisation", config=config, token_meta={}, source={}, manifest=INFORMATION,
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


def test_a_powered_grid_with_b_2_is_reproduced(grids) -> None:
    analysis = powered(grids["b2"])
    assert analysis["n_span_covers_d_squared"]
    row = memorisation(analysis)
    assert row["verdict"] == "reproduced", row["evidence"]
    assert "Laws inside the interval: the paper's 2; excluded: Allen-Zhu & Li's 1, Kaplan et al.'s 1.35" \
        in row["evidence"]
    assert "Robust: the interval rule gives the same verdict under every sensitivity row" in row["evidence"]
    numbers = row["numbers"]
    fit = analysis["overhead_fit"]
    assert numbers["b_low"] == pytest.approx(fit["b_low"]) and numbers["b_low"] <= 2 <= numbers["b_high"]
    assert numbers["n0"] == pytest.approx(fit["n0"]) and numbers["pure_b"] == pytest.approx(analysis["fit"]["b"])
    assert 0 <= numbers["alt_overhead_paper.overhead_coverage"] <= 1
    assert numbers["pure_power_paper.excludes_paper"] is None and numbers["n_runs"] == 192 and numbers["seeds"] == 4
    assert numbers["pure_bits_per_param"] == pytest.approx(analysis["bits_per_param"]["value"])
    assert row["limits"] and row["how"] == "data" and len(row["quote"]) == 2


def test_a_powered_grid_with_b_1_is_refuted(grids) -> None:
    row = memorisation(powered(grids["b1"]))
    assert row["verdict"] == "refuted" and "lies below the paper's 2" in row["evidence"]
    assert "Laws inside the interval: Allen-Zhu & Li's 1" in row["evidence"]
    assert "Bits per parameter at the margin" in row["evidence"] and "Allen-Zhu & Li's about 2 bits" in row["evidence"]


def test_a_verdict_that_changes_under_a_sensitivity_row_is_called_fragile(grids) -> None:
    """Simulated with b = 2, this grid's interval misses 2 (as 5% of them do): refuted, but not under every
    sensitivity row, and the evidence says so."""
    row = memorisation(powered(grids["b2_missed"]))
    assert row["verdict"] == "refuted" and "lies above the paper's 2" in row["evidence"]
    assert "Fragile: the interval rule gives another verdict under" in row["evidence"]


def test_an_interval_holding_2_and_another_law_is_not_testable(grids) -> None:
    row = memorisation(with_interval(powered(grids["b2"]), 1.2, 2.4))
    assert row["verdict"] == "not-testable" and "also Kaplan et al.'s 1.35" in row["evidence"]


def test_power_comes_first(grids) -> None:
    """An interval that excludes 2 counts for nothing on a design whose simulated grids cannot tell the laws
    apart."""
    reason = "it cannot tell b = 2 (paper) from b = 1.35 (kaplan) under the budget truth"
    analysis = powered(grids["unpowered"], False, reason)
    assert analysis["overhead_fit"]["b_high"] < 2  # the interval alone would refute
    row = memorisation(analysis)
    assert row["verdict"] == "not-testable" and "power first" in row["evidence"]
    assert "(Kaplan et al.'s 1.35)" in row["evidence"] and "(kaplan)" not in row["evidence"]


def test_an_analysis_written_before_the_overhead_model_keeps_its_rule(grids) -> None:
    """An analysis.json without ``overhead_fit`` (a record from before issue 38) is read by the pure law's rule."""
    old = {key: value for key, value in grids["b1"].items()
           if key not in ("overhead_fit", "two_budget_fit", "primary_model")}
    assert primary_interval(old) == (old["fit"]["b_low"], old["fit"]["b_high"])
    assert memorisation_verdict(old)[0] == ("refuted" if old["can_decide"] else "not-testable")


def test_the_two_budget_fit_is_primary_where_the_runs_record_both_budgets(grids) -> None:
    """Issue 41: runs with their half-budget outcome are read by the two-budget fit (its interval gates the verdict,
    the one-budget fit a sensitivity row); an analysis written before it (no ``primary_model``) keeps the overhead
    fit's interval."""
    analysis = grids["b2"]
    two, one = analysis["two_budget_fit"], analysis["overhead_fit"]
    assert analysis["primary_model"] == "two_budget" and two is not None
    assert primary_interval(analysis) == (two["b_low"], two["b_high"])
    for end in ("b_at_lambda_0", "b_at_lambda_1"):
        assert two["b_low"] <= two[end] <= two["b_high"]
    assert analysis["sensitivity"][0]["low"] == two["b_low"] and analysis["sensitivity"][0]["b"] == two["b"]
    one_budget = next(row for row in analysis["sensitivity"] if row["choice"].startswith("one budget: the overhead"))
    assert (one_budget["low"], one_budget["high"]) == pytest.approx((one["b_low"], one["b_high"]))
    assert all("two_budget" in row for row in analysis["alternatives"]["rows"])
    before = {key: value for key, value in analysis.items() if key not in ("two_budget_fit", "primary_model")}
    assert primary_interval(before) == (one["b_low"], one["b_high"])
    row = memorisation(powered(analysis))
    assert "Capacity boundary read from two budgets" in row["evidence"] and "The one-budget fit" in row["evidence"]
    assert row["numbers"]["two_budget_b"] == two["b"] and "(read from two budgets)" in row["ours_tex"]


def test_a_critical_value_the_config_states_widens_the_primary_interval_and_is_named(grids) -> None:
    """sweep.interval_threshold (calibrated at the design before the grid runs): the two-budget interval, its
    sensitivity rows and its power simulation read it; the report and the headline name it."""
    from assocmem.memorisation.analysis import _fit_row, headline, overhead_analysis
    from assocmem.memorisation.cells import stored_at
    from assocmem.report.memorisation import two_budget_paragraph

    b, n_values, seeds, k, offset, seed = GRIDS["b2"]
    runs = stored_at(simulate_runs(b, n_values, seeds, k, offset=offset, seed=seed), 0.9)  # as analyse reads them
    wide = {**grids["b2"], **overhead_analysis(runs, 8.0, power_sims=1, seed=0, interval_threshold=6.0)}
    fit, chi2 = wide["two_budget_fit"], grids["b2"]["two_budget_fit"]
    assert fit["b"] == pytest.approx(chi2["b"]) and fit["threshold"] == 6.0 and fit["calibrated"]
    assert fit["b_low"] < chi2["b_low"] and fit["b_high"] > chi2["b_high"] and not chi2["calibrated"]
    assert wide["alternatives"]["two_budget_threshold"] == 6.0
    row = _fit_row("primary", runs, two_budget=True, interval_threshold=6.0)
    assert (row["low"], row["high"]) == pytest.approx((fit["b_low"], fit["b_high"]), abs=1e-3)
    assert "6.00 excludes: the critical value calibrated at this design" in two_budget_paragraph(wide)
    assert "3.84 excludes at 95%" in two_budget_paragraph(grids["b2"])
    assert "critical value 6.00 calibrated at the design" in headline(wide)


def test_an_n_span_below_the_d_span_squared_is_not_testable(grids) -> None:
    narrow = powered(grids["b1"])  # as if the grid's N spanned 40x only (power aside)
    narrow.update(n_span=40.0, n_span_covers_d_squared=False)
    row = memorisation(narrow)
    assert row["verdict"] == "not-testable" and "smaller than the square of its $D$ span" in row["evidence"]


def test_no_fit_and_no_grid_are_not_testable(grids) -> None:
    unfitted = memorisation(grids["unfitted"])
    assert unfitted["verdict"] == "not-testable" and "every run stored its facts" in unfitted["evidence"]
    assert "b" not in unfitted["numbers"] and unfitted["numbers"]["n_runs"] == 64
    row = claims.get("memorisation").row(_evidence())
    assert row["verdict"] == "not-testable" and GRID_COMMAND in row["evidence"]
    assert "--configfile config/memorisation.yaml" in GRID_COMMAND


def test_messages_become_report_words() -> None:
    text = in_words("it cannot tell b = 1 (allen_zhu) from b = 2 (paper); coverage >= 90%; n_params bad", LAWS)
    assert "(Allen-Zhu & Li's 1)" in text and "(the paper's 2)" in text and "≥ 90%" in text
    assert "`n_params`" in text
    assert in_words("the paper says", LAWS) == "the paper says"
    assert memorisation_verdict({"fit": None, "reason": "too few runs"}) == (
        "not-testable", "no storage boundary fit: too few runs")


# ---------------------------------------------------------------- loading and routing


def test_loading_keeps_a_memorisation_grid_out_of_the_scaling_sweeps(grids, tmp_path) -> None:
    """Issue 38, item 8: a memorisation grid's analysis is the memorisation rule's own file, never the sweep's."""
    exp = _facts_experiment()
    analysis = powered(grids["b2"])
    write_json(layout.path(tmp_path, "memorisation_analysis", exp=exp.name), analysis)
    load_grid_analysis(exp, tmp_path)
    assert exp.memorisation == analysis and exp.sweep is None
    assert not layout.path(tmp_path, "sweep_analysis", exp=exp.name).exists()
    evidence = _evidence(exp)
    assert evidence.sweeps == {} and set(evidence.memorisation_grids) == {"memorisation"}
    assert evidence.with_floor() == []
    # the scaling and loss-floor claims see no scaling sweep and no floor: not testable, without a crash
    for claim_id in ("scaling", "loss_floor", "overfit"):
        assert claims.get(claim_id).row(evidence)["verdict"] == "not-testable"
    assert claims.get("memorisation").row(evidence)["verdict"] == "reproduced"


def test_claim_order_puts_memorisation_right_after_scaling() -> None:
    ids = [claim.id for claim in claims.all_claims()]
    assert ids[ids.index("scaling") + 1] == "memorisation"


def test_build_routes_each_experiment_to_its_own_section(grids, monkeypatch, tmp_path) -> None:
    calls: list[str] = []
    monkeypatch.setattr(build, "data_section", lambda exp: build.Section(f"data {exp.name}"))
    monkeypatch.setattr(build, "memorisation_section",
                        lambda exp, analysis, information, fig_dir: calls.append(f"memorisation {exp.name}")
                        or build.Section("memorisation"))
    monkeypatch.setattr(build, "sweep_section",
                        lambda exp, analysis, floor, fig_dir: calls.append(f"sweep {exp.name}") or build.Section("s"))
    monkeypatch.setattr(build, "training_section", lambda *a: calls.append("training") or build.Section("t"))
    monkeypatch.setattr(build, "neighbour_section", lambda *a: calls.append("neighbours") or build.Section("n"))
    facts = _facts_experiment(grids["b2"])
    scaling = Experiment(name="scaling", config={"dataset": {"name": "question_formation"}}, token_meta={},
                         source={}, sweep={"n_cells": 24})
    evidence = _evidence(facts, scaling, tmp_path=tmp_path)
    titles = [section.title for section in build.experiment_sections(facts, evidence, tmp_path)]
    assert titles == ["data memorisation", "memorisation"]
    build.experiment_sections(scaling, evidence, tmp_path)
    assert calls == ["memorisation memorisation", "sweep scaling"]  # no training or neighbour sections


# ---------------------------------------------------------------- the section


@pytest.mark.parametrize("name", ["b2", "censored", "unfitted"])
def test_the_section_renders_with_its_figures(grids, name, tmp_path) -> None:
    analysis = powered(grids[name]) if name == "b2" else grids[name]
    exp = _facts_experiment(analysis)
    section = memorisation_section(exp, analysis, exp.manifest, tmp_path)
    text = "\n".join(section.paragraphs + section.tables)
    assert section.title == "Memorisation grid: memorisation" and section.details
    assert "8 bits per fact" in text and "at least 2 symbols apart" in text and "1,000 exposures" in text
    assert "the square of the D span (64×)" in text and "| parameters N | D = 128 | D = 256 |" in text
    assert "**Verdict (the memorisation claim's rule).** " + memorisation_verdict(analysis)[0] in text
    assert [png.name for png, _ in section.figures] == ["memorisation_grid_memorisation.png",
                                                        "memorisation_boundary_memorisation.png"]
    for png, caption in section.figures:
        assert png.stat().st_size > 1000 and png.with_suffix(".pdf").exists() and caption
    if name == "b2":
        assert f"b = {analysis['fit']['b']:.3f}, 95% interval [" in text
        assert "true b" in text and "share excluding the paper's 2" in text
        assert "Allen-Zhu & Li's about 2 bits" in text
        assert "**Capacity boundary read from two budgets (primary).** Each run's outcome" in text
        two = analysis["two_budget_fit"]
        assert f"b = {two['b']:.3f}, 95% interval [{two['b_low']:.3f}, " in text and "at λ = 1" in text
        assert ("**Storage boundary with an overhead (one budget, a sensitivity row).** N_b(D) = N0 + c D^b"
                in text)
        assert "| true boundary | true b | N0 |" in text and "coverage (two-budget fit)" in text
        assert "coverage (overhead fit)" in text and "The verdict needs the two-budget fit's interval" in text
        assert "one budget: the overhead fit to the full-budget outcomes alone" in text
        assert "bits per parameter at the margin" in text and "pure power law, no overhead (Firth)" in text
        assert "The design can carry a verdict: calibrated (set by the test)" in text
        assert "interval rule's verdict" in text and "recall ≥ 0.8 counts as stored" in text
        assert "dash-dot vermillion line: the paper's 2" in section.figures[1][1]
        checks = [memorisation(analysis)]
        pages = [section, *build.theory_sections(checks, tmp_path)]
        markdown = render.render_markdown("report", checks, pages, tmp_path)
        page = html_page.render_html("report", checks, pages)
        assert "memorisation_boundary_memorisation.png" in markdown and "Memorisation grid: memorisation" in page
        assert "Memorisation (Sec. 5)" in page and "power paper" in markdown.lower()
    if name == "censored":
        assert "| 128 | 24 | 24 | 0 | below grid | - | - | < 780 |" in text
        assert "**Power against the alternatives" in text
    if name == "unfitted":
        assert "Not fitted: storage boundary: every run stored" in text and "No joint fit" in section.figures[1][1]
