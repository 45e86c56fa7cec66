"""The memorisation grid's records (issues 25 and 38): today's code refits the recorded grid and its re-analysis,
the recorded grid is the shipped design, its power simulation recovers each law, and the budget and precision
checks are today's comparisons of their records; docs/results.md quotes each."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers import ROOT
from test_results_record import RECORDS, _close, _load, _section

# ---------------------------------------------------------------- the memorisation grid (issue 25)


def _memorisation() -> dict:
    return _load("memorisation.json")


def test_results_md_quotes_the_recorded_memorisation_grid() -> None:
    rec = _memorisation()
    memo = rec["memorisation"]
    fit, bits = memo["fit"], memo["bits_per_param"]
    section = _section("The memorisation grid")
    assert rec["commit"] in section and rec["date"] in section
    assert f"b = {fit['b']:.2f}, 95% CI [{fit['b_low']:.2f}, {fit['b_high']:.2f}]" in section
    assert f"{bits['value']:.2f} bits per parameter, 95% CI [{bits['low']:.2f}, {bits['high']:.2f}]" in section
    for power in (memo["power"], memo["power_sharp"]):
        for row in power["by_b"]:
            assert f"{row['coverage']:.0%} at b = {row['b']:.3g} (k = {power['k']:.3g})" in section
    assert f"memorisation: {rec['verdicts']['memorisation']}" in section
    minutes = rec["wall_s"] / 60
    assert f"{minutes:.0f} min" in section and rec["wall_s"] <= 3600  # issue 25: <= 60 min on 2 cores
    assert "memorisation.yaml" in rec["command"]


def test_todays_code_refits_the_recorded_memorisation_grid() -> None:
    from assocmem.memorisation import boundary as mb
    from assocmem.memorisation.cells import stored_at

    memo = _memorisation()["memorisation"]
    runs = stored_at(pd.DataFrame(memo["runs"]), memo["threshold"])
    fit = mb.fit_storage_boundary(runs)
    recorded = memo["fit"]
    assert (fit.b, fit.b_low, fit.b_high, fit.c) == pytest.approx(
        (recorded["b"], recorded["b_low"], recorded["b_high"], recorded["c"]), abs=1e-4)


def test_the_recorded_memorisation_grid_is_the_shipped_design() -> None:
    memo = _memorisation()["memorisation"]
    exp = yaml.safe_load((ROOT / "config" / "memorisation.yaml").read_text())["experiments"]["memorisation"]
    assert len(memo["n_params"]) == len(exp["models"]) and memo["seeds"] == exp["sweep"]["seeds"]
    assert memo["n_facts"] == sorted(round(exp["dataset"]["facts"]["count"] * f) for f in exp["subsets"]["fractions"])
    assert memo["n_span"] >= memo["d_span"] ** 2 and memo["threshold"] == exp["sweep"]["recall_threshold"]


def test_the_memorisation_power_at_the_shipped_design_recovers_each_law() -> None:
    """Issue 25, done-when: grids simulated at the shipped design (its N, D and seeds) with b = 1, 1.35 and 2 are
    recovered and told apart with coverage >= 90% at nominal 95%; an independent replicate (another seed) of the
    sweep stage's own check, at the near-step sharpness where the design is weakest against a pinned grid."""
    from assocmem.memorisation import boundary_power as bp

    memo = _memorisation()["memorisation"]
    design = pd.DataFrame(memo["runs"])[["n_params", "n_facts", "seed"]]
    power = bp.design_power(design, k=memo["power_sharp"]["k"], n_sim=200, seed=12345, jitter=True)
    for row in power["by_b"]:
        assert row["coverage"] >= bp.MIN_COVERAGE, row
        assert row["mean_b"] == pytest.approx(row["b"], abs=max(0.15, 0.25 * row["median_width"])), row
    assert bp.can_decide(power, bp.PAPER_PAIRS)[0]


# ---------------------------------------------------------------- the memorisation re-analysis (issue 38)


