"""r* and the related exact radii."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import special

from assocmem.theory import radius as ra
from assocmem.theory.partition import log_ball_integral, log_ball_volume


def test_radius_star_paper_value() -> None:
    assert ra.radius_star(1024) == pytest.approx(7.7430632, rel=1e-7)
    np.testing.assert_allclose(ra.radius_star(np.array([512, 1024])), [5.4751, 7.7431], rtol=1e-4)


@pytest.mark.parametrize("n", [1, 2, 10, 768, 1024, 262_144])
def test_radius_unit_volume_solves_vn_equal_one(n: int) -> None:
    assert float(log_ball_volume(n, ra.radius_unit_volume(n))) == pytest.approx(0.0, abs=1e-9)


def test_radius_unit_volume_approaches_r_star() -> None:
    ratios = [ra.radius_unit_volume(n) / ra.radius_star(n) for n in (64, 1024, 262_144)]
    assert ratios[0] > ratios[1] > ratios[2] > 1.0
    assert ratios[2] == pytest.approx(1.0, abs=1e-4)


@pytest.mark.parametrize("n", [1, 3, 1024])
def test_radius_half_mass(n: int) -> None:
    r = ra.radius_half_mass(n)
    assert special.gammainc(n / 2, r * r) == pytest.approx(0.5, rel=1e-12)
    if n == 1024:
        assert r == pytest.approx(np.sqrt(n / 2), rel=1e-3)


@pytest.mark.parametrize(("n", "d"), [(1024, 80_000), (768, 10_000), (2, 3), (1, 1)])
def test_radius_unit_partition(n: int, d: int) -> None:
    r = ra.radius_unit_partition(n, d)
    assert np.log(d) + float(log_ball_integral(n, r)) == pytest.approx(0.0, abs=1e-9)


def test_radius_unit_partition_nan_when_impossible() -> None:
    assert np.isnan(ra.radius_unit_partition(1, 0.1))  # d * pi^{1/2} < 1 can never reach 1


def test_prop5_argument_gives_n_quadratic_in_d_only_with_the_volume() -> None:
    dims = np.array([512, 1024, 2048, 4096])
    printed = np.array([ra.printed_log_patterns_for_unit_partition(int(n)) for n in dims])
    np.testing.assert_allclose(printed, 0.5 * np.log(dims * np.pi), atol=0.01)  # d = sqrt(n pi): n ~ d^2/pi
    correct = np.array([ra.log_patterns_for_unit_partition(int(n)) for n in dims])
    # I_n(r*) ~ V_n(r*) e^{-r*^2} / (1 - 1/(pi e)): log d ~ n/(2 pi e) + log(n pi)/2 - c, so n = Theta(log d)
    series = -np.log1p(-1 / (np.pi * np.e))
    asymptotic = dims / (2 * np.pi * np.e) + 0.5 * np.log(dims * np.pi) - series
    np.testing.assert_allclose(correct, asymptotic, atol=0.01)
    assert ra.log_patterns_for_unit_partition(1024) == pytest.approx(63.87, abs=0.01)
