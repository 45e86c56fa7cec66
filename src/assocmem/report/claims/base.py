"""The check row every claim function returns, and shared input checks and words for its text.

The row is the registered claim's (:meth:`~.registry.Claim.check_row`). Every row has: id, claim (as printed, plain
text), computed (what and on which data), numbers (flat JSON numbers; non-finite values become None), verdict
(reproduced|refuted|corrected|not-testable), evidence, how (derived|data|counterexample|corrected), and the fields
the report renders: quote (the paper verbatim, from the claim's registry record: list of {where, latex_source, pdf[,
note]}), statement_tex (the printed claim as LaTeX), ours_tex (what holds, as LaTeX) and limits (what would change a
data-based verdict; None for derivations).
Verdict rules are fixed in the code (thresholds are arguments with documented defaults), never tuned to the data.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from assocmem.errors import AssocmemError
from assocmem.report.claims import registry


def check_row(claim_id: str, computed: str, numbers: Mapping[str, Any], verdict: str, evidence: str, how: str, *,
              ours_tex: str, limits: str | None = None) -> dict[str, Any]:
    """One check row of the registered claim ``claim_id`` (:meth:`~.registry.Claim.check_row`)."""
    return registry.get(claim_id).check_row(computed, numbers, verdict, evidence, how, ours_tex=ours_tex,
                                            limits=limits)


# ---------------------------------------------------------------- words for the receipts
# Evidence, computed and limits are the report's text: formulas go in $...$ (TeX, typeset by the report), a truth
# value reads yes/no and a list reads as words, never as Python's repr.


def yes_no(value: bool | np.bool_) -> str:
    return "yes" if value else "no"


def listing(items: Iterable[Any], empty: str = "none") -> str:
    """'a, b, c' (``empty`` when there is nothing)."""
    return ", ".join(str(item) for item in items) or empty


def tex_number(value: float, digits: int = 3) -> str:
    """A number for running text: plain (0.25, -4.69) where it reads so, else as TeX math ($-1.38\\times10^{-54}$)."""
    text = f"{value:.{digits}g}"
    if "e" not in text:
        return text
    mantissa, exponent = text.split("e")
    return f"${mantissa}\\times10^{{{int(exponent)}}}$"


def require_columns(frame: pd.DataFrame, columns: Sequence[str], what: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise AssocmemError(f"{what}: missing column(s) {missing}; got {list(frame.columns)}")


def usable_rows(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Rows whose run may carry a claim (column 'usable', default all) and labels of the excluded ones."""
    if "usable" not in frame.columns:
        return frame, []
    keep = frame["usable"].astype(bool).to_numpy()
    label = "run" if "run" in frame.columns else ("subset" if "subset" in frame.columns else "model")
    status = frame["status"] if "status" in frame.columns else pd.Series("not converged", index=frame.index)
    excluded = sorted({f"{name} ({state})" for name, state, usable in zip(frame[label], status, keep, strict=True)
                       if not usable})
    return frame[keep], excluded
