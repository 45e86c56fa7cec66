"""Propositions 1-3 and the energies of Section 4, checked against independent computations."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.special import logsumexp

from assocmem.errors import AssocmemError
from assocmem.theory import energy as en

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def naive_energy(queries: np.ndarray, patterns: np.ndarray, beta: float = 1.0) -> np.ndarray:
    diffs = queries[:, None, :] - patterns[None, :, :]
    return -logsumexp(-beta * (diffs**2).sum(-1), axis=1)


def naive_mchn(queries: np.ndarray, patterns: np.ndarray, beta: float) -> np.ndarray:
    lse = logsumexp(beta * queries @ patterns.T, axis=1) / beta
    m_sq = (patterns**2).sum(1).max()
    return -lse + 0.5 * (queries**2).sum(1) + np.log(len(patterns)) / beta + 0.5 * m_sq


def lemma3_strictness(values: np.ndarray) -> dict[str, bool | float]:
    """Lemma 3 on one vector: min - log n <= -LSE(-x) < min. Which sides are strict / attained?

    The upper side is strict iff n >= 2 (for n = 1 it is an equality, so Lemma 2/3's strict '<' fails);
    the lower side is attained iff all entries are equal (e.g. d duplicated patterns).
    """
    values = np.asarray(values, dtype=np.float64).ravel()
    soft_min = -float(logsumexp(-values))
    low = float(values.min()) - np.log(values.size)
    return {"upper_strict": values.size >= 2, "lower_attained": bool(np.all(values == values[0])),
            "soft_min": soft_min, "lower_bound": low, "upper_bound": float(values.min())}


def prop2_deviation(terms: en.EnergyTerms) -> np.ndarray:
    """|E(x) - (2 E_MCHN^{beta=2}(x) - log d)|, to be compared with ``terms.norm_spread``."""
    return np.abs(terms.energy - (2.0 * terms.mchn_beta2 - np.log(terms.n_patterns)))


@st.composite
def pattern_sets(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    """Random and adversarial (patterns, queries): d = 1, duplicates, norms ~1e3, queries ~1e4 away."""
    n = draw(st.integers(1, 6))
    d = draw(st.integers(1, 7))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    scale = draw(st.sampled_from([1e-3, 1.0, 30.0, 1e3]))
    patterns = rng.normal(size=(d, n)) * scale
    if draw(st.booleans()):  # duplicate some patterns
        patterns = np.concatenate([patterns, patterns[: draw(st.integers(1, d))]], axis=0)
    kind = draw(st.sampled_from(["near", "on_pattern", "far"]))
    m = draw(st.integers(1, 5))
    if kind == "on_pattern":
        queries = patterns[rng.integers(0, len(patterns), size=m)]
    elif kind == "far":
        queries = rng.normal(size=(m, n)) * 1e4
    else:
        queries = patterns[rng.integers(0, len(patterns), size=m)] + rng.normal(size=(m, n))
    return patterns, queries


def test_energy_matches_naive_logsumexp() -> None:
    rng = np.random.default_rng(0)
    patterns, queries = rng.normal(size=(50, 8)) * 2, rng.normal(size=(20, 8)) * 2
    np.testing.assert_allclose(en.distance_energy(queries, patterns), naive_energy(queries, patterns),
                               rtol=1e-12, atol=1e-10)
    np.testing.assert_allclose(en.distance_energy(queries, patterns, beta=0.3),
                               naive_energy(queries, patterns, 0.3), rtol=1e-12, atol=1e-10)


def test_energy_and_mchn_against_mpmath_high_precision() -> None:
    patterns = np.array([[1.5, -2.0, 0.25], [0.0, 3.0, 1.0], [-1.0, -1.0, -1.0]])
    query = np.array([0.3, 0.7, -0.2])
    mpmath.mp.dps = 50
    sq = [sum((mpmath.mpf(q) - mpmath.mpf(p)) ** 2 for q, p in zip(query, row, strict=True))
          for row in patterns]
    energy_ref = -mpmath.log(sum(mpmath.e ** (-s) for s in sq))
    dots = [sum(mpmath.mpf(q) * mpmath.mpf(p) for q, p in zip(query, row, strict=True)) for row in patterns]
    beta = mpmath.mpf(2)
    m_sq = max(sum(mpmath.mpf(p) ** 2 for p in row) for row in patterns)
    mchn_ref = (-mpmath.log(sum(mpmath.e ** (beta * t) for t in dots)) / beta
                + sum(mpmath.mpf(q) ** 2 for q in query) / 2 + mpmath.log(3) / beta + m_sq / 2)
    terms = en.energy_terms(query[None, :], patterns)
    assert float(terms.energy[0]) == pytest.approx(float(energy_ref), rel=1e-13)
    assert float(terms.mchn_beta2[0]) == pytest.approx(float(mchn_ref), rel=1e-13)
    direct = float(en.mchn_energy(query[None, :], patterns, beta=2.0)[0])
    assert direct == pytest.approx(float(mchn_ref), rel=1e-13)


def test_chunked_pass_equals_single_block() -> None:
    rng = np.random.default_rng(1)
    patterns, queries = rng.normal(size=(40, 5)), rng.normal(size=(33, 5))
    whole = en.energy_terms(queries, patterns)
    chunked = en.energy_terms(queries, patterns, chunk_elements=7 * 40)
    for name in ("energy", "nearest_sq_dist", "mchn_beta2"):
        np.testing.assert_allclose(getattr(chunked, name), getattr(whole, name), rtol=1e-13, atol=1e-12)


@SETTINGS
@given(pattern_sets())
def test_prop1_holds_and_stays_finite(data: tuple[np.ndarray, np.ndarray]) -> None:
    patterns, queries = data
    terms = en.energy_terms(queries, patterns)
    assert np.all(np.isfinite(terms.energy)) and np.all(np.isfinite(terms.nearest_sq_dist))
    slack = en.prop1_slack(terms)
    tol = 1e-12 * (1.0 + terms.nearest_sq_dist)
    assert np.all(slack["lower"] >= -tol)
    assert np.all(slack["upper"] >= -tol)
    # g against an independent exact computation
    direct = ((queries[:, None, :] - patterns[None, :, :]) ** 2).sum(-1).min(axis=1)
    np.testing.assert_allclose(terms.nearest_sq_dist, direct, rtol=1e-12, atol=1e-9)


def test_prop1_single_pattern_is_equality_so_lemma3_strict_side_fails() -> None:
    rng = np.random.default_rng(2)
    pattern, queries = rng.normal(size=(1, 4)), rng.normal(size=(6, 4))
    terms = en.energy_terms(queries, pattern)
    np.testing.assert_array_equal(terms.energy, terms.nearest_sq_dist)  # E = g exactly when d = 1
    assert lemma3_strictness(np.array([3.0]))["upper_strict"] is False


def test_duplicated_patterns_attain_the_lower_bound() -> None:
    patterns = np.repeat(np.array([[0.5, -1.0, 2.0]]), 5, axis=0)
    query = np.array([[1.0, 1.0, 1.0]])
    terms = en.energy_terms(query, patterns)
    assert float(terms.energy[0]) == pytest.approx(float(terms.nearest_sq_dist[0]) - np.log(5), rel=1e-14)
    assert en.prop1_slack(terms)["gap_fraction"][0] == pytest.approx(1.0, rel=1e-12)
    assert lemma3_strictness(np.full(5, 2.0))["lower_attained"] is True


def test_far_separated_patterns_collapse_to_nearest_neighbour_in_float64() -> None:
    """Exactly, E < g for d >= 2; in float64 the second term exp(-1e6) underflows and E == g."""
    patterns = np.array([[0.0, 0.0], [1000.0, 0.0]])
    terms = en.energy_terms(patterns[:1], patterns)
    assert float(terms.energy[0]) == float(terms.nearest_sq_dist[0]) == 0.0


def test_unsquared_distance_breaks_the_upper_bound() -> None:
    example = en.prop1_unsquared_counterexample()
    assert example["energy"] == pytest.approx(4.0)
    assert example["violation"] == pytest.approx(2.0)


@SETTINGS
@given(pattern_sets())
def test_prop2_holds_as_stated(data: tuple[np.ndarray, np.ndarray]) -> None:
    patterns, queries = data
    terms = en.energy_terms(queries, patterns)
    assert np.all(np.isfinite(terms.mchn_beta2))
    np.testing.assert_allclose(terms.mchn_beta2, naive_mchn(queries, patterns, 2.0), rtol=1e-12,
                               atol=1e-12 * float(np.abs(queries).max() ** 2 + 1))
    deviation = prop2_deviation(terms)
    assert np.all(deviation <= terms.norm_spread + en.prop2_tolerance(queries, terms))


def test_prop2_is_tight_for_a_two_pattern_example() -> None:
    # Equal norms: spread 0, so E must equal 2E_MCHN - log d exactly.
    patterns = np.array([[3.0, 0.0], [0.0, 3.0]])
    queries = np.array([[0.1, -0.4], [5.0, 5.0]])
    terms = en.energy_terms(queries, patterns)
    np.testing.assert_allclose(prop2_deviation(terms), 0.0, atol=1e-12)


def test_printed_prop3_lower_bound_fails_on_minimal_counterexample() -> None:
    example = en.prop3_counterexample()
    assert example["g_minus_2mchn"] == pytest.approx(example["closed_form"], rel=1e-12)
    assert example["g_minus_2mchn"] < example["printed_lower"] - 0.6


def test_prop3_fails_for_a_single_pattern_only_if_d_at_least_two() -> None:
    pattern = np.array([[1.0, 0.0]])
    terms = en.energy_terms(pattern, pattern)
    low, _ = en.prop3_printed_bounds(terms)
    assert float(en.prop3_quantity(terms)[0]) >= low - 1e-12  # d = 1: g - 2E_MCHN = 0


SHARP_FORMS = {"prop2": (en.prop2_signed_gap, en.prop2_sharp_bounds),  # -spread <= E - (2E_MCHN - log d) <= 0
               "prop3": (en.prop3_quantity, en.prop3_sharp_bounds)}  # -(spread + log d) <= g - 2E_MCHN <= 0


@pytest.mark.parametrize("form", sorted(SHARP_FORMS))
@SETTINGS
@given(data=pattern_sets())
def test_sharp_one_sided_bounds_hold(form: str, data: tuple[np.ndarray, np.ndarray]) -> None:
    """The sharp forms of Props. 2 and 3 on random and adversarial sets."""
    patterns, queries = data
    quantity, bounds = SHARP_FORMS[form]
    terms = en.energy_terms(queries, patterns)
    value, (low, high) = quantity(terms), bounds(terms)
    tol = en.prop2_tolerance(queries, terms)
    assert np.all(value >= low - tol) and np.all(value <= high + tol)


def _mp_gap_and_prop3(patterns: np.ndarray, query: np.ndarray) -> tuple[float, float]:
    """E - (2E_MCHN - log d) and g - 2E_MCHN at 50 digits, straight from the definitions."""
    mpmath.mp.dps = 50
    rows = [[mpmath.mpf(float(v)) for v in p] for p in patterns]
    x = [mpmath.mpf(float(v)) for v in query]
    sq = [sum((xi - pi) ** 2 for xi, pi in zip(x, p, strict=True)) for p in rows]
    energy = -mpmath.log(mpmath.fsum(mpmath.exp(-a) for a in sq))
    norms = [sum(v**2 for v in p) for p in rows]
    dots = [sum(xi * pi for xi, pi in zip(x, p, strict=True)) for p in rows]
    mchn2 = (-mpmath.log(mpmath.fsum(mpmath.exp(2 * t) for t in dots)) / 2 + sum(v**2 for v in x) / 2
             + mpmath.log(len(rows)) / 2 + max(norms) / 2)
    gap = energy - (2 * mchn2 - mpmath.log(len(rows)))
    return float(gap), float(min(sq) - 2 * mchn2)


def test_sharp_bounds_are_attained_on_the_extreme_sets() -> None:
    sets = en.prop23_extreme_sets()
    closed = en.prop23_extreme_values()
    for patterns, queries in sets.values():
        terms = en.energy_terms(queries, patterns)
        for i, query in enumerate(queries):
            gap, value = _mp_gap_and_prop3(patterns, query)
            assert en.prop2_signed_gap(terms)[i] == pytest.approx(gap, abs=1e-9)
            assert en.prop3_quantity(terms)[i] == pytest.approx(value, abs=1e-9)
    equal = en.energy_terms(sets["equal_norms"][1], sets["equal_norms"][0])
    np.testing.assert_allclose(en.prop2_signed_gap(equal), 0.0, atol=1e-12)  # spread 0: both bounds attained
    centre = en.energy_terms(sets["sphere_centre"][1], sets["sphere_centre"][0])
    assert en.prop3_quantity(centre)[0] == pytest.approx(en.prop3_sharp_bounds(centre)[1], abs=1e-12)
    below = en.energy_terms(sets["beyond_min_norm"][1], sets["beyond_min_norm"][0])
    assert below.norm_spread == closed["spread"] == 4.0
    assert en.prop2_signed_gap(below)[0] == pytest.approx(-below.norm_spread, abs=1e-9)
    assert en.prop3_quantity(below)[0] == pytest.approx(en.prop3_sharp_bounds(below)[0], abs=1e-9)
    above = en.energy_terms(sets["beyond_max_norm"][1], sets["beyond_max_norm"][0])
    assert above.norm_spread == 4.0 and abs(en.prop2_signed_gap(above)[0]) <= 1e-9


@settings(max_examples=40, deadline=None)
@given(st.floats(0.5, 3.0), st.floats(0.0, 4.0))
def test_two_pattern_closed_forms(length: float, far: float) -> None:
    """The closed forms of prop23_extreme_values match a 50-digit evaluation for any separation and distance."""
    closed = en.prop23_extreme_values(length, far)
    patterns = np.array([[0.0, 0.0], [length, 0.0]])
    gap_min, value_min = _mp_gap_and_prop3(patterns, np.array([-far, 0.0]))
    gap_max, _ = _mp_gap_and_prop3(patterns, np.array([length + far, 0.0]))
    assert closed["beyond_min_norm.prop2_gap"] == pytest.approx(gap_min, abs=1e-12)
    assert closed["beyond_min_norm.prop3_value"] == pytest.approx(value_min, abs=1e-12)
    assert closed["beyond_max_norm.prop2_gap"] == pytest.approx(gap_max, abs=1e-12)
    assert -length**2 <= gap_min <= gap_max <= 0.0


def test_bad_inputs_raise_user_errors() -> None:
    with pytest.raises(AssocmemError, match="dimension"):
        en.distance_energy(np.zeros((2, 3)), np.zeros((2, 4)))
    with pytest.raises(AssocmemError, match="NaN"):
        en.energy_terms(np.array([[np.nan]]), np.zeros((1, 1)))
    with pytest.raises(AssocmemError, match="non-empty"):
        en.distance_energy(np.zeros((1, 2)), np.zeros((0, 2)))
    with pytest.raises(AssocmemError, match="beta"):
        en.mchn_energy(np.zeros((1, 2)), np.zeros((1, 2)), beta=0.0)
