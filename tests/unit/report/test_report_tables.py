"""Issue 29: the report's tables fit the page or scroll inside their own box, and show headers in words."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from assocmem.report import html_page
from assocmem.report.build import WIDE_TABLE_COLUMNS, numbers_tables
from assocmem.report.columns import HEADERS, human_header, human_label
from assocmem.report.header import RunHeader
from assocmem.report.html_page import html_table, render_html
from assocmem.report.render import Section, format_number, markdown_table, render_markdown

MATH = re.compile(r"(?<!\\)\$.+?(?<!\\)\$")


def outside_math(text: str) -> str:
    return MATH.sub("", text)


class _Tables(HTMLParser):
    """Each table's header texts (math spans left out: a subscript there is typeset) and its parent's class."""

    def __init__(self) -> None:
        super().__init__()
        self.parents: list[str] = []
        self.headers: list[str] = []
        self._stack: list[tuple[str, str]] = []
        self._in_th = self._in_math = 0

    def handle_starttag(self, tag, attrs):
        cls = dict(attrs).get("class") or ""
        if tag == "table":
            self.parents.append(self._stack[-1][1] if self._stack else "")
        self._in_th += tag == "th"
        self._in_math += tag == "span" and "math" in cls.split()
        if tag == "th":
            self.headers.append("")
        self._stack.append((tag, cls))

    def handle_endtag(self, tag):
        tag_open, cls = self._stack.pop()
        self._in_th -= tag == "th"
        self._in_math -= tag == "span" and "math" in cls.split()

    def handle_data(self, data):
        if self._in_th and not self._in_math:
            self.headers[-1] += data


def _tables(page: str) -> _Tables:
    parser = _Tables()
    parser.feed(page)
    return parser


@given(st.from_regex(r"[a-z0-9]{1,6}(_[A-Za-z0-9]{1,6}){1,5}", fullmatch=True))
def test_every_snake_case_key_becomes_words(key):
    words = human_header(key)
    assert "_" not in outside_math(words) and words.strip() and words.count("$") % 2 == 0


def test_header_mapping_in_one_place():
    assert human_header("val_ce") == "val CE" and human_header("n_params") == "parameters"
    assert human_header("test_ce_no_eos_se") == "test CE without <eos> SE"
    assert human_header("n_patterns") == "patterns" and human_header("d") == "d" and human_header("n") == "n"
    assert human_header("log_Z_t") == r"$\log Z_t$" and human_header("gpt2_medium") == "GPT-2 medium"
    assert human_header("TV <= 1.5 x noise") == "TV <= 1.5 x noise"  # words stay as they are
    assert human_label("L2/pct100") == "L2/pct100" and human_label("synthetic_duplicates") == "synthetic duplicates"
    assert all("_" not in outside_math(words) for words in HEADERS.values())


def test_tables_show_words_in_markdown_and_html():
    markdown = markdown_table(["set", "val_ce", "frac_energy_equals_g", "max_abs_global_minus_union"],
                              [["synthetic_single", 1.0, 0.5, 1e-12]])
    header = markdown.splitlines()[0]
    assert header == r"| set | val CE | share with $E = g$ | max $\|E_{\mathrm{global}} - E_{\cup}\|$ |"
    parsed = _tables(html_table(markdown))
    assert parsed.headers == ["set", "val CE", "share with ", "max "] and parsed.parents == ["table-wrap"]
    assert r'<span class="math">|E_{\mathrm{global}} - E_{\cup}|</span>' in html_table(markdown)


def test_wide_numbers_tables_are_transposed_to_fit():
    wide = {f"gpt2_{size}.quantity_{i}": float(i) for size in ("small", "medium") for i in range(WIDE_TABLE_COLUMNS)}
    table, = numbers_tables(wide)
    lines = table.splitlines()
    assert lines[0] == "| quantity | GPT-2 small | GPT-2 medium |" and len(lines) == 2 + WIDE_TABLE_COLUMNS
    assert lines[2] == "| quantity 0 | 0 | 0 |"
    many_rows = {f"r{j}.q_{i}": 1.0 for j in range(WIDE_TABLE_COLUMNS + 1) for i in range(WIDE_TABLE_COLUMNS)}
    assert numbers_tables(many_rows)[0].splitlines()[0].startswith("| set | q 0 | q 1 |")  # long: not transposed


def test_booleans_read_yes_and_no():
    assert format_number(True) == "yes" and format_number(False) == "no" and format_number(np.bool_(True)) == "yes"


def test_every_table_of_a_page_is_in_its_scrolling_box_with_word_headers(tmp_path):
    numbers = {"gpt2_small.exact_A_total": 14.1, "gpt2_small.d_ff_real": 3072, "gpt2_small.hf_count": 124_439_808,
               "train_ce": 1.0, "synthetic_random.frac_upper_equality": 0.0}
    section = Section("S", tables=numbers_tables(numbers))
    checks = [{"id": "prop1", "claim": "c", "verdict": "reproduced", "how": "derived", "computed": "x",
               "evidence": "e", "numbers": numbers}]
    page = render_html("T", checks, [section], RunHeader((("built", "today"), ("code", "abc")), "toy"))
    parsed = _tables(page)
    assert len(parsed.parents) == 5 and set(parsed.parents) == {"table-wrap"}  # the run header's table too
    assert parsed.headers and not [h for h in parsed.headers if "_" in h]
    assert ".table-wrap{overflow-x:auto" in html_page.CSS
    markdown = render_markdown("T", checks, [section], tmp_path)
    lines = markdown.splitlines()
    header_lines = [line for line, below in zip(lines, lines[1:], strict=False) if below.startswith("|---")]
    assert header_lines and not [line for line in header_lines if "_" in outside_math(line)]
