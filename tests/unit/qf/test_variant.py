"""Question-Formation data of another entropy (issue 38): the variant's floor is exact, and the shipped
config/entropy.yaml variants have the entropies they are meant to have."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
import yaml
from helpers import ROOT

from assocmem.qf.floor import entropy_floor, split_distribution
from assocmem.qf.generate import QFExample, generate_splits, lm_tokens, parse_line
from assocmem.qf.grammar import template_of
from assocmem.qf.variant import SPELLING, Variant, variant_floor, variant_rng

SIZES = {"n_train": 3000, "n_dev": 0, "n_test": 0, "n_gen": 0}


def _unspelled(token: str) -> str:
    return token.split(SPELLING)[0]


@pytest.fixture(scope="module")
def sample() -> list[QFExample]:
    lines, _ = generate_splits(seed=11, dedupe=False, **SIZES)
    return [parse_line(line, "test") for line in lines["train"]]


def test_a_variant_spells_inputs_uniformly_and_keeps_the_output_a_function_of_the_input(sample) -> None:
    variant = Variant(synonyms=3, output_copies=2)
    rng = variant_rng(5, "question.train")
    picks = Counter()
    for example in sample[:500]:
        tokens = variant.lm_tokens(example, rng)
        base = lm_tokens(example)
        k = len(example.words) - 1
        source, output = tokens[1:k + 3], tokens[k + 3:-1]
        assert [_unspelled(t) for t in source] == base[1:k + 3]  # one-to-one: strip the spellings
        single = len(output) // 2
        assert output == output[:single] * 2 and [_unspelled(t) for t in output[:single]] == list(example.target)
        assert Counter(output[:single]) - Counter(source) == Counter({"?": 1} if example.task == "quest" else {})
        picks.update(int(t.split(SPELLING)[1]) if SPELLING in t else 1 for t in source[:k])
    shares = np.array([picks[i] for i in (1, 2, 3)]) / sum(picks.values())
    assert np.all(np.abs(shares - 1 / 3) < 0.03), shares


def test_the_variant_floor_is_the_entropy_of_the_variant_sequences(sample) -> None:
    """Monte Carlo over the transformed sequences: -log q, with q the grammar's cell probability times the
    spellings' (1/s per input word), averaged, over the measured mean length, against the exact floor."""
    variant = Variant(synonyms=3, output_copies=3)
    cells, _ = split_distribution("train", dedupe=False, **SIZES)
    per_sentence = {(c.template.symbols, c.task): -math.log(c.weight / c.n_sentences) for c in cells if c.weight}
    rng = variant_rng(1, "question.train")
    values, lengths = [], []
    for example in sample:
        tokens = variant.lm_tokens(example, rng)
        spelled = len(example.words) - 1
        values.append(per_sentence[(template_of(example.words).symbols, example.task)] + spelled * math.log(3))
        lengths.append(len(tokens) - 1)
    exact = variant_floor(entropy_floor("train", dedupe=False, **SIZES), variant)
    stderr = np.std(values, ddof=1) / math.sqrt(len(values))
    assert abs(np.mean(values) - exact["seq_entropy_nats"]) < 4 * stderr
    assert np.mean(lengths) == pytest.approx(exact["expected_predicted_tokens"], rel=0.01)


def test_the_identity_variant_is_the_grammar() -> None:
    base = entropy_floor("train", dedupe=False, **SIZES)
    assert variant_floor(base, Variant()) == base and Variant.from_config(None).identity


def test_the_entropy_config_has_data_at_half_and_one_and_a_half_nats() -> None:
    """config/entropy.yaml: the grammar's own data (H near 1) beside variants with H near 0.5 and 1.5, each with the
    floor of its own training split."""
    experiments = yaml.safe_load((ROOT / "config" / "entropy.yaml").read_text())["experiments"]
    floors = {}
    for name, exp in experiments.items():
        sizes = {f"n_{split}": size for split, size in exp["dataset"]["sizes"].items()}
        base = entropy_floor("train", weights=exp["dataset"].get("grammar_weights", "fitted"), **sizes)
        floors[name] = variant_floor(base, Variant.from_config(exp["dataset"].get("variant")))["floor_nats_per_token"]
    assert sorted(round(value, 1) for value in floors.values()) == [0.5, 1.0, 1.4], floors


def test_the_store_and_the_evaluation_encode_the_variant_alike(tmp_path) -> None:
    """Tokenization records the variant in the store's tokenizer; evaluation encodes another file (a fresh sample)
    with it, so a model is scored on sequences of the data it was trained on."""
    from helpers import write_raw

    from assocmem.evaluation import encode_file
    from assocmem.qf.generate import read_qf
    from assocmem.qf.tokenize import tokenize_qf_dir
    from assocmem.tokenstore import read_store_meta

    raw = write_raw(tmp_path / "raw", repeat=2)
    tokenize_qf_dir(raw, tmp_path / "tokens", Variant(synonyms=2, output_copies=2), seed=3)
    tokenizer = read_store_meta(tmp_path / "tokens")["tokenizer"]
    assert tokenizer["variant"] == {"synonyms": 2, "output_copies": 2} and tokenizer["variant_seed"] == 3
    assert any(SPELLING in word for word in tokenizer["vocab"])
    rows, unknown = encode_file(raw / "question.train", tokenizer)
    examples = read_qf(raw / "question.train")
    assert unknown == 0 and [len(row) for row in rows] == [len(lm_tokens(e)) + len(e.target) for e in examples]
