"""assocmem.runhooks and assocmem.report.swap: the workflow's start and end in its main process (issue 39)."""

from __future__ import annotations

import io
import os
import signal
import time

import pytest

from assocmem import runhooks
from assocmem.report.swap import keep_copy, previous_copy, put_back, swapped_in

RERUN = "snakemake --cores all --configfile my.yaml"


def test_the_first_ctrl_c_stops_the_run_and_a_second_says_it_is_stopping(capsys) -> None:
    """A second Ctrl-C printed Snakemake's "Cannot close a running event loop" traceback."""
    interrupts = runhooks.Interrupts(RERUN)
    interrupts.workflow_read = True
    with pytest.raises(KeyboardInterrupt):
        interrupts(signal.SIGINT, None)
    assert interrupts.seen
    interrupts(signal.SIGINT, None)  # swallowed
    assert capsys.readouterr().err.strip() == (f"assocmem: stopping already: the running jobs are being cancelled "
                                               f"(`kill -9 {os.getpid()}` stops at once, and then `{RERUN}` resumes)")


def test_an_interrupted_run_ends_with_one_line_and_no_false_hints() -> None:
    """SIGINT to snakemake alone printed "a job failed ... names the file or config key" and "run --unlock"."""
    interrupted = runhooks.end_message(True, RERUN, "results").strip()
    assert interrupted.startswith("assocmem: interrupted (Ctrl-C)") and f"`{RERUN}` resumes" in interrupted
    assert "\n" not in interrupted and "failed" not in interrupted and "unlock" not in interrupted
    failed = runhooks.end_message(False, RERUN, "out")
    assert "a job failed" in failed and f"rerun `{RERUN}`" in failed and "out/logs/" in failed
    assert "unlock" not in failed


def test_the_readme_has_the_section_the_failure_footer_names() -> None:
    """The footer pointed to a README section that did not exist."""
    from helpers import ROOT

    section = runhooks.end_message(False, RERUN, "results").split("README.md, '")[1].split("'")[0]
    assert f"### {section}\n" in (ROOT / "README.md").read_text()


def test_a_failed_shell_command_is_not_printed_a_second_time(monkeypatch) -> None:
    import subprocess

    import snakemake.executors.local as local
    from snakemake.exceptions import RuleException

    printed = []
    monkeypatch.setattr(local, "print_exception", lambda ex, *args, **kwargs: printed.append(ex))
    assert runhooks.print_job_command_once() and runhooks.print_job_command_once()  # once, however often called
    failed = RuleException(f"CalledProcessError in file x, line 1:\n{subprocess.CalledProcessError(2, 'cmd')}")
    local.print_exception(failed)
    other = RuleException("NameError in file x, line 1: name 'y' is not defined")
    local.print_exception(other)
    assert printed == [other]


def _glued(fix: bool) -> list[str]:
    """Lines read from a pipe written as Snakemake's handler writes (a message, then its newline) through a stream
    built as Python builds stderr where PYTHONUNBUFFERED is set (unbuffered file, write-through text layer), with a
    job's status line written to the same pipe, as ``ASSOCMEM_STATUS_FD`` does, between the two writes."""
    read_end, write_end = os.pipe()
    stream = io.TextIOWrapper(io.FileIO(write_end, "w"), write_through=True)
    if fix:
        assert runhooks.whole_lines(stream)
    stream.write("Select jobs to execute...")
    os.write(write_end, b"assocmem: subsets: pct10: the first 10% of the training split in 0.1 s\n")
    stream.write("\n")
    stream.flush()
    stream.close()
    with io.FileIO(read_end) as pipe:
        return pipe.read().decode().splitlines()


def test_a_jobs_status_line_is_never_glued_into_snakemakes_line() -> None:
    assert _glued(fix=False)[0] == "Select jobs to execute...assocmem: subsets: pct10: the first 10% of the training " \
                                   "split in 0.1 s"  # the race the CI met, made certain
    assert _glued(fix=True) == ["assocmem: subsets: pct10: the first 10% of the training split in 0.1 s",
                                "Select jobs to execute..."]
    assert not runhooks.whole_lines(object())  # a stream that cannot be reconfigured is left as it is


def write_report(directory, text: str) -> None:
    (directory / "figures").mkdir(parents=True, exist_ok=True)
    (directory / "index.html").write_text(text)
    (directory / "figures" / "a.png").write_text(text)


def test_the_report_is_swapped_in_whole_or_not_at_all(tmp_path) -> None:
    out = tmp_path / "results" / "report"
    write_report(out, "old")
    with pytest.raises(KeyboardInterrupt), swapped_in(out) as stage:
        write_report(stage, "half")
        raise KeyboardInterrupt
    assert (out / "index.html").read_text() == "old" and sorted(p.name for p in out.parent.iterdir()) == ["report"]
    killed = out.parent / ".report.abc123.tmp"  # what a build killed with SIGKILL leaves
    write_report(killed, "half")
    with swapped_in(out) as stage:
        write_report(stage, "new")
    assert (out / "figures" / "a.png").read_text() == "new" and list(out.parent.iterdir()) == [out]


def test_a_report_job_that_did_not_finish_leaves_the_previous_report_dated_1970(tmp_path) -> None:
    """Ctrl-C during the report deleted the previous one (Snakemake removes a job's outputs when it starts it)."""
    results = tmp_path / "results"
    out = results / "report"
    write_report(out, "previous")
    keep_copy(out)
    assert (previous_copy(out) / "index.html").read_text() == "previous"
    assert previous_copy(out) == results / ".cache" / "report-previous"  # apart from the science (tests/conftest.py)
    for path in (out / "index.html", out / "figures" / "a.png"):
        path.unlink()  # what Snakemake does to the outputs of the report job it starts, and of one that fails
    assert put_back(out)
    assert (out / "index.html").read_text() == "previous" and (out / "figures" / "a.png").is_file()
    assert {path.stat().st_mtime for path in [out, *out.rglob("*")]} == {0}  # the next run rebuilds it
    assert not put_back(out)  # a report is there: nothing to do


