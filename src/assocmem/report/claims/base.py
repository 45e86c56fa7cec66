"""The check row every claim function returns, and shared input checks.

Every row has: id, claim (as printed, plain text), computed (what and on which data), numbers (flat JSON
numbers; non-finite values become None), verdict (reproduced|refuted|corrected|not-testable), evidence, how
(derived|data|counterexample|corrected), and the fields the report renders: quote (the paper verbatim, from
report.quotes: list of {where, latex_source, pdf[, note]}), statement_tex (the printed claim as LaTeX),
ours_tex (what holds, as LaTeX) and limits (what would change a data-based verdict; None for derivations).
Verdict rules are fixed in the code (thresholds are arguments with documented defaults), never tuned to the data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from assocmem.errors import AssocmemError
from assocmem.report import quotes

VERDICTS = ("reproduced", "refuted", "corrected", "not-testable")
HOWS = ("derived", "data", "counterexample", "corrected")
PAPER = "Niu, Bai, Deng, Han (2024), arXiv:2405.08707; quoted from the supplied LaTeX source and PDF text"


def _clean(value: Any) -> float | int | None:
    if value is None:
        return None
    if isinstance(value, bool | np.bool_):
        return int(value)
    if isinstance(value, int | np.integer):
        return int(value)
    number = float(value)
    return number if np.isfinite(number) else None


def check_row(claim_id: str, claim: str, computed: str, numbers: Mapping[str, Any], verdict: str,
              evidence: str, how: str, *, ours_tex: str, limits: str | None = None) -> dict[str, Any]:
    """Assemble and validate one check row; quote and statement_tex come from report.quotes by claim id.

    A row whose verdict rests on measured data (how == 'data') must say what would change it (``limits``)."""
    if verdict not in VERDICTS:
        raise AssocmemError(f"claim {claim_id}: verdict {verdict!r} not in {VERDICTS}")
    if how not in HOWS:
        raise AssocmemError(f"claim {claim_id}: how {how!r} not in {HOWS}")
    if how == "data" and not (limits and limits.strip()):
        raise AssocmemError(f"claim {claim_id}: a data-based verdict needs a 'limits of this evidence' paragraph")
    return {"id": claim_id, "claim": claim, "computed": computed,
            "numbers": {str(k): _clean(v) for k, v in numbers.items()},
            "verdict": verdict, "evidence": evidence, "how": how, "quote": quotes.quotes_for(claim_id),
            "statement_tex": quotes.statement_tex(claim_id), "ours_tex": ours_tex, "limits": limits}


def require_columns(frame: pd.DataFrame, columns: Sequence[str], what: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise AssocmemError(f"{what}: missing column(s) {missing}; got {list(frame.columns)}")


