"""The report as one self-contained HTML page: the Markdown subset of :mod:`assocmem.report.render` turned into HTML,
math as ``<span class="math">`` elements that the vendored KaTeX (assets/katex, inlined with its fonts as base64)
typesets in the reader's browser, offline; figures inlined as base64 PNGs; a sticky table of contents.
"""

from __future__ import annotations

import base64
import functools
import html
import re
from importlib import resources
from pathlib import Path
from typing import Any

from assocmem.errors import AssocmemError
from assocmem.report.claims import VERDICTS
from assocmem.report.header import RunHeader
from assocmem.report.render import INTRO, SUMMARY_ANCHOR, SUMMARY_TITLE, Section, strip_markup, summary_table
from assocmem.report.style import PNG_DPI

# Dark Okabe-Ito hues: white bold text on them keeps a contrast ratio above 4.5 (WCAG AA).
VERDICT_COLOURS = {"reproduced": "#00654a", "refuted": "#a23c00", "corrected": "#7a4f00", "not-testable": "#595959"}
OPEN_CODE_LINES = 15  # longer code blocks (the run's config) start collapsed

_INLINE = re.compile(
    r"(?P<code>`[^`]+`)"
    r"|(?<!\\)\$\$(?P<display>.+?)(?<!\\)\$\$"
    r"|(?<![\\$\w])\$(?=[^\s$])(?P<math>(?:\\.|[^$\\])+?)(?<=\S)\$(?![\w$])"
    r"|\[(?P<label>[^\]]+)\]\((?P<href>#[\w-]+|https?://[^\s)]+)\)",
    re.S,
)


def _text_html(text: str) -> str:
    return html.escape(text.replace("\\$", "$"))


def _span_html(match: re.Match[str]) -> str:
    if match["code"]:
        return f"<code>{html.escape(match['code'][1:-1])}</code>"
    if match["display"] is not None:
        return f'<span class="math display">{html.escape(match["display"])}</span>'
    if match["math"] is not None:
        return f'<span class="math">{html.escape(match["math"])}</span>'
    return f'<a href="{html.escape(match["href"])}">{_text_html(match["label"])}</a>'


def inline_html(text: str) -> str:
    """HTML for the Markdown subset: code spans, math, links, and bold around any of them."""
    spans: list[str] = []

    def hold(match: re.Match[str]) -> str:
        spans.append(_span_html(match))
        return f"\x00{len(spans) - 1}\x00"

    held = _text_html(_INLINE.sub(hold, text.replace("\x00", "")))
    bold = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", held, flags=re.S)
    return re.sub("\x00(\\d+)\x00", lambda m: spans[int(m[1])], bold)


def badge(verdict: str, mini: bool = False) -> str:
    """A verdict as a coloured label (the word is always shown: colour is never the only cue)."""
    css = verdict if verdict in VERDICTS else "unknown"
    return f'<span class="badge{" mini" if mini else ""} v-{css}">{html.escape(verdict)}</span>'


_NUMBER = re.compile(r"^[-+−]?(\d[\d,]*\.?\d*|\.\d+)(e[-+]?\d+)?%?$|^nan$|^n/a$|^-?inf$", re.I)


def html_table(markdown: str) -> str:
    """A Markdown table as HTML: verdict cells as badges, numbers right-aligned, wide tables scroll."""
    lines = [line for line in markdown.splitlines() if line.strip()]
    header = [c.strip().replace("\\|", "|") for c in lines[0].strip().strip("|").split(" | ")]
    body = [[c.strip().replace("\\|", "|") for c in line.strip().strip("|").split(" | ")] for line in lines[2:]]
    head = "".join(f"<th>{inline_html(h)}</th>" for h in header)
    verdict_column = header.index("verdict") if "verdict" in header else -1
    rows = []
    for row in body:
        cells = []
        for column, value in enumerate(row):
            if column == verdict_column:
                cells.append(f"<td>{badge(value)}</td>")
            elif _NUMBER.match(value):
                cells.append(f'<td class="num">{html.escape(value)}</td>')
            else:
                cells.append(f"<td>{inline_html(value)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return (f'<div class="table-wrap"><table><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table></div>")


CSS_PX_PER_INCH = 96


def png_display_width(png: bytes) -> int | None:
    """CSS width that shows a report PNG at its physical size (figure inches at 96 px each), so every figure's
    fonts appear at the same size; None for anything that is not a PNG."""
    if png[:8] != b"\x89PNG\r\n\x1a\n":
        return None
    pixels = int.from_bytes(png[16:20], "big")
    return round(pixels * CSS_PX_PER_INCH / PNG_DPI)


