"""What the workflow's main process does at its start and end (workflow/rules/common.smk, the Snakefile's
``onstart`` / ``onerror``), kept here so that it is plain, tested Python (issue 39):

- Ctrl-C: the first SIGINT stops the run (Snakemake cancels its jobs on the KeyboardInterrupt); a second one while
  it stops prints a line instead of breaking Snakemake's clean-up with an event-loop traceback; the run then ends
  with one line saying it was interrupted and that the same command resumes (not the "a job failed" hints);
- a failing job's command is printed once;
- Snakemake's own lines reach stderr whole, so a job's status line never lands inside one (:func:`whole_lines`);
- a report job that failed or was interrupted leaves the previous report (``assocmem.report.swap``);
- the results directory's claim fails with one line (``assocmem.runlock``).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any


class Interrupts:
    """The main process's SIGINT handler; ``seen`` tells the end-of-run message that the run was interrupted."""

    def __init__(self, rerun: str) -> None:
        self.rerun = rerun
        self.seen = False
        self.workflow_read = False  # set at the end of the Snakefile: Snakemake handles a KeyboardInterrupt from then

    def __call__(self, signum: int, frame: Any) -> None:
        if self.seen:
            print(f"\nassocmem: stopping already: the running jobs are being cancelled (`kill -9 {os.getpid()}` "
                  f"stops at once, and then `{self.rerun}` resumes)", file=sys.stderr)
            return
        self.seen = True
        if not self.workflow_read:  # Snakemake would print the traceback of wherever the Snakefile was
            print(f"\nassocmem: interrupted (Ctrl-C) while reading the workflow: nothing ran; `{self.rerun}` starts "
                  "it again.", file=sys.stderr)
            raise SystemExit(130)
        raise KeyboardInterrupt

    def install(self) -> Interrupts:
        signal.signal(signal.SIGINT, self)
        return self


def end_message(interrupted: bool, rerun: str, results_dir: str) -> str:
    """onerror's last words: one line for a Ctrl-C, else what to do about the failed job."""
    if interrupted:
        return ("\nassocmem: interrupted (Ctrl-C): the run stopped and keeps what its jobs finished (nothing "
                f"half-written); `{rerun}` resumes from there.")
    return ("\nassocmem: a job failed. Its error is printed above (`assocmem: <stage>: error: ...`; the whole log is "
            f"under {results_dir}/logs/); the error names the file or config key at fault.\nFix that, then rerun "
            f"`{rerun}`: finished outputs are kept and half-written ones are redone. README.md, 'When something goes "
            "wrong', has more.")


def is_failed_command(ex: BaseException) -> bool:
    """Snakemake's report of a job whose shell command exited non-zero, which repeats the whole command."""
    from snakemake.exceptions import RuleException

    text = str(ex)
    return isinstance(ex, RuleException) and "CalledProcessError" in text and "returned non-zero exit status" in text


def print_job_command_once() -> bool:
    """A failing job's command is printed once, in Snakemake's "Error in rule" block beside its log: the
    CalledProcessError Snakemake prints before that block repeats the whole command, shell prefix included (about
    3 KB), and is left out. Snakemake 9's local executor prints it through its module's ``print_exception``; where
    that is gone, both stay (False)."""
    import snakemake.executors.local as local

    original = getattr(local, "print_exception", None)
    if original is None or getattr(original, "assocmem", False):
        return original is not None

    def print_exception(ex: BaseException, *args: Any, **kwargs: Any) -> None:
        if not is_failed_command(ex):
            original(ex, *args, **kwargs)

    print_exception.assocmem = True  # type: ignore[attr-defined]
    local.print_exception = print_exception
    return True


def whole_lines(stream: Any = None) -> bool:
    """Make ``stream`` (default ``sys.stderr``) write whole lines. Snakemake's log handler writes a message and its
    newline as two writes; where PYTHONUNBUFFERED is set (``python -u``, many CI and container images) stderr passes
    each to the OS at once, so a job's status line (one write of its own, on a descriptor that shares the stream:
    ``ASSOCMEM_STATUS_FD``) could land between them, glued to Snakemake's line ("Select jobs to
    execute...assocmem: subsets: ..."; it failed a CI run once). Line-buffered, the message waits for its newline and
    both go out in one write. False (nothing done) where the stream cannot be reconfigured."""
    stream = sys.stderr if stream is None else stream
    reconfigure = getattr(stream, "reconfigure", None)
    if reconfigure is None:
        return False
    reconfigure(line_buffering=True, write_through=False)
    return True


def put_back_report(report_dir: Path) -> None:
    """onerror: the previous report back where a failed or interrupted report job left none."""
    from assocmem.report.swap import put_back

    if put_back(report_dir):
        print(f"assocmem: the report job did not finish: {report_dir} holds the previous report (dated 1970), "
              "until a rerun builds the new one", file=sys.stderr)


