"""Eq. (12), Lemma 5 and Z_t against closed forms (n = 1, 2), quadrature (n = 3) and Monte Carlo (n = 20)."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, special, stats

from assocmem.errors import AssocmemError
from assocmem.theory import partition as pa
from assocmem.theory.radius import radius_star


def quad_ball_3d(r: float) -> float:
    def integrand(z: float, y: float, x: float) -> float:
        return np.exp(-(x * x + y * y + z * z))

    value, _ = integrate.tplquad(
        integrand, -r, r, lambda x: -np.sqrt(r * r - x * x), lambda x: np.sqrt(r * r - x * x),
        lambda x, y: -np.sqrt(max(r * r - x * x - y * y, 0.0)),
        lambda x, y: np.sqrt(max(r * r - x * x - y * y, 0.0)), epsabs=1e-11, epsrel=1e-10)
    return value


def lemma5_log_bounds(n: int | np.ndarray, r: float | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lemma 5 as printed: (r^n / n) e^{-r} <= gamma(n, r) <= r^n / n, returned as logs (lower, upper)."""
    n_arr = np.asarray(n, dtype=np.float64)
    upper = n_arr * np.log(r) - np.log(n_arr)
    return upper - np.asarray(r, dtype=np.float64), upper


def log_partition_lse_bounds(n: int, r: float, n_patterns: int) -> tuple[float, float]:
    """If Z_t integrates exp(-E_t) (the LogSumExp energy) instead of exp(-g_t) over Omega, then
    exp(-g) <= exp(-E) <= d exp(-g) gives log Z_nn <= log Z_lse <= log Z_nn + log d."""
    low = pa.log_partition(n, r, n_patterns)
    return low, low + float(np.log(n_patterns))


def log_offcenter_ball_integral(n: int, r: float, offset: float | np.ndarray) -> np.ndarray:
    """log int_{||x - c|| <= r} exp(-||x - c'||^2) dx with ||c - c'|| = offset.

    exp(-||x - c'||^2) = pi^{n/2} * density of N(c', I/2), so the integral is
    pi^{n/2} Pr(noncentral chi^2_n(lambda = 2 offset^2) <= 2 r^2).
    """
    offset_arr = np.atleast_1d(np.asarray(offset, dtype=np.float64))
    central = np.full(offset_arr.shape, float(pa.log_ball_integral(n, r)))
    nonzero = offset_arr > 0
    if np.any(nonzero):
        tail = stats.ncx2.logcdf(2.0 * r * r, df=n, nc=2.0 * offset_arr[nonzero] ** 2)
        central[nonzero] = pa.log_gaussian_total_mass(n) + tail
    return central if np.ndim(offset) else central.reshape(())


def log_partition_lse_exact(patterns: np.ndarray, radius: float) -> float:
    """log int_Omega exp(-E(x)) dx for E the LogSumExp energy and Omega a union of DISJOINT equal balls.

    O(d^2) noncentral-chi^2 evaluations: meant for small d.
    """
    pts = np.asarray(patterns, dtype=np.float64)
    if pts.ndim != 2:
        raise AssocmemError(f"patterns: expected (d, n), got shape {pts.shape}")
    separation = np.sqrt(np.maximum(((pts[:, None, :] - pts[None, :, :]) ** 2).sum(-1), 0.0))
    off_diagonal = separation[~np.eye(len(pts), dtype=bool)]
    if off_diagonal.size and off_diagonal.min() < 2 * radius:
        raise AssocmemError(f"balls of radius {radius} overlap (min separation {off_diagonal.min():.4g})")
    return float(special.logsumexp(log_offcenter_ball_integral(pts.shape[1], radius, separation.ravel())))


@pytest.mark.parametrize(("a", "x"), [(512.0, 1.0), (1024.0, 1.0), (1024.0, 30.0), (384.0, 0.01),
                                      (512.0, 100.0), (0.5, 1e-300), (3.0, 2.0), (512.0, 600.0)])
def test_log_gammainc_lower_against_mpmath(a: float, x: float) -> None:
    mpmath.mp.dps = 40
    reference = mpmath.log(mpmath.gammainc(a, 0, x, regularized=True))
    assert float(pa.log_gammainc_lower(a, x)) == pytest.approx(float(reference), rel=1e-12, abs=1e-12)


def test_log_gammainc_lower_zero_and_errors() -> None:
    assert pa.log_gammainc_lower(2.0, 0.0) == -np.inf
    with pytest.raises(AssocmemError):
        pa.log_gammainc_lower(0.0, 1.0)
    with pytest.raises(AssocmemError):
        pa.log_gammainc_lower(1.0, -1.0)


