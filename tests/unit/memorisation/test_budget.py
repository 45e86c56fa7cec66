"""The default run's memorisation row quotes the power of the largest grid that fits beside it
(assocmem.memorisation.budget): the shipped record must be what today's code computes, for the design of
config/memorisation.yaml with one seed."""

from __future__ import annotations

import json

from helpers import ROOT

from assocmem.config import load_config, load_schema
from assocmem.memorisation import budget
from assocmem.report.claims.memorisation import GRID_COMMAND, no_grid


def test_the_budget_design_is_one_seed_of_the_shipped_grid():
    from assocmem.facts.tokenize import vocabulary
    from assocmem.model import DecoderLM, ModelConfig
    from assocmem.schemas import config_schema_path

    config = load_config(ROOT / "config" / "memorisation.yaml", load_schema(config_schema_path()))
    exp = config["experiments"]["memorisation"]
    facts = exp["dataset"]["facts"]
    vocab = len(vocabulary(facts["key_vocab"], facts["value_vocab"]))
    n = sorted(DecoderLM(ModelConfig.from_dict(spec, vocab_size=vocab)).num_parameters()
               for spec in exp["models"].values())
    d = sorted(round(facts["count"] * fraction) for fraction in exp["subsets"]["fractions"])
    assert tuple(n) == budget.N_PARAMS and tuple(d) == budget.N_FACTS
    assert len(budget.design()) == len(n) * len(d) and budget.design()["seed"].nunique() == 1


def test_the_shipped_power_record_is_what_the_code_computes_today():
    """Recomputed from scratch (same seed): a change to the power simulation or to the design must re-run
    `python -m assocmem.memorisation.budget`, or this fails."""
    fresh = json.loads(json.dumps(budget.compute()))  # as written: tuples become lists
    # floats to 1e-12: the BLAS of another host moves the last digit or two of a fitted exponent's median
    assert _rounded(fresh) == _rounded(budget.load())


def _rounded(value):
    """``value`` with every float to 12 significant digits (nested dicts and lists)."""
    if isinstance(value, dict):
        return {key: _rounded(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_rounded(item) for item in value]
    return float(f"{value:.12g}") if isinstance(value, float) else value


def test_the_default_row_states_the_power_and_the_deciding_command():
    record = budget.load()
    row = no_grid()
    assert not record["can_decide"]  # one seed of the grid cannot tell the paper's 2 from the other laws
    assert record["weakest"]["excluded"] < 0.8
    assert f"{record['weakest']['excluded']:.1%} of grids" in row.evidence and GRID_COMMAND in row.evidence
    assert row.numbers["budget_grid_can_decide"] is False and row.numbers["budget_grid_runs"] == 32
