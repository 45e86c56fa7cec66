"""Render the report as Markdown and as one self-contained HTML page (figures inlined as base64)."""

from __future__ import annotations

import base64
import html
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

VERDICT_COLOURS = {"reproduced": "#2e7d32", "refuted": "#c62828", "corrected": "#ef6c00",
                   "not-testable": "#616161"}


@dataclass
class Section:
    title: str
    paragraphs: list[str] = field(default_factory=list)
    figures: list[tuple[Path, str]] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)  # markdown tables


def format_number(value: Any) -> str:
    if isinstance(value, float):
        if value != value:  # NaN
            return "nan"
        return f"{value:.4g}"
    return str(value)


def markdown_table(header: list[str], rows: list[list[Any]]) -> str:
    def cell(value: Any) -> str:
        return format_number(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


SHORT_CLAIMS = {
    "prop1": "Prop. 1: g(x) − log d ≤ E(x) ≤ g(x)",
    "prop2": "Prop. 2: |E − (2E_MCHN − log d)| ≤ max‖ρ‖² − min‖ρ‖²",
    "prop3": "Prop. 3: bounds on g − 2E_MCHN",
    "eq8": "Eq. (8): bounds on E_global = −LSE(−E_1..−E_l)",
    "eq12": "Eq. (12)/(C.2): Gaussian integral over an n-ball",
    "lemma5": "Lemma 5, eqs. (13)–(14): bounds on Z_t",
    "radius": "Radius hypothesis: NN distance ≈ 2r*, r* = √(n/2πe)",
    "prop4": "Prop. 4: 1 < L ≤ log Z_t + 1/Z_t + log l",
    "params": "App. D: GPT-2 parameter count (d_FF = 3d, A ≈ 15)",
    "scaling": "Prop. 5: optimal N = O(D²)",
    "loss_floor": "Loss floor ≈ 1 (Fig. 4, abstract)",
    "overfit": "Small subsets over-fit (Fig. 3 right)",
    "literature": "Table 2 losses and the Chinchilla fit E = 1.61",
    "fig1": "Fig. 1: energy landscapes",
}


_SENTENCE_END = re.compile(r"(?<!App)(?<!Prop)(?<!Fig)(?<!Sec)(?<!Eq)(?<!eq)(?<!al)(?<!e\.g)(?<!i\.e)\. (?=[A-Z(])")


def first_sentence(text: str, limit: int = 230) -> str:
    head = _SENTENCE_END.split(text, maxsplit=1)[0].strip()
    return head if len(head) <= limit else head[:limit].rsplit(" ", 1)[0] + " …"


def summary_table(checks: list[dict[str, Any]]) -> str:
    rows = [[c["id"], SHORT_CLAIMS.get(c["id"], c["claim"][:80]), c["verdict"], c.get("how", ""),
             first_sentence(c.get("evidence", ""))] for c in checks]
    return markdown_table(["id", "claim", "verdict", "how we know", "receipt (see the claim's section)"], rows)


INTRO = (
    "Each claim of Niu, Bai, Deng & Han (2024), arXiv:2405.08707, quoted as printed (v2 unless marked "
    "otherwise), is checked against an independent computation on this run's artifacts and on synthetic "
    "cases. Verdicts: **reproduced** = holds as printed; **refuted** = false, with a counterexample or the "
    "measured numbers; **corrected** = false as printed but a corrected statement holds, and the code checks "
    "that one on the same data; **not-testable** = this run cannot decide it, with the reason. 'How we know' "
    "says whether the verdict rests on a derivation, on data, on a counterexample or on a correction. The "
    "derivations are in docs/derivations.md of the repository."
)


def render_markdown(title: str, checks: list[dict[str, Any]], sections: list[Section], out_dir: Path) -> str:
    parts = [f"# {title}", "", INTRO, "", "## Summary: claims and verdicts", "", summary_table(checks), ""]
    for section in sections:
        parts += [f"## {section.title}", ""]
        parts += [p + "\n" for p in section.paragraphs]
        parts += [t + "\n" for t in section.tables]
        for path, caption in section.figures:
            parts += [f"![{caption}]({path.relative_to(out_dir).as_posix()})", f"*{caption}*", ""]
    return "\n".join(parts)


def _inline_markdown(text: str) -> str:
    escaped = html.escape(text)
    escaped = re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)
    return re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", escaped)


def _html_table(markdown: str) -> str:
    lines = [line for line in markdown.splitlines() if line.strip()]
    header = [c.strip() for c in lines[0].strip("|").split(" | ")]
    body = [[c.strip().replace("\\|", "|") for c in line.strip("|").split(" | ")] for line in lines[2:]]
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    verdict_column = header.index("verdict") if "verdict" in header else -1
    rows = []
    for row in body:
        cells = []
        for column, value in enumerate(row):
            colour = VERDICT_COLOURS.get(value) if column == verdict_column else None
            style = f' style="color:{colour};font-weight:bold"' if colour else ""
            cells.append(f"<td{style}>{_inline_markdown(value)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _img(path: Path, caption: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return (f'<figure><img alt="{html.escape(caption)}" src="data:image/png;base64,{data}"/>'
            f"<figcaption>{html.escape(caption)}</figcaption></figure>")


CSS = """body{font-family:system-ui,sans-serif;max-width:1150px;margin:2em auto;padding:0 1em;line-height:1.45}
table{border-collapse:collapse;font-size:0.85em;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 6px;
vertical-align:top}th{background:#f3f3f3}img{max-width:100%}figcaption{font-size:0.85em;color:#555}
code{background:#f5f5f5;padding:0 3px}pre{background:#f5f5f5;padding:8px;overflow-x:auto;font-size:0.8em}"""


def render_html(title: str, checks: list[dict[str, Any]], sections: list[Section]) -> str:
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
             f"<style>{CSS}</style></head><body><h1>{html.escape(title)}</h1>",
             f"<p>{_inline_markdown(INTRO)}</p>",
             "<h2>Summary: claims and verdicts</h2>", _html_table(summary_table(checks))]
    for section in sections:
        parts.append(f"<h2>{html.escape(section.title)}</h2>")
        parts += [f"<p>{_inline_markdown(p)}</p>" if not p.startswith("```") else
                  f"<pre>{html.escape(p.strip('`'))}</pre>" for p in section.paragraphs]
        parts += [_html_table(t) for t in section.tables]
        parts += [_img(path, caption) for path, caption in section.figures]
    parts.append("</body></html>")
    return "\n".join(parts)


def checks_json(checks: list[dict[str, Any]]) -> str:
    """Stable, diffable JSON: sorted keys, rows in claim order."""
    return json.dumps({"schema": "assocmem-checks-v1", "checks": checks}, indent=2, sort_keys=True) + "\n"
