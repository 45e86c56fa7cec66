"""Drawing the facts' keys: the hashed near-key check against comparing every pair (assocmem.facts.generate).

For each config asked (default: the decisive memorisation column's data, config/memorisation_decisive.yaml, and the
memorisation grid's, config/memorisation.yaml), draws the keys of its largest fact set twice in this process, with
the check the sampler picks (the kept keys' parts hashed) and pair by pair (``MAX_MASKS = 0``, the sampler's only
check before 2026-11-30), best of ``--rounds`` each, alternating. Prints each time, the ratio and whether both drew
the same keys; asserts nothing.

    python benchmarks/bench_facts.py
    python benchmarks/bench_facts.py --configs config/memorisation_decisive.yaml --rounds 5
    python benchmarks/bench_facts.py --hashed-only 200000 8 16 3   # keys, length, vocabulary, d: time and peak memory
"""

from __future__ import annotations

import argparse
import json
import time
import tracemalloc
from pathlib import Path

import numpy as np

from assocmem.autotune.measure import cpu_model_and_flags
from assocmem.config import load_config, load_schema
from assocmem.facts import generate
from assocmem.facts.generate import FactsSpec, sample_keys
from assocmem.schemas import config_schema_path

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ("config/memorisation_decisive.yaml", "config/memorisation.yaml")


def largest_spec(config_path: Path) -> FactsSpec:
    """The facts spec of the config's first experiment (its full fact set: subsets are its first facts)."""
    cfg = load_config(config_path, load_schema(config_schema_path()))
    exp = next(iter(cfg["experiments"].values()))
    return FactsSpec.from_config(exp["dataset"]["facts"], seed=cfg["seed"])


def timed(spec: FactsSpec, max_masks: int) -> tuple[float, np.ndarray]:
    before = generate.MAX_MASKS
    generate.MAX_MASKS = max_masks
    try:
        start = time.perf_counter()
        keys, _ = sample_keys(spec)
        return time.perf_counter() - start, keys
    finally:
        generate.MAX_MASKS = before


def hashed_only(count: int, length: int, vocab: int, d: int) -> dict:
    """One draw of ``count`` keys with the hashed check: its time and its peak traced memory (the pairwise check
    is not run: at large sizes it takes hours)."""
    spec = FactsSpec(count=count, unseen=0, key_length=length, value_length=1, key_vocab=vocab, value_vocab=2,
                     min_key_distance=d, seed=1)
    tracemalloc.start()
    start = time.perf_counter()
    _, drawn = sample_keys(spec)
    seconds, (_, peak) = time.perf_counter() - start, tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {"keys": count, "key_length": length, "key_vocab": vocab, "min_key_distance": d, "drawn": drawn,
            "hashed_s": seconds, "peak_traced_mb": peak / 1e6}


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configs", nargs="+", default=list(CONFIGS))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--hashed-only", nargs=4, type=int, metavar=("KEYS", "LENGTH", "VOCAB", "D"))
    args = p.parse_args(argv)
    if args.hashed_only:
        row = hashed_only(*args.hashed_only)
        print(json.dumps({**row, "cpu": cpu_model_and_flags()[0]}))
        return [row]
    rows = []
    for name in args.configs:
        spec = largest_spec(ROOT / name)
        times: dict[str, list[float]] = {"hashed": [], "pairwise": []}
        keys: dict[str, np.ndarray] = {}
        for _ in range(args.rounds):  # alternating: a slow spell of the host falls on both
            for check, max_masks in (("hashed", generate.MAX_MASKS), ("pairwise", 0)):
                seconds, keys[check] = timed(spec, max_masks)
                times[check].append(seconds)
        best = {check: min(seconds) for check, seconds in times.items()}
        rows.append({"config": name, "keys": spec.total, "key_length": spec.key_length, "key_vocab": spec.key_vocab,
                     "min_key_distance": spec.min_key_distance, "hashed_s": best["hashed"],
                     "pairwise_s": best["pairwise"], "ratio_hashed_over_pairwise": best["hashed"] / best["pairwise"],
                     "same_keys": bool(np.array_equal(keys["hashed"], keys["pairwise"]))})
        print(json.dumps(rows[-1]))
    print(json.dumps({"cpu": cpu_model_and_flags()[0], "rounds": args.rounds}))
    return rows


if __name__ == "__main__":
    main()
