"""The decisive memorisation column's records: its design is its config at today's cost, its critical value is read
from its own grids and judged on others, its replication, the designs it replaced and the exploration that chose
its seeds are today's readings of their gaps; docs/results.md quotes each."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml
from helpers import ROOT
from test_results_record import _load, _section


def test_the_decisive_design_is_its_config_and_its_recorded_cost_is_todays() -> None:
    """config/memorisation_decisive.yaml has the model sizes and numbers of facts its power record simulated, and
    today's code gives the recorded cost; docs/results.md quotes the record's commit."""
    from assocmem.memorisation import decisive, power_alternatives
    from assocmem.model import DecoderLM, ModelConfig

    rec = _load("memorisation_decisive_power.json")
    exp = yaml.safe_load((ROOT / "config" / "memorisation_decisive.yaml").read_text())["experiments"]
    (spec,) = exp.values()
    sizes = [DecoderLM(ModelConfig.from_dict(model, vocab_size=37)).num_parameters()
             for model in spec["models"].values()]
    assert sizes == rec["n_params"] == list(decisive.N_PARAMS)
    facts = spec["dataset"]["facts"]["count"]
    assert sorted(round(facts * f) for f in spec["subsets"]["fractions"]) == rec["n_facts"]
    assert spec["sweep"]["seeds"] == rec["seeds"] == decisive.SEEDS
    assert rec["new_runs"] == len(sizes) * len(rec["n_facts"]) * rec["seeds"]
    runs = decisive.recorded_runs()
    cost = decisive.cost(runs, power_alternatives.truths(runs))
    # pytest.approx compares a list of dicts with ==: each truth's row on its own, its boundaries (read off a fit) to
    # 1e-6 (a 2-core AMD EPYC Zen 3 moved them by 1.3e-7 relative)
    for now, then in zip(cost["by_truth"], rec["cost"]["by_truth"], strict=True):
        assert now == pytest.approx(then, rel=1e-6)
    section = _section("The memorisation grid")
    assert rec["commit"] in section and rec["analysis"] == decisive.ANALYSIS == "two_budget_calibrated"
    assert f"× {rec['seeds']} seeds = {rec['new_runs']} runs" in section
    assert rec["n_sim"] == decisive.SIMULATIONS == exp[next(iter(exp))]["sweep"]["power_sims"]
    assert ("**It decides" if rec["can_decide"] else "**It does not decide") in section
    today, recorded = decisive.record_fit(runs), rec["record_fit"]
    keys = ("b", "b_low", "b_high", "b_at_lambda_0", "b_at_lambda_1", "k")
    assert [today[k] for k in keys] == pytest.approx([recorded[k] for k in keys], rel=1e-4)
    stacked = pd.read_json(ROOT / "benchmarks" / "records" / "gpu-check-2026-11-26-h200" / "stacked_g5_k16.jsonl",
                           lines=True).query("bench == 'stacked'")["stacked_replica_steps_per_s"].median()
    steps = [row["steps"] for row in rec["cost"]["by_truth"]]
    assert (f"{stacked:,.0f} replica-steps/s" in section
            and f"{min(steps) / stacked / 3600:.1f}–{max(steps) / stacked / 3600:.1f}\n  hours" in section)
    shorter = _load("memorisation_decisive_power_2p6m.json")  # the 12-size column it replaced, same simulation
    assert shorter["n_params"] == list(decisive.N_PARAMS[:12]) and shorter["n_sim"] == rec["n_sim"]
    for row in rec["power"]["rows"]:  # the table quotes the judged grids at both critical values
        quoted = f"| {power_alternatives.FAMILY_LABELS[row['family']]} | {row['b']:.3g} |"
        cells = next(text for text in section.splitlines() if text.startswith(quoted)).split(" | ")
        models = ("two_budget_calibrated", "two_budget", "overhead")
        assert cells[2:5] == [f"{row[model]['coverage']:.1%}" for model in models]
        for cell, model in zip(cells[5:7], models[:2], strict=True):
            assert cell.strip(" |") == "; ".join(f"{LAW_B[law]}: {share:.1%}"
                                                 for law, share in row[model]["excludes"].items())


LAW_B = {"allen_zhu": "1", "kaplan": "1.35", "paper": "2"}


def _recheck_calibration(rec: dict) -> dict:
    """Today's rule read from a decisive record's kept gaps (the file its ``gaps`` names): its calibrated value, the
    judged grids' summaries at it and at χ²'s, and its critical-value sensitivity, each equal to the record's;
    returns the calibration."""
    from assocmem.memorisation import decisive, power_alternatives

    assert rec["calibration_seed"] != rec["seed"]
    gaps = pd.read_csv(ROOT / rec["gaps"])

    def power_of(grids: str) -> dict:
        table = gaps[gaps["grids"] == grids]
        columns = ["b_hat", "gap_at_truth", "gap_at_allen_zhu", "gap_at_kaplan", "gap_at_paper"]
        rows = [{"family": family, "law": law, "b": rec["power"]["rows"][i]["b"],
                 "two_budget_gaps": group.sort_values("grid")[columns].to_numpy().tolist()}
                for i, ((family, law), group) in enumerate(table.groupby(["family", "law"], sort=False))]
        return {"seed": int(table["seed"].iloc[0]), "n_sim": rec["n_sim"], "rows": rows}

    calibration = power_alternatives.calibrated_threshold(power_of("calibration"))
    assert calibration["threshold"] == rec["calibration"]["threshold"]
    assert calibration["seed"] == rec["calibration_seed"]
    assert calibration["threshold_interval"] == rec["calibration"]["threshold_interval"]
    judged = power_alternatives.at_threshold(power_of("judged"), calibration["threshold"])
    at_chi2 = power_alternatives.at_threshold(power_of("judged"), power_alternatives.bo.THRESHOLD)
    for row, chi2, recorded in zip(judged["rows"], at_chi2["rows"], rec["power"]["rows"], strict=True):
        assert (row["family"], row["law"]) == (recorded["family"], recorded["law"])
        assert row["two_budget_calibrated"] == recorded["two_budget_calibrated"]
        assert chi2["two_budget_calibrated"] == recorded["two_budget"]
    sensitivity = decisive.critical_value_sensitivity(power_of("judged"), power_of("calibration"), calibration)
    assert sensitivity == rec["critical_value_sensitivity"]
    return calibration


def _stated_row(rec: dict) -> dict:
    """A decisive record's critical-value sensitivity row at its own stated (calibrated) value."""
    return next(row for row in rec["critical_value_sensitivity"] if row["choice"].endswith("(stated)"))


