"""``python -m assocmem.report.reanalyse``: which analysis a record gets and the commit its result names."""

from __future__ import annotations

from pathlib import Path

import pytest

from assocmem.checkout import record_commit
from assocmem.errors import AssocmemError
from assocmem.io import read_json, write_json
from assocmem.report import reanalyse


@pytest.fixture()
def calls(monkeypatch) -> list[tuple[str, dict]]:
    """The analyses main() asked for (their arguments), each answered at once instead of minutes of fits."""
    seen: list[tuple[str, dict]] = []

    def fake(kind: str):
        def run(record_file: Path, config: Path, **kwargs) -> dict:
            seen.append((kind, kwargs))
            return {"verdict": "not-testable", "reason": "stub", "commit": kwargs["commit"]}
        return run

    monkeypatch.setattr(reanalyse, "reanalyse", fake("memorisation"))
    monkeypatch.setattr(reanalyse, "reanalyse_scaling", fake("scaling"))
    return seen


def test_a_reanalysis_names_the_checkouts_commit_unless_told_another(tmp_path: Path, calls) -> None:
    record, out = tmp_path / "memorisation.json", tmp_path / "out.json"
    write_json(record, {"memorisation": {}})
    assert reanalyse.main([str(record), "--config", "c.yaml", "--out", str(out)]) == 0
    assert calls[-1] == ("memorisation", {"commit": record_commit(), "extra": ()})
    assert read_json(out)["commit"] == record_commit()
    assert reanalyse.main([str(record), "--config", "c.yaml", "--out", str(out), "--commit", "abc1234"]) == 0
    assert calls[-1][1]["commit"] == "abc1234" and read_json(out)["commit"] == "abc1234"


def test_a_scaling_record_gets_the_sweep_analysis_and_joins_no_other(tmp_path: Path, calls) -> None:
    record, out = tmp_path / "scaling.json", tmp_path / "out.json"
    write_json(record, {"sweep": {"cells": []}})
    assert reanalyse.main([str(record), "--config", "c.yaml", "--out", str(out)]) == 0
    assert calls == [("scaling", {"commit": record_commit()})]
    with pytest.raises(AssocmemError, match="--with joins memorisation grids only"):
        reanalyse.main([str(record), "--config", "c.yaml", "--out", str(out), "--with", str(record)])
