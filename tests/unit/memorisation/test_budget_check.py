"""Capacity, not budget (issue 38, item 3): the cells within one N step of the boundary are selected, the 2× config
of config/memorisation_test.yaml's tiny grid is a valid config with the budget doubled, and the comparison says
when the boundary moves."""

from __future__ import annotations

import pandas as pd
import yaml
from helpers import ROOT

from assocmem.config import load_config, load_schema
from assocmem.memorisation import budget_check as bc
from assocmem.schemas import config_schema_path

TINY = ROOT / "config" / "memorisation_test.yaml"
MODELS = {"m0": 400, "m1": 1000, "m2": 2500, "m3": 6000, "m4": 15000}
FRACTIONS = {96: 1.0, 48: 0.5, 24: 0.25}


def runs(boundary: dict[int, float], seeds: int = 3) -> pd.DataFrame:
    """Stored where N >= the boundary at each D (deterministic), recall to match."""
    rows = []
    for model, n in MODELS.items():
        for d, fraction in FRACTIONS.items():
            for s in range(seeds):
                stored = n >= boundary[d]
                rows.append({"model": model if s == 0 else f"{model}.s{s}", "n_params": n, "n_facts": d,
                             "subset": f"pct{100 * fraction:g}", "fraction": fraction, "seed": s,
                             "recall": 0.97 if stored else 0.5, "stored": stored})
    return pd.DataFrame(rows)


def test_the_cells_near_the_boundary_and_their_2x_config(tmp_path) -> None:
    once = runs({24: 700.0, 48: 1800.0, 96: 4000.0})
    cells = bc.near_boundary(once)
    assert set(zip(cells["model"], cells["n_facts"], strict=True)) >= {("m1", 24), ("m2", 96), ("m3", 96)}
    assert ("m0", 96) not in set(zip(cells["model"], cells["n_facts"], strict=True))  # 10x below its boundary
    config = yaml.safe_load(TINY.read_text())
    cells = cells.assign(model=cells["model"].map({"m3": "m2", "m4": "m2"}).fillna(cells["model"]))  # its 3 models
    twice = bc.twice_config(config, cells)
    (exp_name, exp), = twice["experiments"].items()
    original = config["experiments"]["memo"]
    assert exp_name == "memo_2x" and exp["train"]["max_epochs"] == 2 * original["train"]["max_epochs"]
    assert exp["train"]["max_steps"] == 2 * original["train"]["max_steps"]
    assert set(exp["models"]) <= set(original["models"]) and set(exp["subsets"]["fractions"]) <= {1.0, 0.5, 0.25}
    path = tmp_path / "memo_2x.yaml"
    path.write_text(yaml.safe_dump(twice, sort_keys=False))
    load_config(path, load_schema(config_schema_path()))  # a valid config


def test_the_comparison_says_whether_the_boundary_moved() -> None:
    once = runs({24: 700.0, 48: 1800.0, 96: 4000.0})
    same = bc.compare(once, once[once["n_params"].isin([1000, 2500, 6000])], intervals=False)
    assert not same["moved"] and same["replaced_runs"] == 27
    lower = runs({24: 300.0, 48: 700.0, 96: 1800.0})  # twice the budget stores with fewer parameters
    moved = bc.compare(once, lower[lower["n_params"].isin([1000, 2500, 6000])], intervals=False)
    assert moved["moved"] and moved["per_d"][-1]["stored_2x"] > moved["per_d"][-1]["stored_1x"]
