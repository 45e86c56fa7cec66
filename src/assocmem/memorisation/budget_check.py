"""Capacity, not budget (issue 38, item 3): re-run the cells of a memorisation grid that lie within one N step of
its storage boundary at twice the exposure budget, and compare the boundary.

Near the boundary the exposure budget, not capacity, may decide whether a run stores its facts (in the recorded
grid a cell at 512 facts went from recall 0.52 within half the budget to 0.88 at the full one). If doubling the
budget moves the boundary, the boundary measured is the budget's, and the verdict waits.

    python -m assocmem.memorisation.budget_check config docs/results/memorisation.json \\
        --config config/memorisation.yaml --out config/memorisation_2x.yaml
    snakemake --cores all --configfile config/memorisation_2x.yaml   # then record it (record-results)
    python -m assocmem.memorisation.budget_check compare docs/results/memorisation.json docs/results/<2x record>

``config`` selects the cells (the overhead fit's N_b(D) of the record; a cell is near when |log N - log N_b(D)| is
at most the N grid's largest step) and writes a config of the models and numbers of facts they span (a config is a
product, so it may hold a few cells beyond them) with ``train.max_epochs`` and ``train.max_steps`` doubled. The
experiment keeps its name's stem plus ``_2x``. ``compare`` replaces those cells' runs by the 2× runs and refits:
the per-D boundaries and b of the overhead model at 1× and 2×, and whether the boundary moved (a per-D boundary of
the 2× fit outside the 1× interval).
"""

from __future__ import annotations

import argparse
import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from assocmem.errors import AssocmemError
from assocmem.io import read_json, write_json
from assocmem.memorisation import boundary as mb
from assocmem.memorisation import boundary_overhead as bo
from assocmem.memorisation.cells import stored_at

FACTOR = 2


def near_boundary(runs: pd.DataFrame) -> pd.DataFrame:
    """The (model, n_params, n_facts, subset) cells within one N step of the overhead fit's boundary."""
    fit = bo.fit_overhead(runs)
    sizes = np.sort(runs["n_params"].unique().astype(float))
    step = float(np.max(np.diff(np.log(sizes))))
    cells = runs.drop_duplicates(["model", "n_facts"])[["model", "n_params", "n_facts", "subset", "fraction"]]
    log_nb = bo.log_boundary(fit.phi, np.log(cells["n_facts"].to_numpy(float)) - fit.data.log_d_ref)
    near = np.abs(np.log(cells["n_params"].to_numpy(float)) - log_nb) <= step + 1e-9
    return cells[near].reset_index(drop=True)


def variant_config(config: dict[str, Any], cells: pd.DataFrame, suffix: str,
                   change: Callable[[dict[str, Any]], None], check: str = "budget check") -> dict[str, Any]:
    """``config`` (one memorisation experiment) restricted to the cells' models and fractions, its experiment
    renamed with ``suffix`` and its ``train`` section edited in place by ``change``; errors begin with ``check``."""
    if len(config["experiments"]) != 1:
        raise AssocmemError(f"{check}: the config needs one experiment, found {', '.join(config['experiments'])}")
    if cells.empty:
        raise AssocmemError(f"{check}: no cell lies within one N step of the boundary")
    name, exp = next(iter(config["experiments"].items()))
    out = copy.deepcopy(config)
    exp = copy.deepcopy(exp)
    base_models = {label.split(".")[0] for label in cells["model"]}
    exp["models"] = {m: spec for m, spec in exp["models"].items() if m in base_models}
    exp["subsets"]["fractions"] = sorted({float(f) for f in cells["fraction"]}, reverse=True)
    change(exp["train"])
    out["experiments"] = {f"{name}{suffix}": exp}
    return out


def _double_budget(train: dict[str, Any]) -> None:
    if not train.get("max_epochs"):
        raise AssocmemError("budget check: train.max_epochs is not set, so the grid has no exposure budget to double")
    train["max_epochs"] = FACTOR * train["max_epochs"]
    train["max_steps"] = FACTOR * train["max_steps"]


def twice_config(config: dict[str, Any], cells: pd.DataFrame) -> dict[str, Any]:
    """``config`` (one memorisation experiment) restricted to the cells' models and fractions, budget doubled."""
    return variant_config(config, cells, f"_{FACTOR}x", _double_budget)


