"""Well-separated keys (issue 25): the bounds that refuse impossible requests hold against brute force, the sampler
reaches the Gilbert-Varshamov size it promises, every pair of keys it returns is at least min_key_distance apart,
and a request it cannot meet fails naming the config key."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from assocmem.config import ConfigError, validate_config
from assocmem.errors import AssocmemError
from assocmem.facts import generate
from assocmem.facts.generate import FactsSpec, generate_facts, sample_keys
from assocmem.facts.separation import ball_volume, guaranteed_keys, hamming, max_keys, min_distance, request_problems
from assocmem.schemas import config_schema_path

TINY = [(q, n) for q in range(2, 6) for n in range(1, 5) if q ** n <= 27]


def all_keys(q: int, n: int) -> list[tuple[int, ...]]:
    return list(itertools.product(range(q), repeat=n))


def largest_code(q: int, n: int, d: int) -> int:
    """A_q(n, d) by exhaustive branch and bound over the q^n keys (tiny sizes only)."""
    keys = all_keys(q, n)
    best = 0

    def grow(size: int, candidates: list[tuple[int, ...]]) -> None:
        nonlocal best
        best = max(best, size)
        for i, key in enumerate(candidates):
            if size + len(candidates) - i <= best:
                return
            grow(size + 1, [other for other in candidates[i + 1:] if hamming(key, other) >= d])

    grow(0, keys)
    return best


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(TINY), st.integers(0, 5))
def test_ball_volume_counts_the_keys_within_the_radius(qn, radius):
    q, n = qn
    assert ball_volume(q, n, radius) == sum(hamming(key, (0,) * n) <= radius for key in all_keys(q, n))


@pytest.mark.parametrize(("q", "n"), TINY)
def test_the_bounds_bracket_the_largest_code(q, n):
    for d in range(1, n + 2):
        largest = largest_code(q, n, d)
        assert guaranteed_keys(q, n, d) <= largest <= max_keys(q, n, d), (q, n, d)


def spec(**kw) -> FactsSpec:
    base = dict(count=10, unseen=5, key_length=4, value_length=2, key_vocab=4, value_vocab=3, min_key_distance=2,
                seed=0)
    return FactsSpec(**{**base, **kw})


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(TINY + [(4, 4), (3, 5), (2, 7)]), st.integers(1, 4), st.integers(0, 2 ** 32 - 1),
       st.data())
def test_every_pair_of_keys_is_at_least_the_minimum_distance_apart(qn, d, seed, data):
    """Asking for up to the Gilbert-Varshamov size never fails, whatever the seed; every pair is far enough."""
    q, n = qn
    d = min(d, n)
    total = data.draw(st.integers(2, max(2, min(guaranteed_keys(q, n, d), 60))))
    if total > guaranteed_keys(q, n, d):
        return
    keys, _ = sample_keys(spec(count=total - 1, unseen=1, key_length=n, key_vocab=q, min_key_distance=d, seed=seed))
    assert keys.shape == (total, n) and keys.min() >= 0 and keys.max() < q
    pairs = [hamming(a, b) for a, b in itertools.combinations(keys.tolist(), 2)]
    assert min(pairs) >= d
    assert min_distance(keys) == min(pairs)


@settings(max_examples=80, deadline=None)
@given(st.one_of(st.integers(2, 16), st.integers(200, 70_000)), st.integers(1, 7), st.integers(0, 8),
       st.integers(0, 2 ** 32 - 1), st.integers(1, 4), st.integers(1, 64))
def test_the_shared_parts_keep_exactly_the_rows_the_pairwise_distances_keep(q, length, d, seed, batches, rows):
    """The hashed check (a candidate is near a kept key iff they agree outside some d - 1 positions) keeps the same
    rows, in the same order, as comparing every pair, batch after batch, with the same keys kept before each
    (vocabularies whose symbols are held in 8, 16 and 32 bits)."""
    rng = np.random.default_rng(seed)
    hashed, pairwise = generate._SharedParts(length, d, q), generate._Pairwise(d)
    kept = np.empty((0, length), dtype=np.int64)
    for _ in range(batches):
        batch = rng.integers(0, q, size=(rows, length), dtype=np.int64)
        taken = list(hashed.kept_rows(batch, kept))
        assert taken == list(pairwise.kept_rows(batch, kept))
        kept = np.concatenate([kept, batch[taken]])
    if len(kept) > 1:
        assert min_distance(kept) >= max(d, 1)


def test_keys_with_too_many_sets_of_positions_are_compared_pair_by_pair(monkeypatch):
    """Where C(length, d - 1) passes MAX_MASKS the sampler compares pairs, and draws the same keys either way."""
    assert isinstance(generate._near_check(32, 8, 16), generate._Pairwise)
    assert isinstance(generate._near_check(5, 2, 16), generate._SharedParts)
    wanted = spec(count=200, unseen=10, key_length=6, key_vocab=5, min_key_distance=3, seed=4)
    hashed = sample_keys(wanted)
    monkeypatch.setattr(generate, "MAX_MASKS", 0)
    assert isinstance(generate._near_check(6, 3, 5), generate._Pairwise)
    pairwise = sample_keys(wanted)
    assert np.array_equal(hashed[0], pairwise[0]) and hashed[1] == pairwise[1]


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 40), st.integers(1, 30), st.integers(1, 7), st.integers(2, 6), st.integers(0, 2 ** 16),
       st.integers(0, 8))
def test_min_distance_matches_brute_force(n_keys, n_others, length, q, seed, floor):
    """The pigeonhole search is exact whatever its starting point (``floor``)."""
    rng = np.random.default_rng(seed)
    keys, others = rng.integers(0, q, size=(n_keys, length)), rng.integers(0, q, size=(n_others, length))
    within = min(hamming(a, b) for a, b in itertools.combinations(keys.tolist(), 2))
    across = min(hamming(a, b) for a in keys.tolist() for b in others.tolist())
    assert min_distance(keys, floor=floor) == within and min_distance(keys, others, floor=floor) == across
    assert min_distance(keys[:1]) is None and min_distance(keys, others[:0]) is None


def facts_config(**facts) -> dict:
    return {"experiments": {"mem": {"dataset": {"name": "facts", "facts": facts}}}}


def test_an_impossible_request_is_refused_at_validation_naming_the_key():
    with pytest.raises(ConfigError, match=r"experiments\.mem\.dataset\.facts\.min_key_distance: 120 keys are "
                                          r"needed .* at most 16 .*impossible"):
        validate_config(facts_config(count=100, unseen=20, key_length=3, key_vocab=4, min_key_distance=2),
                        schema())
    with pytest.raises(ConfigError, match=r"facts\.min_key_distance: 17 keys .* at most 16 distinct keys exist"):
        validate_config(facts_config(count=16, unseen=1, key_length=2, key_vocab=4), schema())
    assert request_problems({"count": 15, "unseen": 1, "key_length": 2, "key_vocab": 4, "min_key_distance": 1}) == []
    with pytest.raises(AssocmemError, match=r"dataset\.facts\.min_key_distance: .*impossible"):
        generate_facts(spec(count=3, unseen=1, key_length=3, key_vocab=2, min_key_distance=3))


def schema() -> dict:
    import yaml

    return yaml.safe_load(config_schema_path().read_text())


def test_a_request_the_sampler_cannot_reach_fails_naming_the_key(monkeypatch):
    """Binary keys of length 3 at distance >= 2: four exist (an even-weight code), the sampler is only sure of two;
    it jams whenever it keeps the complement of its first key, and says so instead of drawing forever."""
    monkeypatch.setattr(generate, "PATIENCE", 8)
    outcomes = {}
    for seed in range(12):
        try:
            sample_keys(spec(count=3, unseen=1, key_length=3, key_vocab=2, min_key_distance=2, seed=seed))
            outcomes[seed] = "reached"
        except AssocmemError as err:
            assert "dataset.facts.min_key_distance: kept" in str(err) and "too hard to reach" in str(err)
            assert "it always reaches 2; at most 4 can exist" in str(err)
            outcomes[seed] = "jammed"
    assert set(outcomes.values()) == {"reached", "jammed"}
