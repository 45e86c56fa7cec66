"""Every registered claim's quotes occur verbatim in the supplied paper text (skips without ../shared)."""

from __future__ import annotations

import pytest
from helpers import SHARED

from assocmem.errors import AssocmemError
from assocmem.report import claims, quotes

PAPER_DIR = SHARED / "paper"
SOURCES = {"latex_source": "niu2024_latex_source.txt", "pdf": "niu2024_pdf_text.txt"}


@pytest.fixture(scope="module")
def paper_texts() -> dict[str, str]:
    missing = [name for name in SOURCES.values() if not (PAPER_DIR / name).exists()]
    if missing:
        pytest.skip(f"paper text not available: {PAPER_DIR} lacks {missing}")
    return {field: (PAPER_DIR / name).read_text(encoding="utf-8") for field, name in SOURCES.items()}


def fragments(text: str) -> list[str]:
    """The verbatim pieces of a quote (split at the elisions)."""
    return [piece for piece in text.split(quotes.ELLIPSIS.strip()) if piece.strip()]


def normalise_whitespace(text: str) -> str:
    """Collapse every run of whitespace (including non-breaking spaces) to one space."""
    return " ".join(text.split())


def occurs_in_order(quote: str, source: str) -> bool:
    """True iff every fragment of ``quote`` occurs in ``source`` after the previous one (whitespace-normalised)."""
    text = normalise_whitespace(source)
    position = 0
    for piece in fragments(quote):
        found = text.find(normalise_whitespace(piece), position)
        if found < 0:
            return False
        position = found + len(normalise_whitespace(piece))
    return True


ALL_QUOTES = [(claim.id, index, quote) for claim in claims.all_claims() for index, quote in enumerate(claim.quotes)]


@pytest.mark.parametrize(("claim_id", "index", "quote"), ALL_QUOTES,
                         ids=[f"{claim_id}-{index}" for claim_id, index, _ in ALL_QUOTES])
def test_quote_is_verbatim_in_both_texts(paper_texts: dict[str, str], claim_id: str, index: int,
                                         quote: quotes.Quote) -> None:
    for field, text in paper_texts.items():
        passage = getattr(quote, field)
        if passage is None:
            continue
        missing = [piece for piece in fragments(passage)
                   if normalise_whitespace(piece) not in normalise_whitespace(text)]
        assert not missing, f"{claim_id} quote {index} ({quote.where}), {field}: not in the text: {missing}"
        assert occurs_in_order(passage, text), f"{claim_id} quote {index}, {field}: fragments out of order"


def test_table2_models_are_printed(paper_texts: dict[str, str]) -> None:
    table = paper_texts["pdf"].split("Table 1:")[1].split("Table 2:")[0]
    rows = [line.split("\t")[0] for line in table.splitlines() if "\t" in line]
    assert tuple(row for row in rows if row != "Model") == quotes.PAPER_TABLE2_MODELS


def test_every_claim_has_quotes_and_a_statement() -> None:
    registered = claims.all_claims()
    assert len({claim.id for claim in registered}) == len(registered) >= 14
    for claim in registered:
        assert claim.quotes and all(q.where.startswith(("§", "App.", "Abstract")) for q in claim.quotes)
        assert all(set(q.as_dict()) >= {"where", "latex_source", "pdf"} for q in claim.quotes)
        for tex in (claim.statement_tex, claim.title_tex):
            assert tex.count("$") % 2 == 0  # balanced inline math for KaTeX
        assert claim.statement and claim.label
    with pytest.raises(AssocmemError, match="no claim 'no_such_claim'"):
        claims.get("no_such_claim")


def test_fragment_matching_is_ordered_and_whitespace_blind() -> None:
    source = "alpha  beta\n gamma\u00a0delta epsilon"
    assert occurs_in_order("alpha beta [...] delta epsilon", source)
    assert occurs_in_order("beta gamma delta", source)
    assert not occurs_in_order("delta [...] alpha", source)  # order matters
    assert not occurs_in_order("alpha gamma", source)  # an elision must be marked
    assert fragments("a [...] b") == ["a ", " b"]