def is_report_command(argv: list[str]) -> bool:
    """Whether Snakemake was asked to pack its report (``--report FILE``), not to run."""
    return any(arg == "--report" or arg.startswith("--report=") for arg in argv)


def _stamp_mismatch(stamp: str, expect: dict[str, Any]) -> str | None:
    """"not run", "misplaced" (another job's outputs: refused by the jobs that read them, not rerun), "settings" or
    "code" where the job's stamp is not what the config and checkout imply, else None."""
    from assocmem import stamps
    from assocmem.errors import AssocmemError

    try:
        record = stamps.read_stamp(Path(stamp))
    except AssocmemError:
        return "not run"
    if record["job"] != expect["job"]:
        return "misplaced"
    if record["params_sha256"][:stamps.SHORT] != expect["params"]:
        return "settings"
    if str(record["code"])[:stamps.SHORT] != expect["code"]:
        return "code"
    return None


def foreign_jobs(expectations: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Stamp -> "settings" or "code", for each job whose stamp says it was made with other settings or code than the
    config and checkout imply (``expectations``: the workflow's ``upstream_expectations``); a job without a readable
    stamp is not among them (it has not run, or did not finish: Snakemake runs it), nor one holding another job's
    outputs (copied or moved: the jobs that read it refuse it, naming it, and `assocmem verify` lists it)."""
    found = {stamp: _stamp_mismatch(stamp, expect) for stamp, expect in sorted(expectations.items())}
    return {stamp: kind for stamp, kind in found.items() if kind in ("settings", "code")}


def report_mismatches(expectations: dict[str, dict[str, Any]]) -> list[str]:
    """The jobs whose stamp says they were made with other settings or code than the config and checkout imply (a
    results directory of an earlier run with other `--set`s), or that have not run."""
    why = {"not run": "has not run (or did not finish)", "misplaced": "holds the outputs of another job ({})",
           "settings": "was made with other settings (the ones in {})", "code": "was made by other code"}
    found = ((stamp, _stamp_mismatch(stamp, expect)) for stamp, expect in sorted(expectations.items()))
    return [f"{Path(stamp).parent} {why[kind].format(stamp)}" for stamp, kind in found if kind is not None]


def _listed(problems: list[str]) -> str:
    return "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")


def foreign_message(foreign: dict[str, str]) -> str:
    """What a run says about the jobs whose results are not this config's and checkout's (:func:`foreign_jobs`)."""
    jobs = "1 job of this config holds" if len(foreign) == 1 else f"{len(foreign)} jobs of this config hold"
    shown = _listed([f"{Path(stamp).parent} (other {kind})" for stamp, kind in foreign.items()])
    return (f"assocmem: {jobs} results made with other settings or code than this config and "
            f"checkout (each job's provenance.json has what it ran with): they run again, with their dependants, "
            f"where this run needs them: {shown}.")


FOREIGN_MARKERS = ".cache/foreign"  # under the results directory


def foreign_marker(results_dir: str, stamp: str) -> str:
    """The file every stamped job reads as one more input (:func:`mark_foreign`): one name under
    ``<results_dir>/.cache/foreign``, so that it is no artifact of the layout."""
    name = Path(stamp).relative_to(results_dir).as_posix().replace("/", "~")
    return f"{results_dir}/{FOREIGN_MARKERS}/{name}.rerun"


def mark_foreign(results_dir: str, stamps: Iterable[str], foreign: dict[str, str]) -> None:
    """Give each job of ``stamps`` its marker: dated now for a foreign job, so that it is newer than the job's
    outputs and Snakemake reruns the job and its dependants; dated 1970 for the others. Snakemake's own rerun
    triggers read its records in .snakemake/metadata, keyed by path: a results directory copied from another run,
    or one whose records are lost, looks up to date to them. Every job reads its marker always, so the set of its
    inputs (another of those triggers) never changes."""
    Path(results_dir, FOREIGN_MARKERS).mkdir(parents=True, exist_ok=True)
    for stamp in stamps:
        marker = Path(foreign_marker(results_dir, stamp))
        if stamp in foreign:  # new bytes too: Snakemake ignores a newer input whose checksum is the one it recorded
            marker.write_text(f"other {foreign[stamp]} than the config, seen {time.time_ns()}\n")
        elif not marker.is_file() or marker.stat().st_mtime_ns != 0:
            marker.touch()
            os.utime(marker, ns=(0, 0))


def refuse_foreign_report(problems: list[str]) -> str | None:
    """The one-paragraph refusal of `snakemake --report` over results that are not this config's, or None."""
    if not problems:
        return None
    shown = _listed(problems)
    return (f"assocmem: the results are not those of this config and checkout, so a report of them would describe "
            f"another run: {shown}. Run the workflow with this config first (the same command without --report), "
            "then pack the report.")
