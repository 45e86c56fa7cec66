"""Every check row a report test builds is held to the receipt rules (tests/helpers.py: ascii_math): the claims'
modules call check_row by name, so each module's reference is wrapped."""

from __future__ import annotations

import importlib

import pytest
from helpers import receipt_problems

# base: Untestable
CLAIM_MODULES = ("base", "energy", "partition", "literature", "loss", "radius", "scaling", "memorisation")


@pytest.fixture(autouse=True)
def receipts_are_typeset(monkeypatch):
    """Fails a test whose check rows show formulas, truth values or lists as plain ASCII."""
    problems: list[str] = []
    for name in CLAIM_MODULES:
        module = importlib.import_module(f"assocmem.report.claims.{name}")
        original = module.check_row

        def checked(*args, _original=original, **kwargs):
            row = _original(*args, **kwargs)
            problems.extend(receipt_problems(row))
            return row

        monkeypatch.setattr(module, "check_row", checked)
    yield
    assert not problems, "receipts with plain-ASCII math:\n" + "\n".join(problems)