def test_todays_code_refits_the_memorisation_reanalysis_and_results_md_quotes_it() -> None:
    """docs/results/memorisation_reanalysis.json is today's analysis of the recorded grid's runs (the overhead model
    N_b = N0 + c D^b): today's code refits b and N0 with their intervals, and docs/results.md quotes them and the
    verdict."""
    from assocmem.memorisation import boundary_budget as bb
    from assocmem.memorisation import boundary_overhead as bo
    from assocmem.memorisation.cells import stored_at

    rec = _load("memorisation_reanalysis.json")
    memo = _memorisation()["memorisation"]
    recorded = rec["analysis"]["overhead_fit"]
    fit = bo.fit_overhead(stored_at(pd.DataFrame(memo["runs"]), memo["threshold"]))
    assert (fit.b, *fit.b_interval(), fit.n0) == pytest.approx(
        (recorded["b"], recorded["b_low"], recorded["b_high"], recorded["n0"]), rel=1e-3)
    section = _section("The memorisation grid")
    assert (f"b = {recorded['b']:.2f}, 95% CI [{recorded['b_low']:.2f}, {recorded['b_high']:.2f}]; "
            f"N0 = {recorded['n0']:,.0f}") in section
    assert f"memorisation (re-analysis): {rec['verdict']}" in section and rec["commit"] in section
    two = rec["analysis"]["two_budget_fit"]  # issue 41's primary
    assert rec["analysis"]["primary_model"] == "two_budget"
    refit = bb.fit_two_budget(stored_at(pd.DataFrame(memo["runs"]), memo["threshold"]))
    assert (refit.theta[bb.B_INDEX], *refit.b_interval()) == pytest.approx((two["b"], two["b_low"], two["b_high"]),
                                                                            rel=1e-3)
    assert f"b = {two['b']:.2f}, 95% CI\n  [{two['b_low']:.2f}, {two['b_high']:.2f}]" in section


# The overhead fit's optimizer (TNC, its default tolerances) stops near the optimum, not on it, and where depends on
# the host's floating point: on a 2-core AMD EPYC Zen 3 the boundaries it implies moved by up to 4.9e-4 relative from
# the records' and the bf16 grid's b by 1.3e-3 (0.09% of its 95% interval's width). Numbers read off the fit are held
# to FIT_REL (b: to 1% of its interval's width where it has one); the per-D numbers the fit does not touch to 1e-6.
FIT_REL = 1e-3


def _fitted(row: dict) -> dict:
    return {key: value for key, value in row.items() if key.startswith("overhead_")}


def _fitted_apart(row: dict) -> dict:
    return {key: value for key, value in row.items() if not key.startswith("overhead_")}


def test_the_budget_check_is_todays_comparison_of_the_two_records_and_results_md_quotes_it() -> None:
    """docs/results/memorisation_budget_check.json (issue 38, item 3): today's comparison of the recorded grid with
    its 2x re-run of the cells near the boundary gives the recorded per-D boundaries, b and 'moved'; docs/results.md
    says what it found (the rule's answer and the direction the boundaries went)."""
    from assocmem.memorisation import budget_check

    rec = _load("memorisation_budget_check.json")
    once, twice = (budget_check.read_runs(RECORDS / Path(name).name)[0] for name in (rec["once"], rec["twice"]))
    today = budget_check.compare(once, twice, intervals=False)
    assert today["moved"] == rec["moved"] and today["replaced_runs"] == rec["replaced_runs"]
    for label in ("1x", "2x"):
        assert today["b"][label]["b"] == pytest.approx(rec["b"][label]["b"], rel=1e-3)
    for now, then in zip(today["per_d"], rec["per_d"], strict=True):
        assert _fitted_apart(now) == pytest.approx(_fitted_apart(then), rel=1e-6)
        assert _fitted(now) == pytest.approx(_fitted(then), rel=FIT_REL)
    section = _section("The memorisation grid")
    assert ("it did not move by that rule" if not rec["moved"] else "it moved") in section
    b2 = rec["b"]["2x"]
    assert f"1.39, 95% CI [{b2['low']:.2f}, ∞]" in section and math.isinf(b2["high"])
    for row in rec["per_d"]:
        if row["n_b_2x"] != row["n_b_1x"]:
            assert f"from {row['n_b_1x']:,.0f} to {row['n_b_2x']:,.0f}" in section
    assert _load("memorisation_2x.json")["commit"] in section


