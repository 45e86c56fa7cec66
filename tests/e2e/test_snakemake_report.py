"""Issue 29: `snakemake --report` on a finished tiny run carries the HTML report, the verdict table and every figure,
each with a caption of its own, and Snakemake prints no warning while building it."""

from __future__ import annotations

import csv
import json
import zipfile
from pathlib import Path

import pytest
from conftest import snakemake
from helpers import ROOT, receipt_problems

pytestmark = pytest.mark.e2e


def snakemake_results(report_html: str) -> dict[str, dict]:
    """The `results` object of Snakemake's report page: each registered file with its name, caption and labels."""
    marker = "var results = "
    start = report_html.index(marker, report_html.index('<script id="results">')) + len(marker)
    return json.JSONDecoder().raw_decode(report_html[start:])[0]


@pytest.fixture(scope="module")
def report_zip(tiny_run, tmp_path_factory) -> tuple[zipfile.ZipFile, str, Path]:
    """(the zip, Snakemake's output, the run) of `snakemake --report` on the finished tiny run (a few seconds)."""
    out = tmp_path_factory.mktemp("snakemake_report") / "report.zip"
    result = snakemake(tiny_run, "--report", str(out), timeout=300)
    return zipfile.ZipFile(out), result.stdout + result.stderr, tiny_run


def test_the_zip_carries_the_report_the_verdicts_and_every_figure(report_zip):
    archive, _, run = report_zip
    names = {Path(name).name for name in archive.namelist()}
    figures = {path.name for path in (run / "results" / "report" / "figures").glob("*.png")}
    assert {"index.html", "verdicts.csv", "report.html"} <= names and len(figures) >= 6 and figures <= names
    verdicts = next(name for name in archive.namelist() if name.endswith("/verdicts.csv"))
    rows = list(csv.DictReader(archive.read(verdicts).decode().splitlines()))
    checks = json.loads((run / "results" / "report" / "checks.json").read_text())["checks"]
    assert [(row["claim"], row["verdict"]) for row in rows] == [(c["id"], c["verdict"]) for c in checks]
    html = next(name for name in archive.namelist() if name.endswith("/index.html"))
    assert archive.read(html) == (run / "results" / "report" / "index.html").read_bytes()


def test_each_figure_has_a_caption_of_its_own(report_zip):
    archive, _, _ = report_zip
    page = next(name for name in archive.namelist() if name.count("/") == 1 and name.endswith("/report.html"))
    results = snakemake_results(archive.read(page).decode())
    figures = {entry["name"]: entry for entry in results.values() if entry["name"].endswith(".png")}
    captions = [entry["caption"] for entry in figures.values()]
    assert len(figures) >= 6 and len(set(captions)) == len(captions)  # one caption per figure, none shared
    for name, entry in figures.items():
        assert name in entry["caption"] and "Figure</strong> <tt" not in entry["caption"], name  # no fallback text
        assert entry["labels"] == {"figure": name.removesuffix(".png")}
    assert "Training curves, experiment" in figures["training_curves_qf.png"]["caption"]
    others = [entry for entry in results.values() if not entry["name"].endswith(".png")]
    assert {entry["name"] for entry in others} == {"index.html", "verdicts.csv"}
    assert all(entry["caption"] for entry in others)


def test_snakemake_prints_no_warning(report_zip):
    _, output, _ = report_zip
    assert "Report created" in output
    assert "never awaited" not in output and "Warning" not in output, output[-2000:]


def test_the_receipts_of_the_tiny_report_are_typeset(tiny_run):
    """Every receipt of the tiny run's checks.json writes its formulas as math, truth values and lists in words."""
    checks = json.loads((tiny_run / "results" / "report" / "checks.json").read_text())["checks"]
    assert [problem for check in checks for problem in receipt_problems(check)] == []


def test_results_of_another_config_are_not_packed(tiny_run, tmp_path):
    """Issue 39: `snakemake --report` packed results made with other settings (an earlier `--set` run) without a
    word; it now refuses, naming the jobs, before it packs anything."""
    import yaml

    config = yaml.safe_load((ROOT / "config" / "test.yaml").read_text())
    config["experiments"]["qf"]["train"]["lr"] *= 2
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump(config))
    out = tmp_path / "report.zip"
    result = snakemake(tiny_run, "--report", str(out), config=other, check=False, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode != 0 and not out.exists() and "Traceback" not in output
    assert "assocmem: the results are not those of this config and checkout" in output
    assert "results/qf/train/tiny/pct100 was made with other settings" in output