@pytest.mark.parametrize("r", [0.01, 0.5, 1.0, 2.5, 6.0])
def test_n1_closed_form(r: float) -> None:
    expected = np.sqrt(np.pi) * special.erf(r)
    assert float(np.exp(pa.log_ball_integral(1, r))) == pytest.approx(expected, rel=1e-13)


@pytest.mark.parametrize("r", [0.01, 0.5, 1.0, 2.5, 6.0])
def test_n2_closed_form(r: float) -> None:
    assert float(np.exp(pa.log_ball_integral(2, r))) == pytest.approx(-np.pi * np.expm1(-r * r), rel=1e-13)


@pytest.mark.parametrize("r", [0.7, 1.5])
def test_n3_against_cartesian_quadrature(r: float) -> None:
    assert float(np.exp(pa.log_ball_integral(3, r))) == pytest.approx(quad_ball_3d(r), rel=1e-8)


def test_printed_eq12_disagrees_with_quadrature() -> None:
    truth = quad_ball_3d(1.5)
    printed = float(np.exp(pa.log_ball_integral_printed(3, 1.5)))
    assert abs(printed / truth - 1.0) > 0.05
    assert printed == pytest.approx(2 * np.pi**1.5 * special.gammainc(3, 1.5) * special.gamma(3)
                                    / special.gamma(1.5), rel=1e-12)


def test_n20_against_uniform_ball_monte_carlo() -> None:
    """Independent estimator: V_n(r) * mean of exp(-||U||^2) over U uniform in the ball."""
    n, r, samples = 20, 2.0, 400_000
    rng = np.random.default_rng(12345)
    directions = rng.normal(size=(samples, n))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    radii = r * rng.uniform(size=samples) ** (1.0 / n)
    values = np.exp(-radii**2)  # ||U|| = radii; the direction is irrelevant but sampled for honesty
    assert np.allclose(np.linalg.norm(directions * radii[:, None], axis=1), radii)
    volume = float(np.exp(pa.log_ball_volume(n, r)))
    estimate, stderr = volume * values.mean(), volume * values.std(ddof=1) / np.sqrt(samples)
    assert abs(estimate - float(np.exp(pa.log_ball_integral(n, r)))) < 4 * stderr


def test_printed_eq12_exceeds_total_mass_in_high_dimension() -> None:
    rows = {(row["n"], row["r"]): row for row in pa.eq12_table()}
    assert len(rows) == 3 * 30
    assert rows[(512, 30.0)]["printed_exceeds_total_mass"]
    assert rows[(1024, 30.0)]["log_printed"] - rows[(1024, 30.0)]["log_total_mass"] > 700
    for n in (512, 768, 1024):
        correct = [rows[(n, float(r))]["log_correct"] for r in range(1, 31)]
        assert np.all(np.diff(correct) >= 0)  # flat once the ball holds all the mass (float64)
        unsaturated = [rows[(n, float(r))]["correct_fraction_of_mass"] < 0.999 for r in range(1, 31)]
        assert np.all(np.diff(np.array(correct)[unsaturated]) > 0)
        assert max(correct) <= rows[(n, 1.0)]["log_total_mass"] + 1e-9


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 2000), st.floats(1e-3, 60.0))
def test_lemma5_holds_for_the_incomplete_gamma_it_states(n: int, r: float) -> None:
    low, high = lemma5_log_bounds(n, r)
    value = float(pa.log_lower_gamma(n, r))
    assert float(low) <= value + 1e-9 * (1 + abs(value))
    assert value <= float(high) + 1e-9 * (1 + abs(value))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 2000), st.floats(1e-3, 60.0))
def test_correct_ball_bounds_hold(n: int, r: float) -> None:
    low, high = pa.correct_ball_log_bounds(n, r)
    value = float(pa.log_ball_integral(n, r))
    assert float(low) <= value + 1e-9 * (1 + abs(value)) and value <= float(high) + 1e-9 * (1 + abs(value))


def test_printed_ball_lower_bound_fails_at_r_star_n1024() -> None:
    n = 1024
    r = radius_star(n)
    low, _ = pa.printed_ball_log_bounds(n, r)
    truth = float(pa.log_ball_integral(n, r))
    assert float(low) - truth > 45  # e^{-r} V_n(r) exceeds the true integral by a factor > e^45


def _first_radius(holds: np.ndarray, radii: np.ndarray) -> float | None:
    """The smallest radius of the grid at which ``holds`` is false (None: it holds on the whole grid)."""
    return float(radii[~holds][0]) if (~holds).any() else None