def test_the_precision_check_is_todays_comparison_of_its_records_and_results_md_quotes_it() -> None:
    """docs/results/memorisation_precision_check.json (issue 41): today's paired comparison of the fp32 and bf16
    re-runs of the near cells (and of the fp32 re-run against the grid's record) gives the recorded numbers, and
    docs/results.md quotes the rule's answer, the table and the runs' commit and wall times."""
    from assocmem.memorisation import budget_check, precision_check

    rec = _load("memorisation_precision_check.json")
    reference, fp32, bf16 = (budget_check.read_runs(RECORDS / Path(rec[k]).name)[0]
                             for k in ("reference", "fp32", "bf16"))
    today = json.loads(json.dumps(precision_check.compare(fp32, bf16, reference, intervals=False)))
    for key in ("paired", "fp32_against_reference", "sensitivity"):
        assert _close(today[key], rec[key]), key
    for now, then in zip(today["boundary"]["per_d"], rec["boundary"]["per_d"], strict=True):
        assert _close(_fitted_apart(now), _fitted_apart(then))
        assert _fitted(now) == pytest.approx(_fitted(then), rel=FIT_REL)
    assert today["boundary"]["moved"] == rec["boundary"]["moved"] and today["rule"] == rec["rule"]
    for label in precision_check.PRECISIONS:
        then = rec["boundary"]["b"][label]
        assert today["boundary"]["b"][label]["b"] == pytest.approx(then["b"], abs=0.01 * (then["high"] - then["low"]))
    section = _section("The memorisation grid")
    assert ("bf16 stores differently" if rec["paired"]["differs"] else "bf16 does not store differently") in section
    for key in ("paired", "fp32_against_reference"):
        p = rec[key]
        ratio = p["step_ratio"]
        assert f"{p['stored_both']} / {p['stored_neither']}" in section
        assert f"{p['stored_first_only']} / {p['stored_second_only']} ({p['sign_test_p']:.2f})" in section
        assert f"{ratio['mean']:.3f} [{ratio['low']:.3f}, {ratio['high']:.3f}] ({p['log_step_ratio']['n']})" in section
        assert f"| {p['detectable_step_ratio']:.3f} " in section
        recall = p["recall_difference_budget_limited"]
        quoted = f"{recall['mean']:.3f} [{recall['low']:.3f}, {recall['high']:.3f}] ({recall['n']})"
        assert quoted.replace("-0.000", "0.000") in section.replace("−", "-")
    assert rec["paired"]["sign_test_can_reject"] is False and "has no power here" in section
    b = rec["boundary"]["b"]
    assert all(f"{b[k]['b']:.2f} [{b[k]['low']:.2f}, {b[k]['high']:.2f}]" in section for k in b)
    for precision in precision_check.PRECISIONS:
        run = _load(f"memorisation_{precision}.json")
        minutes, seconds = divmod(round(run["wall_s"]), 60)
        assert run["commit"] == rec["commit"] and f"{precision} {minutes} min {seconds:02d} s" in section
    assert rec["commit"] in section and rec["date"] in section