def _img(path: Path, caption: str) -> str:
    png = path.read_bytes()
    width = png_display_width(png)
    size = f' width="{width}"' if width else ""
    data = base64.b64encode(png).decode("ascii")
    return (f'<figure><img alt="{html.escape(strip_markup(caption))}"{size} src="data:image/png;base64,{data}"/>'
            f"<figcaption>{inline_html(caption)}</figcaption></figure>")


def _paragraph(text: str) -> str:
    if not text.startswith("```"):
        return f"<p>{inline_html(text)}</p>"
    code = text.strip("`")
    lines = code.strip("\n").count("\n") + 1
    block = f"<pre>{html.escape(code)}</pre>"
    return block if lines <= OPEN_CODE_LINES else f"<details><summary>Show all {lines} lines</summary>{block}</details>"


def _details_html(section: Section) -> list[str]:
    parts = []
    if section.details:
        rows = sum(max(0, len(t.splitlines()) - 2) for t in section.details)
        parts.append(f"<details><summary>All numbers ({rows} rows)</summary>"
                     + "".join(html_table(t) for t in section.details) + "</details>")
    for quote in section.sources:
        pdf = (f"<p>PDF text, where it differs:</p><pre>{html.escape(quote['pdf'].strip())}</pre>"
               if quote.get("pdf") else "")
        parts.append(f"<details><summary>The paper verbatim: {html.escape(quote.get('where') or 'source')}"
                     f"</summary><pre>{html.escape(quote.get('latex_source', '').strip())}</pre>{pdf}</details>")
    return parts


def _section_html(section: Section) -> str:
    heading = inline_html(section.title) + (" " + badge(section.verdict) if section.verdict else "")
    parts = [f'<section id="{html.escape(section.id)}"><h2>{heading}</h2>']
    parts += [_paragraph(p) for p in section.paragraphs]
    parts += [html_table(t) for t in section.tables]
    parts += [_img(path, caption) for path, caption in section.figures]
    parts += _details_html(section)
    parts.append("</section>")
    return "\n".join(parts)


def _toc_entry(section: Section) -> str:
    mark = f" {badge(section.verdict, mini=True)}" if section.verdict else ""
    return f'<li><a href="#{html.escape(section.id)}">{inline_html(section.label)}</a>{mark}</li>'


def toc_html(sections: list[Section]) -> str:
    """The sticky table of contents: every section, the claims nested under one group entry."""
    items = [f'<li><a href="#{SUMMARY_ANCHOR}">Summary</a></li>']
    index = 0
    while index < len(sections):
        group = sections[index].group
        if not group:
            items.append(_toc_entry(sections[index]))
            index += 1
            continue
        members = []
        while index < len(sections) and sections[index].group == group:
            members.append(_toc_entry(sections[index]))
            index += 1
        items.append(f"<li><span class=\"group\">{html.escape(group)}</span><ol>{''.join(members)}</ol></li>")
    return f'<nav id="toc" aria-label="Contents"><h2>Contents</h2><ol>{"".join(items)}</ol></nav>'


