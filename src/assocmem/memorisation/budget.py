"""Can a memorisation grid small enough for the default run decide the paper's b = 2? (issue 27, item 2)

The default run (`snakemake --cores all`) keeps to ten minutes on 2 CPU cores, most of it its own Question-Formation
runs. A grid of the size that could join it is one seed of config/memorisation.yaml's grid: its 8 model sizes × 4
numbers of facts, 32 of its 96 runs, about a third of its measured time (docs/results.md); any smaller grid has less
power. This module simulates that design's power at a near-step boundary (k = K_SHARP, the sharpness most
favourable to a small grid: outcomes nearly deterministic), so the default's memorisation row can say with a number
why it is not-testable and which command decides it.

The simulation takes seconds, so its result ships as ``budget_power.json`` beside this module, written by
``python -m assocmem.memorisation.budget``; tests/unit/memorisation/test_budget.py recomputes it with today's code
and checks the design against config/memorisation.yaml.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from assocmem.io import write_json
from assocmem.memorisation import boundary as mb
from assocmem.memorisation import boundary_power as bp
from assocmem.memorisation.analysis import K_SHARP

# config/memorisation.yaml's model sizes (parameters, vocabulary of 37) and numbers of facts, one seed
N_PARAMS = (798, 1256, 2460, 4048, 7328, 15600, 26944, 58848)
N_FACTS = (128, 256, 512, 1024)
SIMULATIONS = 200
SEED = 27
RECORD = Path(__file__).with_name("budget_power.json")


def design() -> pd.DataFrame:
    return pd.DataFrame([(n, d, 0) for n in N_PARAMS for d in N_FACTS], columns=["n_params", "n_facts", "seed"])


def compute() -> dict[str, Any]:
    """The power of the budget grid: per law, the coverage of the 95% interval and the share of grids whose interval
    excludes each other law; whether it can carry a verdict on the paper (its 2 told from 1 and 1.35)."""
    power = bp.design_power(design(), k=K_SHARP, n_sim=SIMULATIONS, seed=SEED, jitter=True)
    decide, reason = bp.can_decide(power, bp.PAPER_PAIRS)
    true, other, share = bp.weakest_separation(power, bp.PAPER_PAIRS)
    return {"runs": len(design()), "n_params": list(N_PARAMS), "n_facts": list(N_FACTS), "seeds": 1, "k": K_SHARP,
            "n_sim": SIMULATIONS, "seed": SEED, "can_decide": decide, "reason": reason,
            "weakest": {"true": true, "other": other, "excluded": share},
            "by_b": power["by_b"]}


def load() -> dict[str, Any]:
    return json.loads(RECORD.read_text())


def sentence(record: dict[str, Any]) -> str:
    """The finding in words, for the default's memorisation row."""
    laws, weakest = mb.LAWS, record["weakest"]
    verdict = "could carry a verdict" if record["can_decide"] else "cannot carry a verdict"
    return (f"A grid of the size that could join the default run in its ten minutes on 2 CPU cores, one seed of "
            f"config/memorisation.yaml's grid ({record['runs']} runs: {len(record['n_params'])} model sizes × "
            f"{len(record['n_facts'])} numbers of facts, about a third of that grid's time), {verdict} even at a "
            f"near-step boundary ($k={record['k']:g}$, "
            f"{record['n_sim']} simulated grids per law): simulated at $b={laws[weakest['true']]:.3g}$, its interval "
            f"excludes {laws[weakest['other']]:.3g} in {weakest['excluded']:.1%} of grids (needed "
            f"{bp.MIN_POWER:.0%}), and a smoother boundary leaves it less power.")


if __name__ == "__main__":
    write_json(RECORD, compute())
    print(sentence(load()))
