"""The check row every claim function returns, and shared input checks.

Every row has: id, claim (as printed), computed (what and on which data), numbers (flat JSON numbers;
non-finite values become None), verdict (reproduced|refuted|corrected|not-testable), evidence, how
(derived|data|counterexample|corrected). Verdict rules are fixed in the code (thresholds are arguments with
documented defaults), never tuned to the data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from assocmem.io import AssocmemError

VERDICTS = ("reproduced", "refuted", "corrected", "not-testable")
HOWS = ("derived", "data", "counterexample", "corrected")
PAPER = "Niu et al. 2024, arXiv:2405.08707v2"


def _clean(value: Any) -> float | int | None:
    if isinstance(value, bool | np.bool_):
        return int(value)
    if isinstance(value, int | np.integer):
        return int(value)
    number = float(value)
    return number if np.isfinite(number) else None


def check_row(claim_id: str, claim: str, computed: str, numbers: Mapping[str, Any], verdict: str,
              evidence: str, how: str) -> dict[str, Any]:
    """Assemble and validate one check row."""
    if verdict not in VERDICTS:
        raise AssocmemError(f"claim {claim_id}: verdict {verdict!r} not in {VERDICTS}")
    if how not in HOWS:
        raise AssocmemError(f"claim {claim_id}: how {how!r} not in {HOWS}")
    return {"id": claim_id, "claim": claim, "computed": computed,
            "numbers": {str(k): _clean(v) for k, v in numbers.items()},
            "verdict": verdict, "evidence": evidence, "how": how}


def require_columns(frame: pd.DataFrame, columns: Sequence[str], what: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise AssocmemError(f"{what}: missing column(s) {missing}; got {list(frame.columns)}")


