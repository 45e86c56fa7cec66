"""The report in a real browser: headless Chromium opens the tiny pipeline's index.html.

Checks what a reader sees: KaTeX typeset every formula (no raw ``$`` or TeX commands left in text nodes, no
KaTeX error boxes, its fonts loaded from the page itself), every table-of-contents and summary link lands on
an element, the table of contents stays on screen while scrolling, every figure decoded, and the page made no
network request. Issue 29: the run header, the toy banner and the regime column are shown, the training figure has
its floor zoom row, receipts show math typeset (no plain-ASCII formulas, truth values or lists), and every table
sits in its own scrolling box inside the column, with headers in words (the page never scrolls sideways).
Screenshots go to tests/artifacts/ (kept out of git by a .gitignore the test writes there).

Set-up: Debian's ``chromium`` (installed with apt-get when missing and running as root) driven by the
``playwright`` Python package (pip-installed when missing; its own browser download is never used). The test
skips with the reason when either cannot be had. ASSOCMEM_REPORT_DIR=<dir with index.html> reuses a finished
report instead of running the tiny pipeline (about a minute).
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import ROOT

ARTIFACTS = ROOT / "tests" / "artifacts"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
VIEWPORT = {"width": 1400, "height": 1000}
INSTALL_TIMEOUT_S = 900

pytestmark = pytest.mark.e2e

PAGE_STATE_JS = r"""
async () => {
  await document.fonts.ready;
  const verbatim = el => el.closest('.katex-mathml, pre, code, script, style');
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const rawTex = [];
  while (walker.nextNode()) {
    const node = walker.currentNode;
    if (!verbatim(node.parentElement) && /\$|\\[A-Za-z]{2,}/.test(node.textContent)) {
      rawTex.push(node.textContent.trim().slice(0, 160));
    }
  }
  const plain = el => [...el.childNodes].map(n => n.nodeType === Node.TEXT_NODE ? n.textContent
                       : (n.classList && n.classList.contains('katex') ? '' : plain(n))).join('');
  const asciiMath = [];
  const prose = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (prose.nextNode()) {
    const node = prose.currentNode;
    if (!node.parentElement.closest('.katex, pre, code, script, style')
        && /\^|\|\||\bTrue\b|\bFalse\b|\['|\s(<=|>=)\s/.test(node.textContent)) {
      asciiMath.push(node.textContent.trim().slice(0, 160));
    }
  }
  const hrefs = sel => [...document.querySelectorAll(sel)].map(a => a.getAttribute('href'));
  const resolves = h => document.getElementById(decodeURIComponent(h.slice(1))) !== null;
  return {
    rawTex,
    mathSpans: document.querySelectorAll('.math').length,
    katex: document.querySelectorAll('.math .katex').length,
    unrendered: [...document.querySelectorAll('.math')].filter(e => !e.querySelector('.katex'))
                  .map(e => e.textContent),
    katexErrors: [...document.querySelectorAll('.katex-error')].map(e => e.title || e.textContent),
    tocLinks: hrefs('#toc a'),
    brokenLinks: hrefs('a[href^="#"]').filter(h => !resolves(h)),
    summaryLinks: hrefs('#summary td:first-child a[href^="#claim-"]'),  // receipts may link to other claims
    images: [...document.images].map(i => ({alt: i.alt.slice(0, 80), complete: i.complete, width: i.naturalWidth})),
    katexFonts: [...document.fonts].filter(f => f.family.includes('KaTeX')).map(f => [f.family, f.status]),
    headings: [...document.querySelectorAll('h1, h2')].map(h => h.textContent),
    asciiMath,
    receiptMath: document.querySelectorAll('#summary td:nth-child(5) .katex').length,
    evidenceMath: [...document.querySelectorAll('section p')].filter(p => p.textContent.startsWith('Evidence.'))
                    .map(p => p.querySelectorAll('.katex').length),
    headers: [...document.querySelectorAll('th')].map(plain),
  };
}
"""


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)


def _last_line(result: subprocess.CompletedProcess) -> str:
    lines = (result.stderr or result.stdout).strip().splitlines()
    return lines[-1] if lines else f"exit status {result.returncode}"


def chromium_path() -> str:
    """Debian's chromium, installed with apt-get when missing (root only); skips with the reason otherwise."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip("chromium is not installed and cannot be installed here (needs root and apt-get): "
                    "run `apt-get install -y chromium`")
    result = _run(["apt-get", "install", "-y", "-q", "--no-install-recommends", "chromium"])
    if result.returncode != 0:
        _run(["apt-get", "update", "-q"])
        result = _run(["apt-get", "install", "-y", "-q", "--no-install-recommends", "chromium"])
    found = shutil.which("chromium")
    if not found:
        pytest.skip(f"`apt-get install chromium` failed: {_last_line(result)}")
    return found


