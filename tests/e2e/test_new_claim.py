"""Adding a claim as a newcomer would: one new module in assocmem.report.claims and nothing else. The report of a
finished run then carries it in checks.json, the summary table, its own section and the errata."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
from helpers import ROOT

from assocmem.config import load_config, load_schema
from assocmem.report import claims
from assocmem.report.build import build_report
from assocmem.report.claims import registry

pytestmark = pytest.mark.e2e

NEW_CLAIM = textwrap.dedent('''
    """A newcomer's claim: every trained model saw more tokens than it has parameters (a toy rule for this test)."""

    from assocmem.report.claims.base import check_row
    from assocmem.report.claims.registry import Claim, Untestable, register
    from assocmem.report.quotes import OVERFIT


    def tokens_per_parameter(ratios: dict[str, float]) -> dict:
        holds = all(ratio > 1 for ratio in ratios.values())
        return check_row("newcomer", "D / N of every trained run.", {f"{run}.d_over_n": r for run, r in ratios.items()},
                         "reproduced" if holds else "corrected", "The ratio of tokens to parameters per run.", "data",
                         ours_tex=r"$D/N$ per run.", limits="Only the runs of this configuration.")


    def evaluate(evidence):
        runs = evidence.trained_runs
        if not runs:
            return Untestable("nothing", "No trained run.", "Needs trained runs.")
        return tokens_per_parameter({run.label: run.summary["subset"]["n_tokens"] / run.summary["n_params"]
                                     for run in runs})


    register(Claim("newcomer", "Newcomer", r"$D > N$ for every run", "Every run sees more tokens than parameters.",
                   r"$D > N$.", OVERFIT, order=125, evaluate=evaluate))
''')


@pytest.fixture
def newcomer_module(tmp_path, monkeypatch):
    """The new module, in a directory added to the claims package's search path; removed afterwards."""
    (tmp_path / "newcomer_claim.py").write_text(NEW_CLAIM)
    monkeypatch.setattr(claims, "__path__", [*claims.__path__, str(tmp_path)])
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    yield
    sys.modules.pop("assocmem.report.claims.newcomer_claim", None)


def test_a_new_claim_module_is_all_a_report_needs(newcomer_module, tiny_run, tmp_path):
    config = load_config(ROOT / "config" / "test.yaml", load_schema(ROOT / "workflow" / "schemas" /
                                                                      "config.schema.yaml"))
    out = tmp_path / "report"
    build_report({"config": config, "report": config["report"]}, tiny_run / "results", out)
    rows = json.loads((out / "checks.json").read_text())["checks"]
    ids = [row["id"] for row in rows]
    assert ids.index("overfit") < ids.index("newcomer") < ids.index("literature")  # its order: 125
    row = rows[ids.index("newcomer")]
    assert row["claim"] == "Every run sees more tokens than parameters." and row["quote"][0]["where"]
    assert {"tiny/pct100.d_over_n", "tiny/pct10.d_over_n"} <= set(row["numbers"])
    markdown, html = (out / "report.md").read_text(), (out / "index.html").read_text()
    assert "[Newcomer](#claim-newcomer)" in markdown and 'id="claim-newcomer"' in html
    assert row["verdict"] == "corrected"  # the 10% subset holds ~5,000 tokens for ~21,500 parameters
    assert "[Newcomer](#claim-newcomer)" in markdown.split('<a id="errata">')[1]
