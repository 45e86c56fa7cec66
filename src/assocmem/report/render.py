"""The report's sections and their GitHub-flavoured Markdown, and checks.json.

Text everywhere is a small Markdown subset: `code`, **bold**, [label](#anchor) links and TeX math in
``$...$`` (inline) or ``$$...$$`` (display). Markdown output passes it through (GitHub typesets the math);
:mod:`assocmem.report.html_page` renders the same sections as one self-contained HTML page.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from assocmem.report import claims
from assocmem.report.columns import human_header
from assocmem.report.header import RunHeader

CLAIMS_GROUP = "Claims"
OPEN_TABLE_ROWS = 12  # numbers tables up to this many rows start open in the HTML page
CE_UNIT = "nats/token"


@dataclass
class Section:
    """One report section. ``tables`` are Markdown tables; ``details`` are long tables the HTML page shows
    collapsed; ``sources`` are the paper's verbatim text ({"where", "latex_source", "pdf"})."""

    title: str
    paragraphs: list[str] = field(default_factory=list)
    figures: list[tuple[Path, str]] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)
    anchor: str = ""
    toc_label: str = ""
    group: str = ""
    verdict: str | None = None
    details: list[str] = field(default_factory=list)
    sources: list[dict[str, Any]] = field(default_factory=list)

    @property
    def id(self) -> str:
        return self.anchor or slug(self.title)

    @property
    def label(self) -> str:
        return self.toc_label or self.title


def slug(text: str) -> str:
    """A stable HTML id from a title: lower case, letters and digits joined by '-'."""
    return re.sub(r"[^a-z0-9]+", "-", strip_markup(text).lower()).strip("-") or "section"


def claim_anchor(claim_id: str) -> str:
    return f"claim-{slug(claim_id)}"


# ---------------------------------------------------------------------------------------------- tables


def format_number(value: Any) -> str:
    if value is None:  # check rows store non-finite numbers as null
        return "n/a"
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 10_000 else str(value)
    if isinstance(value, float):
        if value != value:  # NaN
            return "nan"
        return f"{value:.4g}"
    return str(value)


