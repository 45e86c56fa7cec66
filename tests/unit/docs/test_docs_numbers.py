"""Every measured number the documentation quotes is in a record of docs/results/ (issue 38, item 7).

Checked: README.md's paragraphs that name a record, docs/results.md's section on the default run, and every
**Measured** paragraph of docs/derivations.md (which must name its record). A decimal number there must equal a
number of the block's record at the digits printed (a block that names a claim in backticks, `loss_floor`, is read
against that claim's numbers); its stage lines count too (the timings they print). A constant of the paper or of the
theory that such a block needs is listed in an HTML comment in the block, ``<!-- constants: 15.49 1.29 -->``, so it
is marked, not silently skipped. Whatever a re-recorded run says, these tests compare the docs with it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from functools import cache

import pandas as pd
import pytest
from helpers import ROOT

from assocmem.report.claims.loss import loss_floor

RECORDS = ROOT / "docs" / "results"
DECIMAL = re.compile(r"(?<![\w.])-?\d+\.\d+(?![\w.])")
QUOTED = re.compile(r"(?<![\w.])(-?\d+\.\d+)(M(?![\w.])|(?![\w.])(?:\s?%)?)")  # 30.0M: millions
RECORD_NAME = re.compile(r"docs/results/(\w+)\.json")
CONSTANTS = re.compile(r"<!--\s*constants:([^>]*)-->")
CODE = re.compile(r"`[^`]*`|\$[^$]*\$")


def _numbers(value) -> Iterator[float]:
    if isinstance(value, dict):
        for item in value.values():
            yield from _numbers(item)
    elif isinstance(value, list):
        for item in value:
            yield from _numbers(item)
    elif isinstance(value, str):
        yield from (float(text) for text in DECIMAL.findall(value))
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield float(value)


@cache
def _record(name: str) -> dict:
    return json.loads((RECORDS / f"{name}.json").read_text())


def _values(names: list[str], block: str) -> list[float]:
    """The numbers a block may quote: its records' (restricted to the claims it names, where it names any)."""
    values = []
    for name in names:
        record = _record(name)
        claims = [claim for claim in re.findall(r"`(\w+)`", block) if claim in record.get("numbers", {})]
        if claims:
            values += [v for claim in claims for v in _numbers(record["numbers"][claim])]
            values += [v for v in _numbers({k: v for k, v in record.items() if k != "numbers"})]
        else:
            values += list(_numbers(record))
    return values


def _quoted(value: float, text: str, unit: str = "") -> bool:
    """Is ``text`` ``value`` at the digits printed, in the unit after it ('%': a percentage, 'M': millions)?"""
    digits = len(text.split(".")[1])
    scale = {"": 1, "%": 100, "M": 1e-6}[unit.strip()]
    return f"{abs(value) * scale:.{digits}f}" == text.lstrip("-")


def unrecorded(block: str, names: list[str]) -> list[str]:
    """The decimal numbers of ``block`` (code and formulas aside) that no record it names holds, nor its constants."""
    constants = {text for group in CONSTANTS.findall(block) for text in group.split()}
    prose = CODE.sub(" ", CONSTANTS.sub(" ", block))
    values = _values(names, block)
    return [text + unit for text, unit in QUOTED.findall(prose)
            if text not in constants and not any(_quoted(value, text, unit) for value in values)]


def _paragraphs(text: str) -> list[str]:
    return [block for block in re.split(r"\n\s*\n", text) if block.strip()]


def _section(title: str) -> str:
    text = (ROOT / "docs" / "results.md").read_text()
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 3)
    return text[start:] if end < 0 else text[start:end]


def _default_section() -> str:
    return _section("The default run")


