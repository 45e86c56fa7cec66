"""The Gaussian integral over an n-ball, the layer partition function Z_t (eq. 12), Lemma 5 and its bounds (eq. 13).

Correct form (derived in docs/derivations.md): with u = t^2,

    I_n(r) := int_{||y|| <= r} exp(-||y||^2) dy = A_{n-1} int_0^r t^{n-1} e^{-t^2} dt
            = pi^{n/2} gamma(n/2, r^2) / Gamma(n/2) = pi^{n/2} P(n/2, r^2) = pi^{n/2} Pr(chi^2_n <= 2 r^2),

where P is the regularised lower incomplete gamma function. The paper prints instead
2 pi^{n/2} gamma(n, r) / Gamma(n/2), i.e. it integrates t^{n-1} e^{-t} (not e^{-t^2}).
All functions return natural logarithms; nothing here underflows at n = 1024, r = 1.
"""

from __future__ import annotations

import numpy as np
from scipy import special

from assocmem.errors import AssocmemError

_LOG_PI = float(np.log(np.pi))
_TINY = 1e-280  # below this gammainc loses relative precision (subnormals); switch to the series
_SERIES_MAX_TERMS = 200_000


def _log_series_lower_gamma(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """log P(a, x) from gamma(a, x) = x^a e^{-x} sum_k x^k / (a (a+1) ... (a+k)), for 0 < x (any a > 0)."""
    term = 1.0 / a
    total = term.copy()
    for k in range(_SERIES_MAX_TERMS):
        term = term * x / (a + k + 1.0)
        total = total + term
        if np.all(term <= 1e-17 * total):
            break
    else:  # pragma: no cover - only reachable for x >> a, where the direct branch is used instead
        raise AssocmemError("log incomplete gamma series did not converge")
    return a * np.log(x) - x - special.gammaln(a) + np.log(total)


def log_gammainc_lower(a: np.ndarray | float, x: np.ndarray | float) -> np.ndarray:
    """log P(a, x), the log of the regularised lower incomplete gamma function, for a > 0 and x >= 0."""
    a_arr, x_arr = np.broadcast_arrays(np.asarray(a, dtype=np.float64), np.asarray(x, dtype=np.float64))
    if np.any(a_arr <= 0) or np.any(x_arr < 0) or not np.all(np.isfinite(a_arr)):
        raise AssocmemError("log_gammainc_lower needs a > 0 (finite) and x >= 0")
    out = np.full(a_arr.shape, -np.inf)
    p_lower = special.gammainc(a_arr, x_arr)
    upper_half = p_lower > 0.5
    out[upper_half] = np.log1p(-special.gammaincc(a_arr[upper_half], x_arr[upper_half]))
    direct = (~upper_half) & (p_lower > _TINY)
    out[direct] = np.log(p_lower[direct])
    series = (~upper_half) & (~direct) & (x_arr > 0)
    if np.any(series):
        out[series] = _log_series_lower_gamma(a_arr[series], x_arr[series])
    return out


def log_lower_gamma(a: np.ndarray | float, x: np.ndarray | float) -> np.ndarray:
    """log gamma(a, x) = log P(a, x) + log Gamma(a) (unregularised)."""
    return log_gammainc_lower(a, x) + special.gammaln(a)


def log_gaussian_total_mass(n: int | np.ndarray) -> np.ndarray:
    """log int_{R^n} exp(-||y||^2) dy = (n/2) log pi."""
    return 0.5 * np.asarray(n, dtype=np.float64) * _LOG_PI


def log_ball_integral(n: int | np.ndarray, r: float | np.ndarray) -> np.ndarray:
    """log I_n(r), the CORRECT eq. (12): (n/2) log pi + log P(n/2, r^2)."""
    n_arr = np.asarray(n, dtype=np.float64)
    r_arr = np.asarray(r, dtype=np.float64)
    return log_gaussian_total_mass(n_arr) + log_gammainc_lower(n_arr / 2.0, r_arr * r_arr)


def log_ball_integral_printed(n: int | np.ndarray, r: float | np.ndarray) -> np.ndarray:
    """log of eq. (12) AS PRINTED: log(2 pi^{n/2} gamma(n, r) / Gamma(n/2))."""
    n_arr = np.asarray(n, dtype=np.float64)
    return (np.log(2.0) + log_gaussian_total_mass(n_arr) + log_lower_gamma(n_arr, r)
            - special.gammaln(n_arr / 2.0))


def log_ball_volume(n: int | np.ndarray, r: float | np.ndarray) -> np.ndarray:
    """log V_n(r) = (n/2) log pi + n log r - log Gamma(n/2 + 1)."""
    n_arr = np.asarray(n, dtype=np.float64)
    return log_gaussian_total_mass(n_arr) + n_arr * np.log(r) - special.gammaln(n_arr / 2.0 + 1.0)


def printed_ball_log_bounds(n: int | np.ndarray, r: float | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The bounds the paper derives from Lemma 5: e^{-r} V_n(r) <= I_n(r) <= V_n(r) (logs)."""
    log_volume = log_ball_volume(n, r)
    return log_volume - np.asarray(r, dtype=np.float64), log_volume


def correct_ball_log_bounds(n: int | np.ndarray, r: float | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bounds that do hold for the true integral: e^{-r^2} <= exp(-||y||^2) <= 1 on the ball, so
    e^{-r^2} V_n(r) <= I_n(r) <= V_n(r) (logs)."""
    log_volume = log_ball_volume(n, r)
    r_arr = np.asarray(r, dtype=np.float64)
    return log_volume - r_arr * r_arr, log_volume


def log_partition(n: int, radii: float | np.ndarray, n_patterns: int | None = None) -> float:
    """log Z_t of eq. (12) with the correct integral: Z_t = sum_i I_n(r_i).

    Pass one radius plus ``n_patterns`` (all balls equal) or an array of per-pattern radii.
    """
    radii_arr = np.atleast_1d(np.asarray(radii, dtype=np.float64))
    if np.any(radii_arr <= 0):
        raise AssocmemError("radii must be positive")
    logs = log_ball_integral(n, radii_arr)
    if n_patterns is not None:
        if radii_arr.size != 1:
            raise AssocmemError("give either one radius with n_patterns or an array of radii, not both")
        return float(np.log(n_patterns) + logs[0])
    return float(special.logsumexp(logs))


def log_partition_printed_bounds(n: int, r: float, n_patterns: int) -> tuple[float, float]:
    """Eq. (13) as printed, for any r: d V_n(r) e^{-r} <= Z_t <= d V_n(r) (logs)."""
    low, high = printed_ball_log_bounds(n, r)
    return float(np.log(n_patterns) + low), float(np.log(n_patterns) + high)


def eq12_table(dims: tuple[int, ...] = (512, 768, 1024), radii: tuple[float, ...] = tuple(range(1, 31))
               ) -> list[dict[str, float]]:
    """Printed vs correct eq. (12) (natural logs) next to the total mass pi^{n/2}, for each (n, r)."""
    rows = []
    for n in dims:
        total = float(log_gaussian_total_mass(n))
        for r in radii:
            correct = float(log_ball_integral(n, r))
            printed = float(log_ball_integral_printed(n, r))
            rows.append({"n": n, "r": float(r), "log_correct": correct, "log_printed": printed,
                         "log_total_mass": total, "log_printed_over_correct": printed - correct,
                         "correct_fraction_of_mass": float(np.exp(correct - total)),
                         "printed_exceeds_total_mass": printed > total})
    return rows
