"""A measured run, recorded for the documentation: the verdicts and numbers of a run's ``checks.json`` (and, for a
scaling sweep, its ``analysis.json``) with the commit, date, wall time and peak memory of the command that made
them. ``docs/results/*.json`` are such records; ``tests/unit/docs/`` checks that docs/results.md and README.md
quote them exactly, and that today's code refits the recorded sweep to the same exponent.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from assocmem.errors import AssocmemError
from assocmem.io import read_json

SCHEMA = "assocmem-record-v1"
_TIME_FIELDS = {"wall": r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)",
                "rss_kb": r"Maximum resident set size \(kbytes\): (\d+)"}
_STAGE_LINE = re.compile(r"^assocmem: .*$", re.M)
_REPORT_CODE = re.compile(r"^\| code \| git ([0-9a-f]{7,40})( \(uncommitted changes\))? \|$", re.M)


def _seconds(clock: str) -> float:
    """'1:02:03' or '4:05.67' -> seconds."""
    total = 0.0
    for part in clock.split(":"):
        total = total * 60 + float(part)
    return total


def parse_time_log(text: str, source: Path) -> dict[str, float]:
    """Wall seconds and peak RSS (GB) from the output of ``/usr/bin/time -v``."""
    found = {key: re.search(pattern, text) for key, pattern in _TIME_FIELDS.items()}
    missing = [key for key, match in found.items() if match is None]
    if missing:
        raise AssocmemError(f"{source}: no {', '.join(missing)} line of `/usr/bin/time -v` in it")
    return {"wall_s": round(_seconds(found["wall"].group(1)), 1),
            "max_rss_gb": round(int(found["rss_kb"].group(1)) / 1024**2, 2)}


def stage_lines(text: str) -> list[str]:
    """The one-line results the stages print (``assocmem: <job>: <key number>``), in order, without repeats."""
    return list(dict.fromkeys(line.strip() for line in _STAGE_LINE.findall(text)))


def report_commit(checks_file: Path) -> str | None:
    """The commit the run's report names in its header (``report.md`` beside ``checks.json``), in the records' form:
    7 digits, '+changes' where the code had uncommitted changes; None without a report.md, or where the report was
    built outside a git checkout."""
    report = checks_file.with_name("report.md")
    found = _REPORT_CODE.search(report.read_text(errors="replace")) if report.is_file() else None
    return None if found is None else found.group(1)[:7] + ("+changes" if found.group(2) else "")


def run_commit(checks_file: Path, given: str | None) -> str:
    """The commit a record names: the run's own, read from its report's header; ``given`` (``--commit``) must agree
    with it (a hand-typed commit can be stale), and is needed where the report names none."""
    built = report_commit(checks_file)
    if given is None:
        if built is None:
            raise AssocmemError(f"{checks_file}: no report.md beside it names the run's commit: pass --commit")
        return built
    if built is not None and not _same_commit(built, given):
        raise AssocmemError(f"{checks_file}: its report was built at {built} (report.md's header), not at "
                            f"--commit {given}: record the run's own commit (or leave --commit out)")
    return given


def _same_commit(first: str, second: str) -> bool:
    """Both name one commit (one hash a prefix of the other) and agree on '+changes'."""
    first_hash, second_hash = (text.removesuffix("+changes") for text in (first, second))
    return (first.endswith("+changes") == second.endswith("+changes")
            and (first_hash.startswith(second_hash) or second_hash.startswith(first_hash)))


def sweep_summary(analysis: dict[str, Any]) -> dict[str, Any]:
    """What the documentation quotes from a sweep's analysis.json, and the cells to refit it from."""
    boundary = analysis["parametric_boundary"]
    return {"noise": analysis["noise"], "tolerance": analysis["tolerance"], "n_cells": analysis["n_cells"],
            "n_runs": analysis["n_runs"], "n_params_span": analysis["n_params_span"],
            "n_tokens_span": analysis["n_tokens_span"], "parametric_boundary": boundary,
            "threshold": {"slope": analysis["boundary"]["slope"], "ci": analysis["boundary_slope_ci"]},
            "cells": analysis["cells"]}


def record(checks_file: Path, time_log: Path, snakemake_log: Path, *, commit: str | None, date: str, command: str,
           sweep_file: Path | None = None, memorisation_file: Path | None = None) -> dict[str, Any]:
    """The record of one measured run (see the module docstring); ``commit``: see :func:`run_commit`."""
    checks = read_json(checks_file)
    if "checks" not in checks:
        raise AssocmemError(f"{checks_file}: not a report's checks.json (no 'checks' key)")
    result: dict[str, Any] = {
        "schema": SCHEMA, "commit": run_commit(checks_file, commit), "date": date, "command": command,
        **parse_time_log(time_log.read_text(errors="replace"), time_log),
        "stage_lines": stage_lines(snakemake_log.read_text(errors="replace")),
        "verdicts": {check["id"]: check["verdict"] for check in checks["checks"]},
        "numbers": {check["id"]: check["numbers"] for check in checks["checks"]},
    }
    if sweep_file is not None:
        result["sweep"] = sweep_summary(read_json(sweep_file))
    if memorisation_file is not None:
        result["memorisation"] = memorisation_summary(read_json(memorisation_file))
    return result


MEMORISATION_KEYS = ("threshold", "stop_at_recall", "bits_per_fact", "n_runs", "seeds", "n_params", "n_facts",
                     "n_span", "d_span", "fit", "power", "power_sharp", "power_k", "can_decide", "power_reason",
                     "tells_every_law_apart", "every_law_reason", "law_verdict", "bits_per_param", "per_d",
                     "sensitivity", "runs", "overhead_fit", "alternatives", "alternatives_can_decide",
                     "alternatives_reason")


# what the stage writes when the grid identifies no boundary (one D, or every run stored): no power, no verdict
UNFITTED_KEYS = ("threshold", "stop_at_recall", "bits_per_fact", "n_runs", "seeds", "n_params", "n_facts", "n_span",
                 "d_span", "fit", "per_d", "runs", "overhead_fit", "reason")


def memorisation_summary(analysis: dict[str, Any]) -> dict[str, Any]:
    """What the documentation quotes from a memorisation grid's analysis.json, and the runs to refit it from; for a
    grid without a boundary fit (the stage's ``reason`` says why), its runs and the reason."""
    keys = UNFITTED_KEYS if analysis.get("fit") is None and analysis.get("reason") else MEMORISATION_KEYS
    missing = [key for key in keys if key not in analysis]
    if missing:
        raise AssocmemError(f"memorisation analysis.json lacks {', '.join(missing)}: not written by today's "
                            "memorisation stage (or its fit failed); rerun the memorisation job")
    summary = {key: analysis[key] for key in keys}
    if keys is UNFITTED_KEYS and "overhead_reason" in analysis:  # the overhead fit failed too: why
        summary["overhead_reason"] = analysis["overhead_reason"]
    return summary