def test_unrecorded_finds_a_number_no_record_holds() -> None:
    recorded = next(v for v in _numbers(_record("default")["numbers"]["loss_floor"]) if 0.5 < v < 1.5 and v % 1)
    block = (f"L2 reaches {recorded:.4f} and 0.1234 (record `docs/results/default.json`, `loss_floor`) "
             "<!-- constants: 7.74 -->")
    assert unrecorded(block, ["default"]) == ["0.1234"]
    assert unrecorded("`loss_floor`: r* = 7.74, `0.5` in code", ["default"]) == ["7.74"]
    assert unrecorded("`memorisation`: 79.5% of grids, 12.3 %", ["default"]) == ["12.3 %"]
    steps = max(row["steps"] for row in _record("memorisation_decisive_power")["cost"]["by_truth"])
    assert unrecorded(f"{steps / 1e6:.1f}M steps, 12.3M more", ["memorisation_decisive_power"]) == ["12.3M"]


def test_readme_quotes_only_recorded_numbers() -> None:
    for block in _paragraphs((ROOT / "README.md").read_text()):
        names = RECORD_NAME.findall(block)
        if names:
            assert unrecorded(block, names) == [], block[:200]


def test_results_md_default_section_quotes_only_recorded_numbers() -> None:
    for block in _paragraphs(_default_section()):
        names = ["default", *RECORD_NAME.findall(block)]
        for line in block.splitlines() if block.startswith("|") else [block]:
            assert unrecorded(line, names + RECORD_NAME.findall(line)) == [], line[:200]


def test_results_md_radius_design_quotes_only_its_power_record() -> None:
    """The radius design's section (issue 38): every number from docs/results/radius_power.json or a record it
    names."""
    blocks = _paragraphs(_section("The radius test's deciding design"))
    assert any("docs/results/radius_power.json" in block for block in blocks)
    for block in blocks:
        assert unrecorded(block, ["radius_power", *RECORD_NAME.findall(block)]) == [], block[:200]


def test_derivations_measured_paragraphs_quote_their_record() -> None:
    measured = [block for block in _paragraphs((ROOT / "docs" / "derivations.md").read_text())
                if block.lstrip().startswith("**Measured**")]
    assert measured
    for block in measured:
        names = RECORD_NAME.findall(block)
        assert names, f"a Measured paragraph of docs/derivations.md names no record: {block[:200]}"
        assert unrecorded(block, names) == [], block[:200]


def test_the_recorded_default_run_breaks_the_printed_bound() -> None:
    """Issue 38, item 5: the default's loss-floor row gets a verdict from its own runs. Today's rule on the recorded
    full-data numbers: a run whose fresh-sample interval lies wholly below 1 breaks 1 < L, converged or not."""
    numbers = _record("default")["numbers"]["loss_floor"]
    runs = sorted({key.rsplit(".", 1)[0] for key in numbers if key.endswith("pct100.test_ce")})
    final = pd.DataFrame([{"run": run, "fraction": 1.0, "train_ce": numbers[f"{run}.train_ce"],
                           "test_ce": numbers[f"{run}.test_ce"], "test_ce_se": numbers[f"{run}.test_ce_se"],
                           "usable": bool(numbers[f"{run}.usable"]), "status": "not converged"} for run in runs])
    row = loss_floor(final, numbers["floor"], floor_low=numbers["floor_low"])
    low = {run: numbers[f"{run}.test_ce"] - 1.96 * numbers[f"{run}.test_ce_se"] for run in runs}
    high = {run: numbers[f"{run}.test_ce"] + 1.96 * numbers[f"{run}.test_ce_se"] for run in runs}
    if any(value < 1 for value in high.values()):  # a run wholly below 1: the bound is broken, converged or not
        below_floor = any(high[run] < numbers["floor_low"] for run in runs)
        assert row["verdict"] == ("refuted" if below_floor else "corrected"), row["evidence"]
    else:
        assert row["verdict"] not in {"corrected", "refuted"}, (low, high)


@pytest.mark.parametrize("phrase", ["0.0069", "14,000", "3ea254d", "b = 0.06", "1.05 [1.04", "0.9936"])
def test_numbers_the_records_never_held_are_gone(phrase: str) -> None:
    """Issue 38: quoted numbers that were in no record (or disagreed with one) are pointed at a record or removed."""
    for doc in ("README.md", "docs/results.md", "docs/derivations.md"):
        assert phrase not in (ROOT / doc).read_text(), (doc, phrase)
