"""Radius hypothesis of Sec. 5 (after eq. (13)) and Sec. 6.1: r* = sqrt(n / (2 pi e)) and the radii it stands for.

The paper's r* is the asymptotic solution of V_n(r) = O(1) (Stirling on the unit-ball volume), i.e. it
uses V_n(r), the UPPER bound of the ball integral, as if it were the integral. Related exact radii:

* ``radius_unit_volume(n)``: V_n(r) = 1 exactly.
* ``radius_unit_partition(n, d)``: d * I_n(r) = 1, i.e. Z_t = 1 with the correct integral (the minimiser
  of log Z + 1/Z in Proposition 4).
* ``radius_half_mass(n)``: I_n(r) = pi^{n/2} / 2, where the ball integral saturates (about sqrt(n/2)).

Two readings of n exist: n = d_emb (what the paper plugs in: 1024 -> 7.74) and n = T_max * d_emb (its own
definition in Section 3).
"""

from __future__ import annotations

import numpy as np
from scipy import optimize, special

from assocmem.theory.partition import log_ball_integral, log_gaussian_total_mass


def radius_star(n: int | float | np.ndarray) -> np.ndarray | float:
    """r*(n) = sqrt(n / (2 pi e))."""
    value = np.sqrt(np.asarray(n, dtype=np.float64) / (2.0 * np.pi * np.e))
    return float(value) if np.ndim(value) == 0 else value


def radius_unit_volume(n: int) -> float:
    """The r with V_n(r) = 1: r = (Gamma(n/2 + 1) / pi^{n/2})^{1/n}."""
    return float(np.exp((special.gammaln(n / 2.0 + 1.0) - log_gaussian_total_mass(n)) / n))


def radius_half_mass(n: int) -> float:
    """The r with P(n/2, r^2) = 1/2: the ball holds half of the Gaussian mass pi^{n/2}."""
    return float(np.sqrt(special.gammaincinv(n / 2.0, 0.5)))


def radius_unit_partition(n: int, n_patterns: int) -> float:
    """The r with n_patterns * I_n(r) = 1 (Z_t = 1). NaN if even r -> infinity gives Z_t < 1."""
    log_d = float(np.log(n_patterns))
    if log_d + float(log_gaussian_total_mass(n)) <= 0:
        return float("nan")

    def excess(r: float) -> float:
        return log_d + float(log_ball_integral(n, r))

    high = max(1.0, radius_half_mass(n))
    while excess(high) <= 0:
        high *= 2.0
    return float(optimize.brentq(excess, 1e-12, high, xtol=1e-13, rtol=1e-13))


def log_patterns_for_unit_partition(n: int, radius: float | None = None) -> float:
    """log d needed for Z_t = d I_n(r) = 1 with the CORRECT integral, at r = r*(n) unless given.

    For r = r*: I_n(r*) ~ 1.13 e^{-n/(2 pi e)} / sqrt(n pi), so log d ~ n/(2 pi e) + log(n pi)/2,
    i.e. n = Theta(log d).
    """
    r = radius_star(n) if radius is None else radius
    return float(-log_ball_integral(n, r))


def printed_log_patterns_for_unit_partition(n: int, radius: float | None = None) -> float:
    """The same with the paper's Z_t ~ d V_n(r): at r* this is ~ log(n pi)/2, i.e. n ~ d^2 / pi (Sec. 5)."""
    from assocmem.theory.partition import log_ball_volume

    r = radius_star(n) if radius is None else radius
    return float(-log_ball_volume(n, r))