def test_report_of_results_made_with_other_settings_is_refused(tmp_path) -> None:
    """`snakemake --report` packed results made with other settings (an earlier `--set` run) without a word."""
    from assocmem import stamps

    stamp = tmp_path / "results" / "qf" / "data" / "tokens" / "provenance.json"
    stamp.parent.mkdir(parents=True)
    (stamp.parent / "meta.json").write_text("{}")
    stamps.write_stamp(stamp, "tokenize", {"a": 1}, "c" * 16, [stamp.parent / "meta.json"])
    expect = stamps.expectation(stamp, "tokenize", {"a": 1}, "c" * 16, ["meta.json"])
    assert runhooks.report_mismatches({str(stamp): expect}) == []
    other = stamps.expectation(stamp, "tokenize", {"a": 2}, "c" * 16, ["meta.json"])
    missing = str(tmp_path / "results" / "qf" / "data" / "subsets" / "pct10" / "provenance.json")
    problems = runhooks.report_mismatches({str(stamp): other, missing: other})
    assert problems == [f"{tmp_path}/results/qf/data/subsets/pct10 has not run (or did not finish)",
                        f"{stamp.parent} was made with other settings (the ones in {stamp})"]
    refusal = runhooks.refuse_foreign_report(problems)
    assert refusal.startswith("assocmem: the results are not those of this config") and "\n" not in refusal
    assert runhooks.is_report_command(["snakemake", "--report", "r.zip"]) and not runhooks.is_report_command(["-n"])


def test_jobs_made_with_other_settings_or_code_get_a_new_marker_the_others_one_from_1970(tmp_path) -> None:
    """Snakemake's rerun triggers read its records in .snakemake/metadata, keyed by path: a results directory copied
    from another run, or one whose records are lost, looked up to date. Every stamped job reads a marker as one more
    input; a foreign job's marker gets new bytes and the time now (Snakemake ignores a newer input whose checksum it
    recorded), the others' stay dated 1970."""
    from assocmem import layout, stamps

    results = str(tmp_path / "results")
    stamp = tmp_path / "results" / "qf" / "data" / "tokens" / "provenance.json"
    stamp.parent.mkdir(parents=True)
    (stamp.parent / "meta.json").write_text("{}")
    stamps.write_stamp(stamp, "tokenize", {"a": 1}, "c" * 16, [stamp.parent / "meta.json"])
    same = stamps.expectation(stamp, "tokenize", {"a": 1}, "c" * 16, [])
    missing = str(tmp_path / "results" / "qf" / "data" / "subsets" / "pct10" / "provenance.json")
    assert runhooks.foreign_jobs({str(stamp): same, missing: same}) == {}
    other_code = stamps.expectation(stamp, "tokenize", {"a": 1}, "d" * 16, [])
    assert runhooks.foreign_jobs({str(stamp): other_code}) == {str(stamp): "code"}
    other_settings = stamps.expectation(stamp, "tokenize", {"a": 2}, "d" * 16, [])
    foreign = runhooks.foreign_jobs({str(stamp): other_settings, missing: other_settings})
    assert foreign == {str(stamp): "settings"}  # a job that has not run is Snakemake's to run
    # another job's outputs copied here are refused by their readers (and listed by `assocmem verify`), not rerun
    moved = tmp_path / "results" / "qf" / "data" / "fresh" / "provenance.json"
    moved.parent.mkdir(parents=True)
    moved.write_bytes(stamp.read_bytes())
    elsewhere = stamps.expectation(moved, "generate_fresh", {"a": 2}, "d" * 16, [])
    assert runhooks.foreign_jobs({str(moved): elsewhere}) == {}
    assert runhooks.report_mismatches({str(moved): elsewhere}) == [
        f"{moved.parent} holds the outputs of another job ({moved})"]

    marker = tmp_path / runhooks.foreign_marker(results, str(stamp))
    assert marker.parent == tmp_path / "results" / ".cache" / "foreign" and layout.match(marker) is None
    runhooks.mark_foreign(results, [str(stamp), missing], {})
    markers = sorted((tmp_path / "results" / ".cache" / "foreign").iterdir())
    assert len(markers) == 2 and {m.stat().st_mtime_ns for m in markers} == {0}
    before = time.time_ns()
    runhooks.mark_foreign(results, [str(stamp), missing], foreign)
    first = marker.read_bytes()
    assert marker.stat().st_mtime_ns >= before - 10**9 and b"settings" in first
    runhooks.mark_foreign(results, [str(stamp)], foreign)
    assert marker.read_bytes() != first  # foreign again (after a failed rerun): new bytes again
    runhooks.mark_foreign(results, [str(stamp)], {})
    assert marker.stat().st_mtime_ns == 0  # rerun since: older than any output again
    message = runhooks.foreign_message(foreign)
    assert message.startswith("assocmem: 1 job of this config holds results made with other settings or code")
    assert f"{stamp.parent} (other settings)" in message and "\n" not in message


def test_ctrl_c_while_the_workflow_is_read_is_one_line(capsys) -> None:
    """A Ctrl-C while Snakemake read the Snakefile printed the traceback of wherever it was."""
    with pytest.raises(SystemExit) as stop:
        runhooks.Interrupts(RERUN)(signal.SIGINT, None)
    assert stop.value.code == 130
    assert capsys.readouterr().err.strip() == (f"assocmem: interrupted (Ctrl-C) while reading the workflow: nothing "
                                               f"ran; `{RERUN}` starts it again.")