def sync_playwright() -> Any:
    """playwright.sync_api.sync_playwright, pip-installing the package when missing; skips if that fails."""
    try:
        from playwright.sync_api import sync_playwright as launcher
    except ImportError:
        result = _run([sys.executable, "-m", "pip", "install", "-q", "playwright"])
        if result.returncode != 0:
            pytest.skip(f"`pip install playwright` failed: {_last_line(result)}")
        importlib.invalidate_caches()
        from playwright.sync_api import sync_playwright as launcher
    return launcher


@pytest.fixture(scope="module")
def report_dir(request: pytest.FixtureRequest) -> Path:
    """The tiny pipeline's report directory: ASSOCMEM_REPORT_DIR, else the session's shared tiny run (conftest)."""
    given = os.environ.get("ASSOCMEM_REPORT_DIR")
    return Path(given) if given else request.getfixturevalue("tiny_run") / "results" / "report"


@pytest.fixture(scope="module")
def browser_page(report_dir: Path) -> Iterator[tuple[Any, list[str], list[str]]]:
    """(page, network requests the page tried, page errors) with index.html loaded."""
    executable = chromium_path()
    launcher = sync_playwright()
    requests: list[str] = []
    errors: list[str] = []
    with launcher() as playwright, tempfile.TemporaryDirectory(prefix="assocmem-chromium.") as profile:
        context = playwright.chromium.launch_persistent_context(
            profile, executable_path=executable, args=CHROMIUM_FLAGS, headless=True, viewport=VIEWPORT)
        page = context.new_page()
        page.on("pageerror", lambda err: errors.append(str(err)))
        page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)

        def only_local(route: Any) -> None:
            if route.request.url.startswith(("file:", "data:")):
                route.continue_()
            else:
                requests.append(route.request.url)
                route.abort()

        page.route("**/*", only_local)
        page.goto((report_dir / "index.html").resolve().as_uri(), wait_until="load")
        yield page, requests, errors
        context.close()


@pytest.fixture(scope="module")
def state(browser_page) -> dict[str, Any]:
    page, _, _ = browser_page
    return page.evaluate(PAGE_STATE_JS)


def _artifact(name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / ".gitignore").write_text("*\n")
    return ARTIFACTS / name


def test_page_is_offline_and_error_free(browser_page):
    _, requests, errors = browser_page
    assert requests == [], "the report must not fetch anything at view time"
    assert errors == []


def test_katex_typeset_every_formula(state):
    assert state["mathSpans"] >= 20 and state["katex"] == state["mathSpans"]
    assert state["unrendered"] == [] and state["katexErrors"] == []
    assert state["rawTex"] == [], "raw TeX left in text nodes"
    loaded = {family for family, status in state["katexFonts"] if status == "loaded"}
    assert {"KaTeX_Main", "KaTeX_Math"} <= loaded, state["katexFonts"]


def test_every_link_resolves_and_the_summary_links_each_claim(state):
    assert len(state["tocLinks"]) >= 10 and state["brokenLinks"] == []
    claim_links = [h for h in state["tocLinks"] if h.startswith("#claim-")]
    assert claim_links and sorted(state["summaryLinks"]) == sorted(claim_links)
    assert not any("`" in heading for heading in state["headings"])


def test_every_figure_loaded(state):
    assert len(state["images"]) >= 5
    broken = [image["alt"] for image in state["images"] if not image["complete"] or image["width"] <= 0]
    assert broken == []


def test_toc_stays_on_screen_and_jumps_to_a_claim(browser_page, state):
    page, _, _ = browser_page
    page.screenshot(path=str(_artifact("report_browser_top.png")))
    target = state["summaryLinks"][2]
    page.click(f'#toc a[href="{target}"]')
    page.wait_for_function(f"location.hash === '{target}'")
    top = page.evaluate(f"document.getElementById('{target[1:]}').getBoundingClientRect().top")
    toc_top = page.evaluate("document.getElementById('toc').getBoundingClientRect().top")
    shot = _artifact("report_browser_claim.png")
    page.screenshot(path=str(shot))
    print(f"screenshots: {shot.parent}/report_browser_top.png, {shot}")
    assert 0 <= top < 60, f"{target} is {top}px from the top after its ToC link was clicked"
    assert abs(toc_top) < 1, "the table of contents scrolled away"


