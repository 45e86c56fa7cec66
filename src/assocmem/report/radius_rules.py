"""The radius claim's decision rules (Sec. 5 / 6.1; the rule is stated in :mod:`assocmem.report.claims.radius`):
the paper's own tolerance, each outcome from an interval, and the verdict from the outcomes. The claim applies them
to measured distances, :mod:`assocmem.report.radius_power` to simulated ones."""

from __future__ import annotations

from assocmem.theory import radius as ra

PAPER_RATIO = 20.0 / (2.0 * ra.radius_star(1024))  # the paper's own "agreement": mean 20 vs 2r* = 15.49
AGREES, DISAGREES, UNDECIDED = "agrees", "disagrees", "undecided"


def band_outcome(low: float, high: float, band: tuple[float, float]) -> str:
    """Whether an interval lies inside the tolerance band, outside it, or straddles an edge."""
    if band[0] <= low and high <= band[1]:
        return AGREES
    if high < band[0] or low > band[1]:
        return DISAGREES
    return UNDECIDED


def growth_outcome(low: float, high: float) -> str:
    """The exponent of level ~ n^s against the paper's 1/2: agrees iff its interval holds 1/2 and excludes 0,
    disagrees iff it excludes 1/2, else undecided."""
    if not low <= 0.5 <= high:
        return DISAGREES
    return AGREES if low > 0 else UNDECIDED


def radius_verdict(outcomes: list[str]) -> str:
    if not outcomes:
        return "not-testable"
    if DISAGREES in outcomes:
        return "refuted"
    return "reproduced" if all(outcome == AGREES for outcome in outcomes) else "not-testable"
