import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from importlib import resources

import matplotlib.pyplot as plt
import pytest
from hypothesis import given
from hypothesis import strategies as st

from assocmem.report import claims, html_page, render
from assocmem.report.build import numbers_tables, stage_timings, theory_sections
from assocmem.report.columns import HEADERS, WORDS
from assocmem.report.figures import radius_star, save_figure
from assocmem.report.html_page import inline_html, render_html
from assocmem.report.render import Section, checks_json, claim_section, first_sentence, markdown_table, render_markdown

CHECKS = [{"id": "prop3", "claim": "Proposition 3: ...", "verdict": "refuted", "how": "corrected",
           "computed": "g - 2E on a counterexample.", "evidence": "App. C.1 is wrong. Second sentence.",
           "numbers": {"a.x": 1.0, "b.x": 2.0, "n": 3}}]
NEW_FIELDS = {"statement_tex": r"$\min_i\lVert\rho_i\rVert^2 - \max_i\lVert\rho_i\rVert^2 \le g(x) - 2E(x)$",
              "ours_tex": r"$-(\Delta + \log d) \le g(x) - 2E(x) \le 0$",
              "quote": [{"where": "§3, Prop. 3", "latex_source": r"\begin{proposition} \frac{a}{b} \end{proposition}",
                         "pdf": "Proposition 3 a/b"}],
              "limits": "Only synthetic sets; real activations could differ."}


