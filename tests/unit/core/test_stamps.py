"""Job provenance stamps (assocmem.stamps) and the layout functions that name a job and its stamp."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from assocmem import layout, stamps
from assocmem.errors import AssocmemError

PARAMS = {"neighbours": {"k": 5}, "seed": 7}
CODE = "ab" * 8


def finished_job(results: Path, subset: str = "pct100", params: dict | None = None) -> Path:
    """A neighbours job's outputs and its stamp under ``results``."""
    out = results / "qf" / "neighbours" / "tiny" / subset
    out.mkdir(parents=True)
    (out / "summary.csv").write_text("layer,mean\n1,0.5\n2,0.7\n")
    (out / "radius.json").write_text("{}\n")
    stamp = out / "provenance.json"
    stamps.write_stamp(stamp, "neighbours", params or PARAMS, CODE, [out / "summary.csv", out / "radius.json", stamp])
    return stamp


def expect(stamp: Path, params: dict | None = None, code: str = CODE, files=("summary.csv",)) -> dict:
    return stamps.expectation(stamp, "neighbours", params or PARAMS, code, files)


def test_layout_matches_an_artifact_and_names_its_job_and_stamp():
    name, fields, results = layout.match("/x/my results/qf/activations/L2.s1/pct0.1/train.npy")
    assert (name, fields, results) == ("acts_train", {"exp": "qf", "model": "L2.s1", "subset": "pct0.1"},
                                       Path("/x/my results"))
    rule, stamp = layout.stamp_of("/x/r/qf/activations/gpt2/pretrained/meta.json")
    assert rule == "pretrained_activations" and stamp == Path("/x/r/qf/activations/gpt2/pretrained/provenance.json")
    assert layout.stamp_of("r/qf/data/floor.json") == ("data_audit", Path("r/qf/data/audit.provenance.json"))
    assert layout.job_id("train", "r/qf/train/L4/pct1/provenance.json") == "train qf/train/L4/pct1"
    assert layout.stamp_of("r/report/index.html") == ("report", Path("r/report/provenance.json"))
    assert layout.match("elsewhere/question.dev") is None
    # matched once per path (a Snakefile matches each artifact several times): a caller's edit is its own
    fields["exp"] = "edited"
    assert layout.match(Path("/x/my results/qf/activations/L2.s1/pct0.1/train.npy"))[1]["exp"] == "qf"


def test_every_stamped_rule_has_a_stamp_its_outputs_map_back_to():
    for rule, stamp_name in layout.STAMPS.items():
        fields = {"exp": "qf", "model": "L2", "subset": "pretrained" if rule == "pretrained_activations" else "pct1"}
        stamp = layout.path("r", stamp_name, **fields)
        assert layout.stamp_of(stamp) == (rule, stamp)


