"""The exact information content of the facts (issue 25), against independent computations: exact enumeration of
the joint law of the values (tiny sizes, exact fractions), the entropy of the generator's output over many seeds,
and the count of distinct-key sequences."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from assocmem.facts.generate import FactsSpec, generate_facts
from assocmem.facts.information import information_content, key_sequence_bits


def entropy_bits(law: dict) -> float:
    return -math.fsum(float(p) * math.log2(p) for p in law.values() if p)


def conditional_entropy_bits(joint: dict, condition) -> float:
    """H(X | f(X)) in bits for an exact joint law of outcomes X (Fractions)."""
    marginal: dict = {}
    for outcome, p in joint.items():
        marginal[condition(outcome)] = marginal.get(condition(outcome), 0) + p
    return -math.fsum(float(p) * math.log2(p / marginal[condition(outcome)]) for outcome, p in joint.items() if p)


@st.composite
def tiny(draw):
    v = draw(st.integers(2, 4))
    m = draw(st.integers(1, 2))
    d = draw(st.integers(1, 3))
    if v ** (m * (d + 1)) > 4096:
        d = 1
    if v ** (m * (d + 1)) > 4096:
        m = 1
    return v, m, d


@settings(max_examples=40, deadline=None)
@given(tiny())
def test_information_content_equals_exact_enumeration(vmd):
    """Enumerate every value table of D stored facts and one unseen fact under the generator's law (each value
    token i.i.d. uniform over V, independent of the keys): H(stored values | keys), the conditional entropy of a
    stored fact's values given the table (0) and of the unseen fact's values given the table (M ln V)."""
    v, m, d = vmd
    tables = list(itertools.product(range(v), repeat=m * (d + 1)))
    joint = {table: Fraction(1, len(tables)) for table in tables}  # the keys are fixed: a condition, not a variable
    stored_law: dict = {}
    for table, p in joint.items():
        stored_law[table[:m * d]] = stored_law.get(table[:m * d], 0) + p
    info = information_content(d, 1, m, v, key_space=10 ** 6, min_key_distance=2)
    assert info["bits"] == pytest.approx(entropy_bits(stored_law), rel=1e-12)
    assert info["nats"] == pytest.approx(entropy_bits(stored_law) * math.log(2), rel=1e-12)
    assert info["bits_per_fact"] == pytest.approx(entropy_bits(stored_law) / d, rel=1e-12)
    unseen_given_table = conditional_entropy_bits(joint, lambda table: table[:m * d]) * math.log(2)
    stored_given_table = conditional_entropy_bits(stored_law, lambda table: table)
    assert info["nats_per_value_token"]["unseen"] == pytest.approx(unseen_given_table / m, rel=1e-12)
    assert info["nats_per_value_token"]["stored"] == stored_given_table == 0
    assert info["unseen_bits"] == pytest.approx(unseen_given_table / math.log(2), rel=1e-12)
    # <eos> follows the values deterministically: per scored token the unseen floor spreads M ln V over M + 1
    assert info["nats_per_scored_token"]["unseen"] == pytest.approx(unseen_given_table / (m + 1), rel=1e-12)


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 6), st.integers(1, 4))
def test_key_sequence_bits_count_the_sequences_of_distinct_keys(space, count):
    count = min(count, space)
    sequences = sum(1 for _ in itertools.permutations(range(space), count))
    assert key_sequence_bits(space, count, 1) == pytest.approx(math.log2(sequences), abs=1e-12)
    assert key_sequence_bits(space, count, 2) is None


def plug_in_bits(samples: list) -> float:
    """Miller-Madow corrected plug-in entropy (bits) of a sample."""
    counts, n = Counter(samples), len(samples)
    plug_in = -math.fsum(c / n * math.log2(c / n) for c in counts.values())
    return plug_in + (len(counts) - 1) / (2 * n * math.log(2))


def test_the_generator_has_the_entropy_the_record_states():
    """Over 3,000 seeds of a tiny set (4 binary keys of length 2, so 2 facts: 12 key sequences; 3 values each):
    the empirical entropy of the values and of the key sequence match the exact numbers."""
    spec = dict(count=2, unseen=1, key_length=2, value_length=1, key_vocab=2, value_vocab=3, min_key_distance=1)
    values, keys = [], []
    for seed in range(3000):
        facts = generate_facts(FactsSpec(**spec, seed=seed))
        values.append(tuple(facts.values[:2].ravel().tolist()))
        keys.append(tuple(map(tuple, facts.keys[:2].tolist())))
    info = information_content(2, 1, 1, 3, key_space=4, min_key_distance=1)
    assert plug_in_bits(values) == pytest.approx(info["bits"], abs=0.03)  # log2 9 = 3.17
    assert plug_in_bits(keys) == pytest.approx(info["key_sequence_bits"], abs=0.03)  # log2 12 = 3.58
    assert len(set(keys)) == 12 and len(set(values)) == 9