class _Elements(HTMLParser):
    """Ids, hrefs, images and text outside <script>/<style>/<pre>/<code> of an HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.hrefs: list[str] = []
        self.srcs: list[str] = []
        self.text: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        self.ids |= {attributes["id"]} if "id" in attributes else set()
        self.hrefs += [attributes["href"]] if "href" in attributes else []
        self.srcs += [attributes["src"]] if "src" in attributes else []
        self._skip += tag in ("script", "style", "pre", "code")

    def handle_endtag(self, tag):
        self._skip -= tag in ("script", "style", "pre", "code")

    def handle_data(self, data):
        if not self._skip:
            self.text.append(data)


def _parse(page: str) -> _Elements:
    parser = _Elements()
    parser.feed(page)
    return parser


def test_markdown_table_escapes_pipes_and_formats_numbers():
    table = markdown_table(["a", "b"], [["x|y", 0.123456789], [1, float("nan")], [354_823_168, None]])
    assert "x\\|y" in table and "0.1235" in table and "nan" in table
    assert "| 354,823,168 | n/a |" in table
    assert table.splitlines()[1] == "|---|---|"


def test_first_sentence_skips_abbreviations():
    assert first_sentence("App. C.1 is wrong. Second sentence.") == "App. C.1 is wrong"
    assert first_sentence("x " * 200).endswith("…")


def test_numbers_are_pivoted_by_prefix_with_units():
    tables = numbers_tables({"L1/emb.mean": 1.0, "L1/emb.median": 0.5, "L2/emb.mean": 2.0, "L2/emb.median": 1.5,
                             "total": 4, "run.test_ce": 1.2})
    assert tables[0].splitlines()[2] == "| total | 4 |"
    assert tables[1].splitlines()[0] == "| set | mean | median |"
    assert "| L2/emb | 2.0 | 1.5 |" in tables[1] or "| L2/emb | 2 | 1.5 |" in tables[1]
    assert tables[2].splitlines()[0] == "| set | test CE (nats/token) |"
    assert numbers_tables({"s.radius": 2.0}, {"radius": "L2"})[0].splitlines()[0] == "| set | radius (L2) |"


def test_checks_json_is_stable():
    text = checks_json(CHECKS)
    assert text == checks_json(json.loads(text)["checks"])
    assert json.loads(text)["schema"] == "assocmem-checks-v2" and json.loads(text)["runs"] == []


def test_inline_markup_becomes_html():
    out = inline_html(r"**Bold $a_1 < b$** and `x<y` see [Prop. 1](#claim-prop1) for $\frac{1}{2}$")
    assert out.startswith('<b>Bold <span class="math">a_1 &lt; b</span></b>')
    assert "<code>x&lt;y</code>" in out and '<a href="#claim-prop1">Prop. 1</a>' in out
    assert r'<span class="math">\frac{1}{2}</span>' in out
    assert '<span class="math display">x^2</span>' in inline_html("$$x^2$$")


@pytest.mark.parametrize("text", ["it costs $5 and $6", "US$5", r"an escaped \$ sign", "a $ b $ c"])
def test_dollars_that_are_not_math_stay_text(text):
    assert "math" not in inline_html(text)


@given(st.text(alphabet=st.characters(blacklist_characters="$`[*\\\x00")))
def test_plain_text_is_only_escaped(text):
    assert inline_html(text) == __import__("html").escape(text)


@given(st.text(alphabet="abcxyz_^{}+-=<>&\\ 0123456789", min_size=1).map(str.strip)
       .filter(lambda tex: tex and not tex.endswith("\\")))  # a trailing backslash escapes the closing $
def test_math_content_round_trips(tex):
    out = inline_html(f"before ${tex}$ after")
    spans = re.findall(r'<span class="math">(.*?)</span>', out)
    assert len(spans) == 1 and __import__("html").unescape(spans[0]) == tex


def test_claim_section_with_new_fields_orders_paper_ours_evidence():
    section = claim_section({**CHECKS[0], **NEW_FIELDS}, numbers_tables(CHECKS[0]["numbers"]), [])
    assert section.id == "claim-prop3" and section.verdict == "refuted" and section.group == render.CLAIMS_GROUP
    text = "\n".join(section.paragraphs)
    assert text.index(NEW_FIELDS["statement_tex"]) < text.index(NEW_FIELDS["ours_tex"]) < text.index("App. C.1")
    assert "§3, Prop. 3" in section.paragraphs[0] and "Only synthetic sets" in text
    assert section.sources == NEW_FIELDS["quote"]


def test_claim_section_falls_back_to_plain_fields():
    section = claim_section(CHECKS[0], [], [])
    assert section.paragraphs[0] == "**The paper.** Proposition 3: ..."
    assert any(p.startswith("**Computed.**") for p in section.paragraphs)
    assert not section.sources and "Limits" not in "".join(section.paragraphs)


def test_rows_bring_their_own_figures_and_fig1_gets_drawn(tmp_path):
    fig, ax = plt.subplots()
    ax.plot([0, 1])
    save_figure(fig, tmp_path, "radius_trend")
    rows = [{**CHECKS[0], "id": "radius", "figures": [{"file": "radius_trend.png", "caption": "trend $m$"}]},
            {**CHECKS[0], "id": "fig1", "verdict": "reproduced"}]
    radius, fig1, _errata = theory_sections(rows, tmp_path)
    assert radius.figures == [(tmp_path / "radius_trend.png", "trend $m$")]
    (path, caption), = fig1.figures
    assert path == tmp_path / "fig1_landscapes.png" and path.exists() and "dotted grey lines" in caption


def test_a_row_of_no_registered_claim_is_refused_naming_it(tmp_path):
    from assocmem.errors import AssocmemError

    with pytest.raises(AssocmemError, match="no claim 'nope' is registered"):
        theory_sections([{**CHECKS[0], "id": "nope"}], tmp_path)


def test_claims_that_bring_figures_are_judged_before_the_runs_are_drawn(monkeypatch, tmp_path):
    """The radius claim's figure renders while the runs' figures are drawn, the runs' while the other claims are
    judged; the rows still come in report order."""
    from assocmem.report import build
    from assocmem.report.claims.registry import Claim, all_claims

    order = []

    def claim(claim_id: str, brings: bool) -> Claim:
        return Claim(claim_id, claim_id, "", "", "", (), 0, lambda evidence: order.append(claim_id) or {"id": claim_id},
                     brings_figures=brings)

    listed = [claim("a", False), claim("radius", True), claim("c", False)]
    monkeypatch.setattr(build.claims, "all_claims", lambda: listed)
    monkeypatch.setattr(build, "experiment_sections", lambda exp, evidence, fig_dir: order.append(exp) or [exp])
    evidence = type("FakeEvidence", (), {"experiments": ["qf"]})()
    rows, sections = build.rows_and_run_sections(evidence, tmp_path)
    assert order == ["radius", "qf", "a", "c"]
    assert [row["id"] for row in rows] == ["a", "radius", "c"] and sections == ["qf"]
    assert [c.id for c in all_claims() if c.brings_figures] == ["radius"]  # the real registry


def test_errata_list_refuted_statements_and_the_typos_of_standing_claims():
    rows = [{**CHECKS[0], **NEW_FIELDS}, {**CHECKS[0], "id": "prop2", "verdict": "reproduced"},
            {**CHECKS[0], "id": "eq8", "verdict": "reproduced"}]
    errata = render.errata_section(rows).tables[0]
    assert "[Prop. 3](#claim-prop3)" in errata and NEW_FIELDS["ours_tex"] in errata
    assert "[Prop. 2](#claim-prop2), App. B.1, proof of Prop. 2" in errata  # reproduced, but its proof has a typo
    assert "claim-eq8" not in errata
    assert render.errata_section([{**CHECKS[0], "id": "eq8", "verdict": "reproduced"}]) is None


def test_long_numbers_tables_are_collapsed():
    many = {f"set{i}.x": float(i) for i in range(render.OPEN_TABLE_ROWS + 1)}
    section = claim_section({**CHECKS[0], "numbers": many}, numbers_tables(many), [])
    assert not section.tables and len(section.details) == 1
    assert "<details><summary>All numbers (13 rows)" in render_html("T", CHECKS, [section])


@pytest.fixture
def page_parts(tmp_path):
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.plot([0, 1])
    png, pdf = save_figure(fig, tmp_path, "demo")
    assert png.exists() and pdf.exists() and not list(tmp_path.glob(".*tmp*"))
    demo = Section("Demo `code`", paragraphs=["`code` and **bold**"], figures=[(png, "a caption with $x^2$")],
                   tables=numbers_tables(CHECKS[0]["numbers"]))
    checks = [{**CHECKS[0], **NEW_FIELDS}, {**CHECKS[0], "id": "eq8", "verdict": "reproduced"}]
    return checks, [demo, *theory_sections(checks, tmp_path)], tmp_path


def test_html_is_self_contained_with_toc_anchors_and_badges(page_parts):
    checks, sections, _ = page_parts
    page = render_html("T", checks, sections)
    parsed = _parse(page)
    assert all(src.startswith("data:image/png;base64,") for src in parsed.srcs) and len(parsed.srcs) == 1
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page) and "url(fonts/" not in page
    assert page.count('url(data:font/woff2;base64,') == 20  # every KaTeX font, inlined
    anchors = [href[1:] for href in parsed.hrefs if href.startswith("#")]
    assert {"claim-prop3", "claim-eq8", "summary", "errata", "demo-code"} <= set(anchors)
    assert set(anchors) <= parsed.ids
    assert page.count('class="badge v-refuted"') == 2  # the summary's verdict cell and the claim's heading
    assert page.count('class="badge mini v-refuted"') == 1  # its table-of-contents entry
    assert "`" not in "".join(re.findall(r"<h[12][^>]*>(.*?)</h[12]>", page))


def test_html_leaves_math_to_katex_and_verbatim_latex_in_pre(page_parts):
    checks, sections, _ = page_parts
    page = render_html("T", checks, sections)
    parsed = _parse(page)
    math_spans = re.findall(r'<span class="math[^"]*">', page)
    assert len(math_spans) >= 4 and "katex.render(" in page
    outside_math = re.sub(r'<span class="math[^"]*">.*?</span>', "", page)
    text = "".join(_parse(outside_math).text)
    assert "$" not in text and "\\frac" not in text
    assert r"\begin{proposition} \frac{a}{b}" in page  # verbatim source, inside <pre>
    assert "<details><summary>The paper verbatim: §3, Prop. 3</summary><pre>" in page
    assert parsed.text


def test_markdown_keeps_math_anchors_and_sources(page_parts):
    checks, sections, out_dir = page_parts
    markdown = render_markdown("T", checks, sections, out_dir)
    assert "![a caption with x^2](demo.png)" in markdown and "**Figure.** a caption with $x^2$" in markdown
    assert '<a id="claim-prop3"></a>' in markdown and "[Prop. 3](#claim-prop3)" in markdown
    assert NEW_FIELDS["statement_tex"] in markdown and "```latex\n\\begin{proposition}" in markdown
    assert "## Prop. 3: bounds on $g - 2E_{\\mathrm{MCHN}}$ · refuted" in markdown


def _relative_luminance(hex_colour: str) -> float:
    srgb = [int(hex_colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in srgb]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


@pytest.mark.parametrize("verdict", claims.VERDICTS)
def test_badges_are_readable_white_on_colour(verdict):
    contrast = 1.05 / (_relative_luminance(html_page.VERDICT_COLOURS[verdict]) + 0.05)
    assert contrast >= 4.5  # WCAG AA for normal text
    assert f".v-{verdict}{{background:{html_page.VERDICT_COLOURS[verdict]}}}" in html_page.CSS


def test_long_code_blocks_are_collapsed():
    short = Section("S", paragraphs=["```a: 1\n```"])
    long = Section("L", paragraphs=["```" + "a: 1\n" * (html_page.OPEN_CODE_LINES + 5) + "```"])
    page = render_html("T", CHECKS, [short, long])
    assert "<pre>a: 1\n</pre>" in page and f"Show all {html_page.OPEN_CODE_LINES + 5} lines" in page


def test_png_display_width_keeps_figures_at_one_scale(tmp_path):
    fig, _ = plt.subplots(figsize=(5, 3))
    fig.savefig(tmp_path / "w.png", dpi=html_page.PNG_DPI)
    plt.close(fig)
    assert html_page.png_display_width((tmp_path / "w.png").read_bytes()) == 5 * html_page.CSS_PX_PER_INCH
    assert html_page.png_display_width(b"GIF89a") is None


def test_katex_bundle_inlines_every_font():
    css, script = html_page.katex_bundle()
    fonts = list((resources.files("assocmem.report") / "assets" / "katex" / "fonts").iterdir())
    assert css.count("data:font/woff2;base64,") == len(fonts) == 20
    assert "katex" in script[:2000].lower()


def _receipts() -> list[str]:
    """Evidence, computed and limits of the claims that need no run (their math is the densest)."""
    import pandas as pd

    from assocmem.report.claims.literature import PARAMS_COLUMNS, params
    from assocmem.report.claims.partition import eq12, lemma5

    rows = [eq12(), lemma5([(80_000, 1024, "paper"), (120, 32, "this_run")]),
            params(pd.DataFrame(columns=PARAMS_COLUMNS))]
    return [row[field] for row in rows for field in ("evidence", "computed", "limits") if row[field]]


@pytest.mark.skipif(shutil.which("node") is None, reason="node not installed: KaTeX parse check needs it")
def test_report_tex_parses_with_the_vendored_katex(tmp_path):
    """Every TeX string the renderer itself writes (claim titles, figure captions, column headers, receipts) parses in
    KaTeX."""
    from assocmem.report import figures, style

    texts = [tex for claim in claims.all_claims() for tex in (claim.title_tex, claim.statement_tex)]
    texts.append(figures._mean_median_r_star_words())
    texts += [figures.eq12_ball_integral(radii=[1.0, 2.0])[1], figures.fig1_landscapes(num=5)[1]]
    texts += [*HEADERS.values(), *WORDS.values()]
    texts += _receipts()
    plt.close("all")
    assert style.PAGE_WIDTH_IN  # figures above were drawn in the report style
    formulas = [m for text in texts for m in re.findall(r"(?<!\\)\$(.+?)(?<!\\)\$", text)]
    katex_js = resources.files("assocmem.report") / "assets" / "katex" / "katex.min.js"
    script = ("const katex = require(process.argv[1]); const bad = [];"
              "for (const tex of JSON.parse(require('fs').readFileSync(0, 'utf8'))) {"
              "  try { katex.renderToString(tex, {throwOnError: true}); } catch (e) { bad.push(tex + ': ' + e); } }"
              "console.log(JSON.stringify(bad));")
    result = subprocess.run(["node", "-e", script, str(katex_js)], input=json.dumps(formulas), text=True,
                            capture_output=True, timeout=60, check=True)
    assert len(formulas) >= 12 and json.loads(result.stdout) == []


def test_radius_star_matches_the_paper():
    assert radius_star(1024) == pytest.approx(7.74, abs=0.01)


def test_stage_timings_read_only_the_current_jobs_benchmarks(tmp_path):
    """A benchmark left by a job the config no longer has (a dropped subset) is not in the provenance table."""
    bench = tmp_path / "benchmarks" / "qf"
    bench.mkdir(parents=True)
    header = "s\th:m:s\tmax_rss\tmax_vms\n"
    for name, seconds in (("train_tiny_pct100", 3.5), ("train_tiny_pct10", 1.25), ("tokenize", 0.5)):
        (bench / f"{name}.tsv").write_text(header + f"{seconds}\t0:00:01\t120.5\t300\n")
    current = ["qf/tokenize", "qf/train_tiny_pct100", "qf/neighbours_tiny_pct100"]  # the last one not run yet
    timings = stage_timings(tmp_path, current)
    assert timings["stage"].tolist() == ["qf/tokenize", "qf/train_tiny_pct100"]
    assert timings["seconds"].tolist() == [0.5, 3.5] and timings["max_rss_mb"].tolist() == [120.5, 120.5]
    assert stage_timings(tmp_path, []).empty