def test_the_decisive_critical_value_is_read_from_its_own_grids_and_judged_on_others() -> None:
    """The record's calibrated critical value is the one today's rule reads from its calibration grids' gaps (kept
    in the gaps table), the judged grids' summaries at it and at χ²'s are today's reading of their gaps, the config
    states the value (rounded up) before the column runs, and docs/results.md quotes it."""
    from assocmem.memorisation import decisive

    rec = _load("memorisation_decisive_power.json")
    assert rec["seed"] == decisive.SEED and rec["calibration_seed"] == decisive.CALIBRATION_SEED
    calibration = _recheck_calibration(rec)
    spec = next(iter(yaml.safe_load((ROOT / "config" / "memorisation_decisive.yaml").read_text())["experiments"]
                     .values()))
    stated = spec["sweep"]["interval_threshold"]
    assert calibration["threshold"] <= stated < calibration["threshold"] + 0.01
    section = _section("The memorisation grid")
    assert f"**{stated:.2f}**" in section
    low, high = calibration["threshold_interval"]
    assert f"is {low:.2f}–{high:.2f}" in section
    for row in rec["critical_value_sensitivity"]:  # the sensitivity table quotes every row
        assert (f"| {row['choice']} | {row['threshold']:.2f} | {row['min_coverage']:.1%} | "
                f"{row['weakest_paper_exclusion']:.1%} | {'yes' if row['can_decide'] else 'no'} |") in section


def _design_row(rec: dict, role: str) -> str:
    """A decisive record's row in docs/results.md's table of designs."""
    stated = _stated_row(rec)
    return (f"| {rec['seeds']} | {role} | {rec['calibration_seed']} / {rec['seed']} | {stated['threshold']:.2f} | "
            f"{stated['min_coverage']:.1%} | {stated['weakest_paper_exclusion']:.1%} | "
            f"{'yes' if rec['can_decide'] else 'no'} |")


