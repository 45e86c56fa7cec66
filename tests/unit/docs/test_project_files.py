"""The files a repository's visitors and tools look for: LICENSE, CITATION.cff naming the project and the paper
(as the paper itself names its authors), and the Snakemake workflow catalog's usage file."""

from __future__ import annotations

import pytest
import yaml
from helpers import ROOT, SHARED

CITATION = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
PAPER = CITATION["preferred-citation"]
AUTHORS = [("Xueyan", "Niu"), ("Bo", "Bai"), ("Lei", "Deng"), ("Wei", "Han")]


def test_the_license_is_mit() -> None:
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License") and "Copyright (c) 2026 assocmem contributors" in text


def test_citation_cff_names_the_project_and_the_paper() -> None:
    assert CITATION["cff-version"] == "1.2.0"
    assert {"message", "title", "authors", "type", "license", "version"} <= CITATION.keys()
    assert CITATION["license"] == "MIT" and CITATION["authors"] == [{"name": "assocmem contributors"}]
    assert PAPER["title"] == ("Beyond Scaling Laws: Understanding Transformer Performance with Associative "
                              "Memory")
    assert [(a["given-names"], a["family-names"]) for a in PAPER["authors"]] == AUTHORS
    assert PAPER["year"] == 2024
    assert {"type": "other", "value": "arXiv:2405.08707", "description": "arXiv identifier"} in PAPER["identifiers"]
    assert PAPER["url"] == "https://arxiv.org/abs/2405.08707"


def test_the_paper_names_these_authors_in_this_order() -> None:
    source = SHARED / "paper" / "niu2024_latex_source.txt"
    if not source.is_file():
        pytest.skip(f"{source} is not there (shared material beside the checkout)")
    head = source.read_text(encoding="utf-8")[:1000]
    assert head.startswith(PAPER["title"])
    positions = [head.index(f"{given} {family}") for given, family in AUTHORS]
    assert positions == sorted(positions)


def test_the_workflow_catalog_file_has_the_catalogs_keys() -> None:
    usage = yaml.safe_load((ROOT / ".snakemake-workflow-catalog.yml").read_text(encoding="utf-8"))["usage"]
    assert {"desc", "flags"} <= usage["mandatory-flags"].keys()
    deployment = usage["software-stack-deployment"]
    assert {"conda", "apptainer", "apptainer+conda", "report"} <= deployment.keys()
    assert all(isinstance(value, bool) for value in deployment.values())
