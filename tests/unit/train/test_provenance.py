"""assocmem.provenance: a model file knows which job wrote it, for which model and run, and that its weights are
the ones written."""

from __future__ import annotations

import pytest
import torch

from assocmem.errors import AssocmemError
from assocmem.io import write_json
from assocmem.model import DecoderLM, ModelConfig
from assocmem.provenance import check_provenance, stamp, weights_digest

SPEC = {"n_layer": 1, "d_model": 16, "n_head": 2, "max_len": 8}


def _payload(job: str = "qf/tiny/pct100", fingerprint: str = "f" * 64) -> dict:
    torch.manual_seed(0)
    model = DecoderLM(ModelConfig.from_dict(SPEC, vocab_size=11))
    return {"model": model.state_dict(), "config": model.cfg.to_dict(),
            "provenance": stamp(job, fingerprint, model)}


def test_a_model_file_of_the_expected_job_and_run_passes(tmp_path) -> None:
    write_json(tmp_path / "summary.json", {"fingerprint": "f" * 64})
    check_provenance(tmp_path / "best.pt", _payload(), {"job": "qf/tiny/pct100", "spec": SPEC})
    check_provenance(tmp_path / "best.pt", _payload(), None)


@pytest.mark.parametrize(("edit", "expect", "message"), [
    (lambda p: p["provenance"].update(job="qf/tiny/pct10"), None, None),
    (lambda p: p["provenance"].update(job="qf/tiny/pct10"), {}, "written by training job 'qf/tiny/pct10'"),
    (lambda p: p["config"].update(d_model=32), {}, "not the configured model qf/tiny/pct100: d_model = 32"),
    (lambda p: p["provenance"].update(fingerprint="0" * 64), {}, "does not come from the run recorded in"),
    (lambda p: p["model"][next(iter(p["model"]))].view(-1)[0].add_(1e-3), None, "fails its sha256 check"),
], ids=["another job, unchecked", "another job", "another architecture", "another run", "a changed weight"])
def test_a_model_file_from_elsewhere_is_refused_naming_it(tmp_path, edit, expect, message) -> None:
    write_json(tmp_path / "summary.json", {"fingerprint": "f" * 64})
    payload = _payload()
    payload["config"] = dict(payload["config"])
    edit(payload)
    expected = None if expect is None else {"job": "qf/tiny/pct100", "spec": SPEC}
    if message is None:
        check_provenance(tmp_path / "best.pt", payload, expected)
        return
    with pytest.raises(AssocmemError, match=message) as err:
        check_provenance(tmp_path / "best.pt", payload, expected)
    assert str(tmp_path / "best.pt") in str(err.value)


def test_the_weights_digest_sees_one_changed_element() -> None:
    weights = {"a": torch.zeros(4), "b": torch.ones(2, 2, dtype=torch.bfloat16)}
    before = weights_digest(weights)
    weights["b"][1, 1] = 2
    assert weights_digest(weights) != before and len(before) == 64