def test_the_replicated_precision_check_is_todays_pooled_comparison_and_results_md_quotes_it() -> None:
    """docs/results/memorisation_precision_check_replicated.json: the first pair of near-cell records and their
    replication under another global seed, paired within each replication and pooled, give the recorded numbers;
    docs/results.md quotes the pooled answer, the replication's own and the replication runs' commit and times."""
    from assocmem.memorisation import budget_check, precision_check

    rec = _load("memorisation_precision_check_replicated.json")
    pairs = [(RECORDS / Path(rec["fp32"]).name, RECORDS / Path(rec["bf16"]).name)]
    pairs += [(RECORDS / Path(a).name, RECORDS / Path(b).name) for a, b in rec["replications"]]
    assert len(pairs) == 2
    fp32, bf16 = precision_check.read_twins(pairs)
    reference = budget_check.read_runs(RECORDS / Path(rec["reference"]).name)[0]
    today = json.loads(json.dumps(precision_check.compare(fp32, bf16, reference, intervals=False)))
    for key in ("paired", "by_replication", "sensitivity", "fp32_against_reference"):
        assert _close(today[key], rec[key]), key
    assert _close(rec["by_replication"][0], _load("memorisation_precision_check.json")["paired"])
    section = _section("The memorisation grid").replace("\n  ", " ")
    p, again = rec["paired"], rec["by_replication"][1]
    ratio = p["step_ratio"]
    assert not p["differs"] and "By the rule bf16 still does not store differently" in section
    assert f"in fp32 only / bf16 only **{p['stored_first_only']} / {p['stored_second_only']}** (sign test p " \
           f"{p['sign_test_p']:.2f}" in section
    assert f"**{ratio['mean']:.3f} [{ratio['low']:.3f}, {ratio['high']:.3f}]** over {p['log_step_ratio']['n']} " \
           f"pairs (detects {p['detectable_step_ratio']:.3f}×" in section
    assert f"**Pooled, {p['pairs']} pairs:** stored in both / neither {p['stored_both']} / {p['stored_neither']}" \
        in section
    again_ratio = again["step_ratio"]
    assert f"{again['stored_first_only']} / {again['stored_second_only']} discordant (p {again['sign_test_p']:.2f})" \
        in section
    assert f"{again_ratio['mean']:.3f} [{again_ratio['low']:.3f}, {again_ratio['high']:.3f}]" in section
    bench = (ROOT / "benchmarks" / "README.md").read_text().replace("\n", " ")
    first, two_k = rec["by_replication"][0], _load("memorisation_precision_check_2k.json")["paired"]

    def quoted(result: dict) -> str:
        r = result["step_ratio"]
        return f"{r['mean']:.3f} [{r['low']:.3f}, {r['high']:.3f}]"

    assert f"{quoted(first)} times fp32's over {first['log_step_ratio']['n']} twin runs" in bench
    assert f"{first['stored_first_only'] + first['stored_second_only']} of {first['pairs']} pairs" in bench
    assert f"{quoted(p)} over {p['log_step_ratio']['n']} and {p['stored_first_only']} / " \
           f"{p['stored_second_only']} of {p['pairs']} pairs" in bench
    assert f"{two_k['pairs']} twins, all stored), {quoted(two_k)}" in bench
    for precision in precision_check.PRECISIONS:
        run = _load(f"memorisation_{precision}_seed2025.json")
        minutes, seconds = divmod(round(run["wall_s"]), 60)
        assert run["commit"] == rec["commit"] and f"{precision} {minutes} min {seconds:02d} s" in section
    assert rec["commit"] in section


def test_the_precision_check_beyond_the_grid_is_todays_comparison_and_results_md_quotes_it() -> None:
    """docs/results/memorisation_precision_check_2k.json: today's paired comparison of the 2,048-fact runs in fp32
    and bf16 (no reference grid) gives the recorded numbers; docs/results.md quotes them, the models and wall times."""
    from assocmem.memorisation import budget_check, precision_check

    rec = _load("memorisation_precision_check_2k.json")
    assert rec["reference"] is None and "boundary" not in rec
    fp32, bf16 = (budget_check.read_runs(RECORDS / Path(rec[k]).name)[0] for k in ("fp32", "bf16"))
    today = json.loads(json.dumps(precision_check.compare(fp32, bf16)))
    for key in ("paired", "sensitivity"):
        assert _close(today[key], rec[key]), key
    section = _section("The memorisation grid")
    p = rec["paired"]
    ratio, median = p["step_ratio"], rec["sensitivity"][1]
    assert p["stored_both"] == p["pairs"] and f"all {p['pairs']} pairs stored in both precisions" in section
    assert f"**{ratio['mean']:.3f} [{ratio['low']:.3f}, {ratio['high']:.3f}]** over {p['pairs']} pairs" in section
    assert f"median {median['step_ratio']:.3f} [{median['low']:.3f}, {median['high']:.3f}]" in section
    assert f"detects {p['detectable_step_ratio']:.3f}× with 80% power" in section
    assert ("bf16\n  does not store differently here either" if not p["differs"] else "stores differently") \
        in section.replace("bf16 does not", "bf16\n  does not")
    sizes = sorted(fp32["n_params"].unique())
    assert f"{sizes[0]:,}, {sizes[1]:,} and {sizes[2]:,} parameters" in section.replace("\n  ", " ")
    for precision in precision_check.PRECISIONS:
        run = _load(f"memorisation_precision_2k_{precision}.json")
        minutes, seconds = divmod(round(run["wall_s"]), 60)
        assert run["commit"] == rec["commit"] and f"{precision} {minutes} min {seconds:02d} s" in section
        assert run["memorisation"]["fit"] is None and "every run stored" in run["memorisation"]["overhead_reason"]
    assert rec["commit"] in section