def test_the_decisive_replication_is_todays_reading_of_its_gaps_and_results_md_quotes_it() -> None:
    """The replication (calibrated and judged at two other seeds, fixed before it ran): today's rule reads its
    calibrated value and decision from its gaps; docs/results.md quotes its value, weakest exclusion and decision
    beside the stated record's."""
    from assocmem.memorisation import decisive

    rec = _load("memorisation_decisive_power_replication.json")
    stated_record = _load("memorisation_decisive_power.json")
    assert rec["replication"] and (rec["seed"], rec["calibration_seed"]) == decisive.REPLICATION_SEEDS
    assert not stated_record["replication"]
    assert {k: rec[k] for k in ("n_params", "n_facts", "seeds", "n_sim")} == {
        k: stated_record[k] for k in ("n_params", "n_facts", "seeds", "n_sim")}
    _recheck_calibration(rec)
    section = _section("The memorisation grid")
    assert rec["commit"] in section
    assert f"{rec['simulation_s']:,.0f} s in two processes" in section
    weakest = [_stated_row(one)["weakest_paper_exclusion"] for one in (stated_record, rec)]
    assert f"{sum(weakest) / 2:.1%} of the {2 * rec['n_sim']} together" in section
    for one, role in ((stated_record, "stated"), (rec, "replication")):
        assert _design_row(one, role) in section


# the designs the stated one replaced, each record kept beside its gaps: seeds a cell, role, whether it decided
REPLACED_DECISIVE = {"memorisation_decisive_power_3seeds.json": (3, "stated", False),
                     "memorisation_decisive_power_5seeds.json": (5, "stated", True),
                     "memorisation_decisive_power_5seeds_replication.json": (5, "replication", False)}


@pytest.mark.parametrize("name", sorted(REPLACED_DECISIVE))
def test_each_replaced_decisive_record_is_todays_reading_of_its_gaps_and_results_md_quotes_it(name: str) -> None:
    """The designs the stated one replaced (3 seeds at c950160; 5 seeds at f0086e9 and its replication at aaa6344),
    each record's gaps kept beside it: today's rule reads the same calibrated value and decision from its gaps, and
    docs/results.md's table of designs quotes them."""
    rec = _load(name)
    seeds, role, decided = REPLACED_DECISIVE[name]
    assert (rec["seeds"], rec.get("replication", False), rec["can_decide"]) == (
        seeds, role == "replication", decided)
    assert rec["gaps"].startswith(f"docs/results/memorisation_decisive_gaps_{seeds}seeds")
    _recheck_calibration(rec)
    section = _section("The memorisation grid")
    assert rec["commit"] in section and _design_row(rec, role) in section


def test_the_decisive_seeds_were_never_read_by_a_replaced_design_or_the_exploration() -> None:
    """The stated design is calibrated, judged and replicated on seeds no replaced design's record read, nor the
    exploration its number of seeds was chosen on."""
    from assocmem.memorisation import decisive

    used = {seed for rec in map(_load, REPLACED_DECISIVE) for seed in (rec["seed"], rec["calibration_seed"])}
    used |= set(decisive.EXPLORATION_SEEDS)
    assert len(set(decisive.STATED_SEEDS) | set(decisive.REPLICATION_SEEDS)) == 4
    assert not (set(decisive.STATED_SEEDS) | set(decisive.REPLICATION_SEEDS)) & used


def test_the_exploration_that_chose_the_seeds_is_todays_reading_of_its_gaps_and_results_md_quotes_it() -> None:
    """The exploration at the stated number of seeds a cell (``--explore``, on the exploration seeds, 100 grids a
    truth): today's rule reads its calibrated value and decision from its gaps; docs/results.md's table of designs
    quotes it."""
    from assocmem.memorisation import decisive

    rec = _load(f"memorisation_decisive_power_exploration_{decisive.SEEDS}seeds.json")
    assert rec["exploration"] and not rec["replication"]
    assert (rec["seed"], rec["calibration_seed"]) == decisive.EXPLORATION_SEEDS
    assert (rec["seeds"], rec["n_sim"]) == (decisive.SEEDS, decisive.EXPLORATION_SIMULATIONS)
    assert rec["n_params"] == list(decisive.N_PARAMS) and rec["n_facts"] == list(decisive.N_FACTS)
    _recheck_calibration(rec)
    section = _section("The memorisation grid")
    assert rec["commit"] in section and _design_row(rec, "exploration") in section