CSS = """
:root{--text:#1d1d1f;--muted:#555;--rule:#d9d9de;--head:#f2f2f5;--code:#f4f4f6;--link:#0b5cad}
*{box-sizing:border-box}
html{scroll-padding-top:0.5em}
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;color:var(--text);line-height:1.5;margin:0;
font-size:16px}
.layout{display:grid;grid-template-columns:15rem minmax(0,1fr);gap:2.5rem;max-width:88rem;margin:0 auto;
padding:0 1.5rem}
#toc{position:sticky;top:0;align-self:start;max-height:100vh;overflow-y:auto;padding:1.2rem 0;font-size:0.88em;
border-right:1px solid var(--rule)}
#toc h2{font-size:1em;margin:0 0 0.5em;border:0}
#toc ol{list-style:none;margin:0;padding:0 0.8rem 0 0}#toc ol ol{padding-left:0.8rem}
#toc li{margin:0.2em 0}#toc a{color:var(--link);text-decoration:none}#toc a:hover{text-decoration:underline}
#toc .group{font-weight:600;color:var(--muted)}
main{min-width:0;padding:1rem 0 4rem}
h1{font-size:1.7em;margin:0.6em 0 0.4em}
h2{font-size:1.3em;margin:2.2em 0 0.6em;padding-bottom:0.25em;border-bottom:1px solid var(--rule)}
section{scroll-margin-top:0.5rem}
p{max-width:60rem}
a{color:var(--link)}
.badge{display:inline-block;padding:0.1em 0.55em;border-radius:0.8em;color:#fff;font-size:0.78em;font-weight:700;
vertical-align:middle;letter-spacing:0.02em;white-space:nowrap}
.badge.mini{font-size:0.7em;font-weight:600;padding:0 0.45em}
.v-unknown{background:#333}
.table-wrap{overflow-x:auto;margin:1em 0;max-width:100%}
table{border-collapse:collapse;font-size:0.86em}
th,td{border-bottom:1px solid var(--rule);padding:0.35em 0.7em;vertical-align:top;text-align:left}
thead th{background:var(--head);border-bottom:2px solid #bbb;position:sticky;top:0}
tbody tr:nth-child(even){background:#fafafb}
td:first-child{min-width:9em}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
figure{margin:1.5em 0}img{max-width:100%;height:auto;display:block}
figcaption{font-size:0.9em;color:var(--muted);max-width:60rem;margin-top:0.4em}
code{background:var(--code);padding:0 0.25em;border-radius:3px;font-size:0.92em}
pre{background:var(--code);padding:0.7em;overflow-x:auto;font-size:0.82em;white-space:pre-wrap}
details{margin:0.8em 0}summary{cursor:pointer;color:var(--link)}
.math.display{display:block;margin:0.6em 0}
@media (max-width:60rem){.layout{display:block}#toc{position:static;max-height:none;border-right:0;
border-bottom:1px solid var(--rule)}}
"""

CSS += "".join(f".v-{verdict}{{background:{colour}}}" for verdict, colour in VERDICT_COLOURS.items())

RENDER_MATH_JS = """
for (const el of document.querySelectorAll(".math")) {
  katex.render(el.textContent, el, {displayMode: el.classList.contains("display"), throwOnError: false});
}
"""


@functools.lru_cache(maxsize=1)
def katex_bundle() -> tuple[str, str]:
    """KaTeX's stylesheet with every font inlined as a base64 woff2, and its script (assets/katex)."""
    assets = resources.files("assocmem.report") / "assets" / "katex"
    try:
        css = (assets / "katex.min.css").read_text(encoding="utf-8")
        script = (assets / "katex.min.js").read_text(encoding="utf-8")
    except FileNotFoundError as err:
        raise AssocmemError(f"KaTeX assets missing from the installed package ({err.filename}): reinstall assocmem "
                            "(`pip install -e .`) so that src/assocmem/report/assets/katex is included") from err

    def inline_font(match: re.Match[str]) -> str:
        font = (assets / "fonts" / f"{match['name']}.woff2").read_bytes()
        return f'src:url(data:font/woff2;base64,{base64.b64encode(font).decode("ascii")}) format("woff2")'

    css = re.sub(r'src:url\(fonts/(?P<name>[\w-]+)\.woff2\) format\("woff2"\)[^;}]*', inline_font, css)
    if "url(fonts/" in css or "</script" in script.lower():
        raise AssocmemError("KaTeX assets under src/assocmem/report/assets/katex are not the expected build: "
                            "see VENDORED.md there for how to refresh them")
    return css, script


def render_html(title: str, checks: list[dict[str, Any]], sections: list[Section],
                header: RunHeader | None = None) -> str:
    katex_css, katex_js = katex_bundle()
    summary = (f'<section id="{SUMMARY_ANCHOR}"><h2>{html.escape(SUMMARY_TITLE)}</h2>'
               f"{html_table(summary_table(checks))}</section>")
    parts = ["<!doctype html><html lang='en'><head><meta charset='utf-8'>",
             "<meta name='viewport' content='width=device-width, initial-scale=1'>",
             f"<title>{html.escape(title)}</title><style>{katex_css}</style><style>{CSS}</style></head><body>",
             f"<div class='layout'>{toc_html(sections)}<main>",
             f"<h1>{html.escape(title)}</h1>", header.html() if header else "", f"<p>{inline_html(INTRO)}</p>",
             summary]
    parts += [_section_html(section) for section in sections]
    parts += ["</main></div>", f"<script>{katex_js}</script>", f"<script>{RENDER_MATH_JS}</script>",
              "</body></html>"]
    return "\n".join(parts)
