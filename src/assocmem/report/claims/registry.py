"""The claim registry: one :class:`Claim` record per claim of the paper, declared beside the function that
checks it (one module of this package per claim family).

A record holds everything the report needs to know about a claim besides its check: its label and one-line
title (summary table, contents), the claim as printed (plain text and LaTeX), the paper's verbatim words
(:class:`assocmem.report.quotes.Quote`), its position in the report, the figures drawn for its section, the
printing errors that leave its verdict standing (:class:`Erratum`), and what its row says when this run has no
inputs for it. ``evaluate`` turns the loaded artifacts
(:class:`assocmem.report.evidence.Evidence`) into the claim's row, or into an :class:`Untestable` when they
hold nothing the claim can rest on.

Every module of this package is imported by :func:`all_claims`, so adding a claim is adding one module that
calls :func:`register` (and its test); nothing else in the report is keyed by claim id.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from assocmem.errors import AssocmemError
from assocmem.report.quotes import Quote

if TYPE_CHECKING:
    from assocmem.report.evidence import Evidence

VERDICTS = ("reproduced", "refuted", "corrected", "not-testable")
HOWS = ("derived", "data", "counterexample", "corrected")
FigureMaker = Callable[[Path], tuple[Path, str]]  # figure directory -> (PNG path, caption)
NOT_MEASURED_TEX = r"Not measured in this run."


@dataclass(frozen=True)
class Untestable:
    """What a claim's row says when this run's artifacts hold nothing the claim can rest on."""

    computed: str  # what was (not) computed, and why
    evidence: str  # the reason, and which run would test the claim
    limits: str  # what a run would need
    numbers: Mapping[str, Any] = field(default_factory=dict)
    ours_tex: str = NOT_MEASURED_TEX


@dataclass(frozen=True)
class Erratum:
    """A printing error that does not change the claim's verdict (a typo in a proof): listed in the errata."""

    where: str
    printed: str  # TeX allowed
    meant: str  # TeX allowed


@dataclass(frozen=True)
class Claim:
    id: str
    label: str  # short name: "Prop. 1", "Eq. (8)"
    title_tex: str  # one-line statement for the summary table (TeX allowed)
    statement: str  # the claim as printed, plain text (a row's "claim")
    statement_tex: str  # the claim as printed, LaTeX
    quotes: tuple[Quote, ...]  # the paper verbatim
    order: int  # position in the report, ascending
    evaluate: Callable[[Evidence], dict[str, Any] | Untestable]
    untestable: Untestable | None = None  # the default answer when evaluate finds no inputs
    figures: tuple[FigureMaker, ...] = ()  # drawn for the claim's section (figures a row brings are in the row)
    brings_figures: bool = False  # its row brings figures of the runs: the report evaluates it first, so they
    # render while the report draws the rest
    errata: tuple[Erratum, ...] = ()  # typos that leave the verdict standing (a refuted or corrected claim's own
    # statement is in the errata through its row)

    def row(self, evidence: Evidence) -> dict[str, Any]:
        """The claim's row on this run's artifacts: its check's, or a not-testable one."""
        result = self.evaluate(evidence)
        if isinstance(result, Untestable):
            return self.check_row(result.computed, result.numbers, "not-testable", result.evidence, "data",
                                  ours_tex=result.ours_tex, limits=result.limits)
        return result

    def check_row(self, computed: str, numbers: Mapping[str, Any], verdict: str, evidence: str, how: str, *,
                  ours_tex: str, limits: str | None = None) -> dict[str, Any]:
        """Assemble and validate one check row of this claim (the claim as printed, its quote and statement_tex
        from this record). A row whose verdict rests on measured data (how == 'data') must say what would change
        it (``limits``)."""
        if verdict not in VERDICTS:
            raise AssocmemError(f"claim {self.id}: verdict {verdict!r} not in {VERDICTS}")
        if how not in HOWS:
            raise AssocmemError(f"claim {self.id}: how {how!r} not in {HOWS}")
        if how == "data" and not (limits and limits.strip()):
            raise AssocmemError(f"claim {self.id}: a data-based verdict needs a 'limits of this evidence' paragraph")
        return {"id": self.id, "claim": self.statement, "computed": computed,
                "numbers": {str(k): _json_number(v) for k, v in numbers.items()},
                "verdict": verdict, "evidence": evidence, "how": how,
                "quote": [quote.as_dict() for quote in self.quotes], "statement_tex": self.statement_tex,
                "ours_tex": ours_tex, "limits": limits}


def _json_number(value: Any) -> float | int | None:
    """A row's number as JSON holds it: truth values as 0/1, non-finite values as None."""
    if value is None:
        return None
    if isinstance(value, bool | np.bool_):
        return int(value)
    if isinstance(value, int | np.integer):
        return int(value)
    number = float(value)
    return number if np.isfinite(number) else None


_REGISTRY: dict[str, Claim] = {}


def register(claim: Claim) -> Claim:
    """Add ``claim`` to the registry (once per id); returns it, so a module can keep it as a constant."""
    known = _REGISTRY.get(claim.id)
    if known is not None and known is not claim and known.evaluate.__module__ != claim.evaluate.__module__:
        raise AssocmemError(f"claim id {claim.id!r} is registered twice ({known.evaluate.__module__} and "
                            f"{claim.evaluate.__module__})")
    if not claim.quotes:
        raise AssocmemError(f"claim {claim.id!r}: give the paper's words (at least one Quote)")
    _REGISTRY[claim.id] = claim
    return claim


def _import_claim_modules() -> None:
    package = importlib.import_module(__package__)
    for module in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{__package__}.{module.name}")


def all_claims() -> list[Claim]:
    """Every registered claim in report order (imports every module of this package first)."""
    _import_claim_modules()
    return sorted(_REGISTRY.values(), key=lambda claim: (claim.order, claim.id))


def get(claim_id: str) -> Claim:
    if claim_id not in _REGISTRY:
        _import_claim_modules()
    if claim_id not in _REGISTRY:
        raise AssocmemError(f"no claim {claim_id!r} is registered: declare it with "
                            "assocmem.report.claims.registry.register in a module of assocmem.report.claims")
    return _REGISTRY[claim_id]


def find(claim_id: str) -> Claim | None:
    """The registered claim, or None (for rows read back from an older checks.json)."""
    try:
        return get(claim_id)
    except AssocmemError:
        return None