def markdown_table(header: list[str], rows: list[list[Any]]) -> str:
    """A GitHub-flavoured Markdown table; snake_case headers are shown in words (:func:`columns.human_header`)."""
    def cell(value: Any) -> str:
        return format_number(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(human_header(h)) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def quantity_header(quantity: str, units: dict[str, str] | None = None) -> str:
    """Column header with its unit: an explicit ``units`` entry, else nats/token for cross-entropies (every CE in
    this package is in nats per predicted token); other quantities are shown without a unit."""
    unit = (units or {}).get(quantity)
    if unit is None and (quantity.endswith("_ce") or quantity == "floor" or quantity.endswith("_minus_floor")):
        unit = CE_UNIT
    return f"{human_header(quantity)} ({unit})" if unit else human_header(quantity)


# ---------------------------------------------------------------------------------------------- claims

def claim_label(check: dict[str, Any]) -> str:
    claim = claims.find(check["id"])
    return claim.label if claim else check["id"]


def claim_title(check: dict[str, Any]) -> str:
    claim = claims.find(check["id"])
    label, short = (claim.label, claim.title_tex) if claim else (check["id"], first_sentence(check.get("claim", ""),
                                                                                               80))
    return f"{label}: {short}" if short else label


_SENTENCE_END = re.compile(r"(?<!App)(?<!Prop)(?<!Fig)(?<!Sec)(?<!Eq)(?<!eq)(?<!al)(?<!e\.g)(?<!i\.e)\. (?=[A-Z(])")


def first_sentence(text: str, limit: int = 230) -> str:
    head = _SENTENCE_END.split(text, maxsplit=1)[0].strip()
    return head if len(head) <= limit else head[:limit].rsplit(" ", 1)[0] + " …"


def summary_table(checks: list[dict[str, Any]]) -> str:
    rows = [[f"[{claim_label(c)}](#{claim_anchor(c['id'])})", claim_title(c).partition(": ")[2], c["verdict"],
             c.get("how", ""), first_sentence(c.get("evidence", ""))] for c in checks]
    return markdown_table(["claim", "statement", "verdict", "how we know", "receipt (see the claim's section)"],
                          rows)


def _where(quotes: list[dict[str, Any]]) -> str:
    return "; ".join(q["where"] for q in quotes if q.get("where"))


def claim_section(check: dict[str, Any], tables: list[str], figures: list[tuple[Path, str]]) -> Section:
    """The paper's statement first (typeset), then ours, then the evidence; long tables go to ``details``.

    Uses the rows' ``statement_tex``/``ours_tex``/``quote``/``limits`` when present and falls back to the
    plain-text ``claim``/``computed`` otherwise."""
    quotes = check.get("quote") or []
    where = _where(quotes)
    paper = check.get("statement_tex") or check["claim"]
    paragraphs = [f"**The paper{f' ({where})' if where else ''}.** {paper}"]
    if check.get("ours_tex"):
        paragraphs.append(f"**What holds.** {check['ours_tex']}")
    paragraphs += [f"**Evidence.** {check['evidence']}", f"**Computed.** {check['computed']}",
                   f"**How we know:** {check.get('how', 'n/a')}."]
    if check.get("limits"):
        paragraphs.append(f"**Limits of this evidence.** {check['limits']}")
    rows = sum(max(0, len(t.splitlines()) - 2) for t in tables)
    open_tables = tables if rows <= OPEN_TABLE_ROWS else []
    own = [markdown_table(table["header"], table["rows"]) for table in check.get("tables", [])]
    paragraphs += [f"**{table['title']}:** in the table below." for table in check.get("tables", [])]
    return Section(claim_title(check), paragraphs=paragraphs, figures=figures, tables=[*own, *open_tables],
                   anchor=claim_anchor(check["id"]), toc_label=claim_label(check), group=CLAIMS_GROUP,
                   verdict=check["verdict"], details=[t for t in tables if t not in open_tables], sources=quotes)


def errata_section(checks: list[dict[str, Any]]) -> Section | None:
    """Every refuted or corrected statement, and the printing errors that leave a verdict standing."""
    rows = []
    for check in checks:
        link = f"[{claim_label(check)}](#{claim_anchor(check['id'])})"
        if check["verdict"] in ("refuted", "corrected"):
            rows.append([link, check.get("statement_tex") or check["claim"],
                         check.get("ours_tex") or check["evidence"]])
        claim = claims.find(check["id"])
        errata = claim.errata if claim else ()
        rows += [[f"{link}, {erratum.where}", erratum.printed, erratum.meant] for erratum in errata]
    if not rows:
        return None
    section = Section("Errata: statements as printed and what holds instead", anchor="errata", toc_label="Errata")
    section.tables.append(markdown_table(["claim", "as printed", "what holds"], rows))
    return section


INTRO = (
    "Each claim of Niu, Bai, Deng & Han (2024), arXiv:2405.08707, quoted verbatim from the supplied text of the "
    "paper (its LaTeX source and its PDF text, with section and equation numbers of that text), is checked "
    "against an independent computation on this run's artifacts and on synthetic "
    "cases. Verdicts: **reproduced** = holds as printed; **refuted** = false, with a counterexample or the "
    "measured numbers; **corrected** = false as printed but a corrected statement holds, and the code checks "
    "that one on the same data; **not-testable** = this run cannot decide it, with the reason. 'How we know' "
    "says whether the verdict rests on a derivation, on data, on a counterexample or on a correction. The "
    "derivations are in docs/derivations.md of the repository."
)
SUMMARY_TITLE = "Summary: claims and verdicts"
SUMMARY_ANCHOR = "summary"

# ---------------------------------------------------------------------------------------------- Markdown


def strip_markup(text: str) -> str:
    """Plain text for ids, alt texts and tooltips: no backticks, bold marks, math dollars or link syntax."""
    text = re.sub(r"\[([^\]]+)\]\([^)]*\)", r"\1", text)
    return text.replace("`", "").replace("**", "").replace("$", "")


def _markdown_sources(sources: list[dict[str, Any]]) -> list[str]:
    parts = []
    for quote in sources:
        parts.append(f"Verbatim, {quote.get('where') or 'the paper'} (LaTeX source):\n")
        parts.append("```latex\n" + quote.get("latex_source", "").strip() + "\n```\n")
        if quote.get("pdf"):
            parts.append("PDF text, where it differs:\n\n> " + quote["pdf"].strip().replace("\n", "\n> ") + "\n")
    return parts


def _markdown_section(section: Section, out_dir: Path) -> list[str]:
    badge = f" · {section.verdict}" if section.verdict else ""
    parts = [f'<a id="{section.id}"></a>', "", f"## {section.title}{badge}", ""]
    parts += [p + "\n" for p in section.paragraphs]
    parts += [t + "\n" for t in section.tables]
    for path, caption in section.figures:
        # The caption is not wrapped in *...*: math such as $r^*$ would end the emphasis early.
        alt = strip_markup(caption).replace("[", "(").replace("]", ")")
        parts += [f"![{alt}]({path.relative_to(out_dir).as_posix()})", "", f"**Figure.** {caption}", ""]
    parts += [t + "\n" for t in section.details]
    parts += _markdown_sources(section.sources)
    return parts


def render_markdown(title: str, checks: list[dict[str, Any]], sections: list[Section], out_dir: Path,
                    header: RunHeader | None = None) -> str:
    parts = [f"# {title}", "", header.markdown() if header else "", INTRO, "", f'<a id="{SUMMARY_ANCHOR}"></a>', "",
             f"## {SUMMARY_TITLE}", "", summary_table(checks), ""]
    for section in sections:
        parts += _markdown_section(section, out_dir)
    return "\n".join(parts)


CHECKS_SCHEMA = "assocmem-checks-v2"


def checks_json(checks: list[dict[str, Any]], runs: list[dict[str, Any]] | None = None) -> str:
    """Stable, diffable JSON: sorted keys, rows in claim order; ``runs``: each run's convergence status."""
    return json.dumps({"schema": CHECKS_SCHEMA, "runs": runs or [], "checks": checks}, indent=2,
                      sort_keys=True) + "\n"