def read_runs(record_file: Path) -> tuple[pd.DataFrame, float]:
    memo = read_json(record_file).get("memorisation")
    if memo is None:
        raise AssocmemError(f"{record_file}: not a memorisation grid's record")
    return stored_at(pd.DataFrame(memo["runs"]), memo["threshold"]), memo["threshold"]


def replace_cells(grid: pd.DataFrame, reruns: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``grid`` with the runs of every (N, D) cell that ``reruns`` holds replaced by them, and those reruns."""
    keys = ["n_params", "n_facts"]
    replaced = reruns.merge(grid[keys].drop_duplicates(), on=keys)
    kept = grid.merge(replaced[keys].drop_duplicates(), on=keys, how="left", indicator=True)
    return pd.concat([kept[kept["_merge"] == "left_only"].drop(columns="_merge"), replaced],
                     ignore_index=True), replaced


def compare(once: pd.DataFrame, twice: pd.DataFrame, *, intervals: bool = True,
            labels: tuple[str, str] = ("1x", "2x")) -> dict[str, Any]:
    """The overhead fit with the near cells as recorded (``labels[0]``) and with them replaced by their re-runs
    (``labels[1]``: at 2x the exposures, or in another precision); ``intervals``: with the profile intervals for b,
    which take seconds on a separated grid."""
    first, second = labels
    combined, replaced = replace_cells(once, twice)
    rows, moved = [], False
    grids = {first: once, second: combined}
    fits = {label: bo.fit_overhead(runs) for label, runs in grids.items()}
    for d in sorted(once["n_facts"].unique()):
        z = np.array([np.log(d) - fits[first].data.log_d_ref])
        per_d = {label: mb.per_d_boundaries(runs[runs["n_facts"] == d]).iloc[0] for label, runs in grids.items()}
        inside = per_d[first]["n_b_low"] <= per_d[second]["n_b"] <= per_d[first]["n_b_high"]
        moved |= bool(per_d[second]["censoring"] == "inside" and not inside)
        row = {"n_facts": float(d), f"n_b_{first}": float(per_d[first]["n_b"]),
               f"low_{first}": float(per_d[first]["n_b_low"]), f"high_{first}": float(per_d[first]["n_b_high"]),
               f"n_b_{second}": float(per_d[second]["n_b"])}
        row |= {f"overhead_n_b_{label}": float(np.exp(bo.log_boundary(fit.phi, z)[0])) for label, fit in fits.items()}
        row |= {f"stored_{label}": int(runs.loc[runs["n_facts"] == d, "stored"].sum()) for label, runs in grids.items()}
        rows.append(row)
    ends = {label: fit.b_interval() if intervals else (np.nan, np.nan) for label, fit in fits.items()}
    return {"replaced_runs": len(replaced), "per_d": rows, "moved": moved,
            "b": {label: {"b": fit.b, "low": ends[label][0], "high": ends[label][1]}
                  for label, fit in fits.items()}}


def config_parser(sub: Any, help_text: str) -> argparse.ArgumentParser:
    """The ``config`` subcommand: a grid's record, its config and the config file to write."""
    p = sub.add_parser("config", help=help_text)
    p.add_argument("record", type=Path, help="the grid's record (docs/results/)")
    p.add_argument("--config", type=Path, required=True, help="the config that made the grid")
    p.add_argument("--out", type=Path, required=True)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    config_parser(sub, "write the 2x config of the cells near the boundary")
    p = sub.add_parser("compare", help="compare the boundary at 1x and 2x the exposures")
    p.add_argument("once", type=Path)
    p.add_argument("twice", type=Path)
    p.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.command == "config":
        runs, _ = read_runs(args.record)
        cells = near_boundary(runs)
        args.out.write_text(yaml.safe_dump(twice_config(yaml.safe_load(args.config.read_text()), cells),
                                           sort_keys=False))
        print(f"{len(cells)} cells within one N step of the boundary -> {args.out}")
        return 0
    result = compare(read_runs(args.once)[0], read_runs(args.twice)[0])
    if args.out:
        write_json(args.out, result)
    print(f"boundary {'moved' if result['moved'] else 'did not move'} at {FACTOR}x the exposures: b "
          + ", ".join(f"{k} {v['b']:.2f} [{v['low']:.2f}, {v['high']:.2f}]" for k, v in result["b"].items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