def test_where_the_printed_forms_of_eq12_and_its_lower_bound_part_from_the_truth() -> None:
    """The radii docs/derivations.md §5-6 gives: the printed integral exceeds the whole Gaussian mass pi^{n/2} from
    r = 9.97 (n = 512), 12.14 (768) and 13.97 (1024); the printed ball lower bound e^{-r} V_n(r) <= I_n(r) holds
    for every r at n = 1, 2, and fails from r = 2.73 (n = 3), 1.745 (n = 4), 1.225 (n = 10), just above 1 for n >=
    512, all against the exact integral; at r* = sqrt(n / (2 pi e)) it fails from n = 21 on."""
    radii = np.round(np.arange(0.01, 40.0, 0.005), 3)
    onsets = {n: _first_radius(pa.log_ball_integral_printed(n, radii) <= pa.log_gaussian_total_mass(n), radii)
              for n in (512, 768, 1024)}
    assert onsets == pytest.approx({512: 9.97, 768: 12.14, 1024: 13.97}, abs=0.006)
    onsets = {n: _first_radius(pa.printed_ball_log_bounds(n, radii)[0] <= pa.log_ball_integral(n, radii), radii)
              for n in (1, 2, 3, 4, 10, 512, 1024)}
    assert onsets[1] is None and onsets[2] is None
    assert {n: onsets[n] for n in (3, 4, 10)} == pytest.approx({3: 2.73, 4: 1.745, 10: 1.225}, abs=0.006)
    assert 1.0 < onsets[512] < 1.01 and 1.0 < onsets[1024] < 1.01
    fails_at_r_star = [n for n in range(1, 65) if float(pa.printed_ball_log_bounds(n, radius_star(n))[0])
                       > float(pa.log_ball_integral(n, radius_star(n)))]
    assert fails_at_r_star == list(range(21, 65))  # "at the paper's r* it fails from n = 21 on"


def test_log_partition_equal_and_unequal_radii() -> None:
    n = 16
    expected = np.log(500) + float(pa.log_ball_integral(n, 2.0))
    assert pa.log_partition(n, 2.0, n_patterns=500) == pytest.approx(expected)
    radii = np.array([1.0, 2.0, 3.0])
    manual = np.log(sum(np.exp(pa.log_ball_integral(n, r)) for r in radii))
    assert pa.log_partition(n, radii) == pytest.approx(float(manual), rel=1e-13)
    with pytest.raises(AssocmemError):
        pa.log_partition(n, radii, n_patterns=3)
    with pytest.raises(AssocmemError):
        pa.log_partition(n, -1.0, n_patterns=3)


def test_paper_scale_partition_is_finite() -> None:
    log_z = pa.log_partition(1024, radius_star(1024), n_patterns=80_000)
    low, high = pa.log_partition_printed_bounds(1024, radius_star(1024), 80_000)
    assert np.isfinite(log_z) and log_z < low  # printed lower bound of eq. (14) is violated
    assert log_z < high


def test_offcenter_integral_against_2d_quadrature() -> None:
    r, offset = 1.0, 1.7

    def integrand(y: float, x: float) -> float:
        return np.exp(-((x - offset) ** 2 + y * y))

    truth, _ = integrate.dblquad(integrand, -r, r, lambda x: -np.sqrt(r * r - x * x),
                                 lambda x: np.sqrt(r * r - x * x), epsabs=1e-13, epsrel=1e-11)
    assert float(np.exp(log_offcenter_ball_integral(2, r, offset))) == pytest.approx(truth, rel=1e-8)


def test_lse_partition_exact_against_monte_carlo_and_bounds() -> None:
    patterns = np.array([[0.0, 0.0], [2.5, 0.0], [0.0, 3.0]])
    r = 1.2
    log_exact = log_partition_lse_exact(patterns, r)
    rng = np.random.default_rng(7)
    samples = 200_000
    total = 0.0
    for centre in patterns:
        pts = rng.uniform(-r, r, size=(samples, 2))
        inside = (pts**2).sum(1) <= r * r
        x = pts[inside] + centre
        sq = ((x[:, None, :] - patterns[None]) ** 2).sum(-1)
        total += np.exp(-sq).sum(1).sum() * (4 * r * r) / samples
    assert np.exp(log_exact) == pytest.approx(total, rel=5e-3)
    low, high = log_partition_lse_bounds(2, r, 3)
    assert low <= log_exact <= high
    with pytest.raises(AssocmemError, match="overlap"):
        log_partition_lse_exact(patterns, 1.3)