def test_a_finished_job_verifies(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # Snakemake's per-job setting: recorded, not a setting of the job
    stamp = finished_job(tmp_path)
    stamps.verify(stamp, expect(stamp, files=("summary.csv", "radius.json")))
    assert stamps.scan(tmp_path) == []
    record = json.loads(stamp.read_text())
    assert record["job"] == "neighbours qf/neighbours/tiny/pct100" and set(record["files"]) == {
        "summary.csv", "radius.json"}
    assert record["threads"] == 3 and "threads" not in record["params"]


@pytest.mark.parametrize(("change", "message"), [
    (lambda out: (out / "summary.csv").write_text("layer,mean\n1,0.5\n"), "is not the file job"),
    (lambda out: (out / "summary.csv").unlink(), "missing file"),
    (lambda out: (out / "provenance.json").unlink(), "missing provenance stamp"),
    (lambda out: (out / "provenance.json").write_text("{not json"), "corrupt JSON"),
])
def test_a_changed_output_is_refused_naming_the_file(tmp_path, change, message):
    stamp = finished_job(tmp_path)
    change(stamp.parent)
    with pytest.raises(AssocmemError, match=message):
        stamps.verify(stamp, expect(stamp))


def test_a_byte_flip_that_keeps_size_and_time_is_caught_by_the_consumer(tmp_path):
    stamp = finished_job(tmp_path)
    table = stamp.parent / "summary.csv"
    info = table.stat()
    table.write_text(table.read_text().replace("0.7", "0.9"))
    os.utime(table, ns=(info.st_atime_ns, info.st_mtime_ns))
    assert stamps.scan(tmp_path) == []  # the cheap scan trusts an unchanged size and time
    with pytest.raises(AssocmemError, match="sha256 differs"):
        stamps.verify(stamp, expect(stamp))  # the job that reads it hashes it


def test_a_copy_from_another_job_another_config_or_other_code_is_refused(tmp_path):
    stamp = finished_job(tmp_path)
    other = finished_job(tmp_path, "pct10", params={"neighbours": {"k": 10}, "seed": 7})
    for name in ("summary.csv", "radius.json", "provenance.json"):
        (stamp.parent / name).write_bytes((other.parent / name).read_bytes())
    with pytest.raises(AssocmemError, match="holds the outputs of job 'neighbours qf/neighbours/tiny/pct10'"):
        stamps.verify(stamp, expect(stamp))
    with pytest.raises(AssocmemError, match="other settings than the config gives"):
        stamps.verify(other, expect(other))
    with pytest.raises(AssocmemError, match="other code of stage neighbours"):
        stamps.verify(other, expect(other, params={"neighbours": {"k": 10}, "seed": 7}, code="cd" * 8))


def test_a_swap_keeping_times_is_found_by_the_scan(tmp_path):
    first, second = finished_job(tmp_path), finished_job(tmp_path, "pct10")
    (second.parent / "summary.csv").write_text("layer,mean\n1,0.1\n2,0.2\n")
    stamps.write_stamp(second, "neighbours", PARAMS, CODE, [second.parent / "summary.csv",
                                                            second.parent / "radius.json"])
    held = tmp_path / "held"
    os.replace(first.parent / "summary.csv", held)
    os.replace(second.parent / "summary.csv", first.parent / "summary.csv")
    os.replace(held, second.parent / "summary.csv")
    problems = stamps.scan(tmp_path)
    assert len(problems) == 2 and all("is not the file job" in problem for problem in problems)


def test_a_consumer_sees_a_stale_upstream(tmp_path):
    upstream = finished_job(tmp_path)
    out = tmp_path / "qf" / "eval" / "tiny" / "pct100"
    out.mkdir(parents=True)
    (out / "eval.json").write_text("{}")
    stamp = out / "provenance.json"
    stamps.write_stamp(stamp, "evaluate", {}, CODE, [out / "eval.json"], upstream=[upstream])
    consumer = stamps.expectation(stamp, "evaluate", {}, CODE, ["eval.json"])
    stamps.verify(stamp, consumer)
    stamps.write_stamp(upstream, "neighbours", {"changed": True}, CODE, [upstream.parent / "summary.csv"])
    with pytest.raises(AssocmemError, match="was built from other outputs of"):
        stamps.verify(stamp, consumer)


def test_rewriting_an_identical_upstream_is_not_stale(tmp_path):
    """The chain compares content, not file times: an upstream rerun that wrote the same bytes is the same."""
    upstream = finished_job(tmp_path)
    before = stamps.content_digest(json.loads(upstream.read_text()))
    os.utime(upstream.parent / "summary.csv", ns=(1, 1))
    stamps.write_stamp(upstream, "neighbours", PARAMS, CODE, [upstream.parent / "summary.csv",
                                                              upstream.parent / "radius.json"])
    assert stamps.content_digest(json.loads(upstream.read_text())) == before


@given(st.dictionaries(st.text(max_size=5), st.one_of(st.integers(), st.floats(allow_nan=False), st.text(max_size=5)),
                       max_size=6))
def test_the_settings_digest_ignores_key_order_and_survives_the_command_line(params):
    reordered = dict(reversed(list(params.items())))
    assert stamps.params_digest(params) == stamps.params_digest(reordered)
    assert stamps.params_digest(json.loads(json.dumps(params, sort_keys=True))) == stamps.params_digest(params)