def test_the_run_header_the_toy_banner_and_the_regime_column_are_shown(browser_page):
    """Issue 29: the page says when and from what it was built, that a toy config is no evidence, and each run's
    regime; all visible on the first screen or in the training table."""
    page, _, _ = browser_page
    header = page.locator("table.run-header")
    assert header.is_visible() and {"built", "code", "config", "host", "packages"} <= set(
        header.locator("th").all_inner_texts())
    assert page.locator(".toy-banner").is_visible()
    assert page.locator(".toy-banner").bounding_box()["y"] < VIEWPORT["height"]
    assert page.locator("th", has_text="regime").count() >= 1


def test_math_in_the_receipts_is_typeset(state):
    """Issue 29: receipts and evidence show formulas typeset (no e^{...}, ||x - rho||, True or ['a', 'b'] in text)."""
    assert state["asciiMath"] == [], "plain-ASCII math, truth values or lists left in the page"
    assert state["receiptMath"] >= 3 and sum(count > 0 for count in state["evidenceMath"]) >= 5


def test_training_figure_has_the_floor_zoom_panel(browser_page):
    """Issue 29: the training-curve figure has a zoom row where the exact floor and 1 are visibly apart."""
    page, _, _ = browser_page
    figure = page.locator("figure", has=page.locator("img[alt^='Training (solid) and validation (dashed)']")).first
    caption = figure.locator("figcaption").inner_text()
    apart = re.search(r"the exact floor and 1 are (\d+)% of the axis apart", caption)
    assert "the bottom row shows the same curves on a linear axis" in caption and apart and int(apart[1]) >= 10
    image = figure.locator("img")
    assert image.evaluate("img => img.complete && img.naturalHeight > 0.6 * img.naturalWidth")  # two rows of panels
    figure.scroll_into_view_if_needed()
    figure.screenshot(path=str(_artifact("report_browser_training.png")))


TABLE_WIDTHS_JS = r"""
() => {
  const closed = [...document.querySelectorAll('details:not([open])')];
  closed.forEach(d => d.open = true);  // measure the collapsed tables too
  const column = document.querySelector('main').getBoundingClientRect();
  const tables = [...document.querySelectorAll('main table')].map(t => {
    const wrap = t.parentElement, box = wrap.getBoundingClientRect();
    return {wrapped: wrap.classList.contains('table-wrap'), table: t.scrollWidth, wrap: wrap.clientWidth,
            scrolls: getComputedStyle(wrap).overflowX === 'auto', inColumn: box.right <= column.right + 1,
            head: [...t.querySelectorAll('th')].slice(0, 4).map(h => h.textContent).join(' | ')};
  });
  const body = document.body.scrollWidth;
  closed.forEach(d => d.open = false);
  return {tables, body, viewport: window.innerWidth};
}
"""


def test_no_table_overflows_the_page_and_headers_are_words(browser_page, state):
    """Issue 29: every table sits in its own horizontally scrolling box inside the column (fitting it, or scrolling
    inside it), the page never scrolls sideways, and no header shows a snake_case name (math excepted)."""
    page, _, _ = browser_page
    measured = page.evaluate(TABLE_WIDTHS_JS)
    tables = measured["tables"]
    widest = max(tables, key=lambda t: t["table"])
    print(f"widest table {widest['table']} px in a {widest['wrap']} px box: {widest['head']}")
    assert len(tables) >= 10 and all(t["wrapped"] and t["scrolls"] and t["inColumn"] for t in tables)
    assert all(t["table"] <= t["wrap"] or t["scrolls"] for t in tables)
    assert measured["body"] <= measured["viewport"]
    assert [header for header in state["headers"] if "_" in header] == []


def test_missing_chromium_skips_with_the_reason(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(pytest.skip.Exception, match="apt-get install -y chromium"):
        chromium_path()


def test_failed_playwright_install_skips_with_the_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "playwright.sync_api", None)  # makes the import fail
    failed = subprocess.CompletedProcess([], 1, "", "ERROR: No matching distribution found for playwright")
    monkeypatch.setattr(sys.modules[__name__], "_run", lambda cmd: failed)
    with pytest.raises(pytest.skip.Exception, match="No matching distribution"):
        sync_playwright()
