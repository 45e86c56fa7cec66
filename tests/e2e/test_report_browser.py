"""The report in a real browser: headless Chromium opens the tiny pipeline's index.html.

Checks what a reader sees: KaTeX typeset every formula (no raw ``$`` or TeX commands left in text nodes, no
KaTeX error boxes, its fonts loaded from the page itself), every table-of-contents and summary link lands on
an element, the table of contents stays on screen while scrolling, every figure decoded, and the page made no
network request. Screenshots go to tests/artifacts/ (kept out of git by a .gitignore the test writes there).

Set-up: Debian's ``chromium`` (installed with apt-get when missing and running as root) driven by the
``playwright`` Python package (pip-installed when missing; its own browser download is never used). The test
skips with the reason when either cannot be had. ASSOCMEM_REPORT_DIR=<dir with index.html> reuses a finished
report instead of running the tiny pipeline (about a minute).
"""

from __future__ import annotations

import importlib
import os
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
    summaryLinks: hrefs('#summary a[href^="#claim-"]'),
    images: [...document.images].map(i => ({alt: i.alt.slice(0, 80), complete: i.complete, width: i.naturalWidth})),
    katexFonts: [...document.fonts].filter(f => f.family.includes('KaTeX')).map(f => [f.family, f.status]),
    headings: [...document.querySelectorAll('h1, h2')].map(h => h.textContent),
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
