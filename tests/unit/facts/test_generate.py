"""The facts generator (issue 25): the same seed gives the same bytes, a smaller D is a prefix of a larger one (so
an unseen fact is what one more stored fact would have been), values are in range and independent of the
settings they should not depend on, and information.json records what was asked and reached."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import ROOT

from assocmem.errors import AssocmemError
from assocmem.facts.generate import SPLITS, FactsSpec, fact_lines, generate_facts, write_facts
from assocmem.facts.separation import hamming

SPEC = FactsSpec(count=200, unseen=40, key_length=5, value_length=3, key_vocab=6, value_vocab=5, min_key_distance=2,
                 seed=11)


def files(directory) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir())}


def test_the_same_seed_gives_the_same_bytes(tmp_path):
    first, second = write_facts(SPEC, tmp_path / "a"), write_facts(SPEC, tmp_path / "b")
    assert first == second
    assert files(tmp_path / "a") == files(tmp_path / "b")
    assert set(files(tmp_path / "a")) == {"train.tsv", "unseen.tsv", "information.json"}
    other = write_facts(FactsSpec(**{**SPEC.settings(), "seed": 12}), tmp_path / "c")
    assert other["sha256"] != first["sha256"]


def test_a_smaller_count_is_a_prefix_of_a_larger_one():
    small = generate_facts(FactsSpec(**{**SPEC.settings(), "count": 50, "unseen": 10}))
    large = generate_facts(SPEC)
    assert np.array_equal(small.keys, large.keys[:60]) and np.array_equal(small.values, large.values[:60])
    # the unseen facts of the small set are the next facts of the stream, stored facts of the large one
    assert np.array_equal(small.split("unseen", FactsSpec(**{**SPEC.settings(), "count": 50, "unseen": 10}))[0],
                          large.keys[50:60])


def test_keys_values_and_files_agree(tmp_path):
    record = write_facts(SPEC, tmp_path)
    facts = generate_facts(SPEC)
    assert facts.keys.shape == (240, 5) and facts.values.shape == (240, 3)
    assert facts.values.min() >= 0 and facts.values.max() < 5 and facts.keys.max() < 6
    for split in SPLITS:
        assert (tmp_path / f"{split}.tsv").read_text() == fact_lines(*facts.split(split, SPEC))
    first = (tmp_path / "train.tsv").read_text().splitlines()[0]
    key, value = first.split("\t")
    assert key.split() == [f"k{s}" for s in facts.keys[0]] and value.split() == [f"v{s}" for s in facts.values[0]]
    assert json.loads((tmp_path / "information.json").read_text()) == json.loads(json.dumps(record))
    keys = record["keys"]
    pairs = [hamming(a, b) for i, a in enumerate(facts.keys[:200].tolist()) for b in facts.keys[i + 1:200].tolist()]
    assert keys["min_distance_train"] == min(pairs) >= 2 and keys["min_distance_requested"] == 2
    across = min(hamming(a, b) for a in facts.keys[200:].tolist() for b in facts.keys[:200].tolist())
    assert keys["min_distance_unseen_to_train"] == across >= 2
    assert keys["space"] == 6 ** 5 and record["splits"] == {"train": 200, "unseen": 40}
    assert record["settings"] == SPEC.settings()


def test_values_do_not_depend_on_the_keys_settings():
    """Values come from their own stream: changing how keys are drawn leaves every value unchanged."""
    other = FactsSpec(**{**SPEC.settings(), "key_length": 7, "key_vocab": 3, "min_key_distance": 1})
    assert np.array_equal(generate_facts(SPEC).values, generate_facts(other).values)


def test_values_are_uniform():
    values = generate_facts(FactsSpec(**{**SPEC.settings(), "count": 20_000, "unseen": 1, "min_key_distance": 1,
                                         "key_length": 8})).values
    counts = np.bincount(values.ravel(), minlength=5)
    expected = values.size / 5
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 18.5  # 4 degrees of freedom: p < 0.001 above this


def test_spec_from_config_takes_its_own_seed_or_the_global_one():
    facts = {**SPEC.settings(), "seed": None}
    assert FactsSpec.from_config(facts, 5).seed == 5
    assert FactsSpec.from_config({**facts, "seed": 3}, 5).seed == 3
    with pytest.raises(AssocmemError, match="dataset.facts.seed"):
        FactsSpec.from_config(facts)


@pytest.mark.parametrize(("config", "drawn", "digest"), [
    ("memorisation_decisive.yaml", 34816, "6ba65a69de81bf67cc38525c17d1d969408e1eeb62c07ed75db771fb0995e1a5"),
    ("memorisation.yaml", 3072, "e46e4b5dd6b133937e85558a4c0893aa17068adc233cb83394c06f91b4c1ed87"),
])
def test_the_configs_keys_are_the_ones_drawn_before_the_hashed_check(config, drawn, digest):
    """The keys of the shipped memorisation configs, byte for byte as the pair-by-pair sampler drew them (its
    output at commit 3ee1ce1, sha256 of the int64 array): the faster check changed no fact of any record."""
    import hashlib

    from assocmem.config import load_config, load_schema
    from assocmem.facts.generate import sample_keys
    from assocmem.schemas import config_schema_path

    cfg = load_config(ROOT / "config" / config, load_schema(config_schema_path()))
    exp = next(iter(cfg["experiments"].values()))
    keys, candidates = sample_keys(FactsSpec.from_config(exp["dataset"]["facts"], seed=cfg["seed"]))
    assert candidates == drawn and hashlib.sha256(keys.tobytes()).hexdigest() == digest


def test_the_benchmark_times_both_checks_and_finds_the_same_keys():
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_facts import main

    (row,) = main(["--configs", "config/memorisation.yaml", "--rounds", "1"])
    assert row["same_keys"] and row["hashed_s"] > 0 and row["pairwise_s"] > 0 and row["keys"] == 1152
    (alone,) = main(["--hashed-only", "500", "6", "8", "3"])
    assert alone["keys"] == 500 and alone["drawn"] >= 500 and alone["peak_traced_mb"] > 0
