"""Oracles shared by the question-formation tests, computed independently of the code they check."""

from __future__ import annotations

from assocmem.qf.generate import QFExample


def n_predicted_tokens(example: QFExample) -> int:
    """Number of tokens the LM loss counts for this example (all but ``<sos>``)."""
    return len(example.source) + len(example.target) + 1
