"""Every job's outputs carry a stamp of where they came from, checked by every job that reads them (issue 28).

A stamp (``provenance.json`` beside a job's outputs, :data:`assocmem.layout.STAMPS`) is written by the command
line after the stage returns, so a killed job never leaves one. It records:

- the job: its rule and directory under the results directory (``activations qf/activations/L2/pct1``);
- a sha256 of the settings the job ran with (its ``--params``) and the digest of the stage's code;
- the threads its products ran on (not a setting: they change trained weights only by fp32 rounding);
- each output file's sha256, size and modification time;
- the content digest of the stamps of the jobs it read (its upstream, by path under the results directory),
  so a stale chain is seen.

A consumer receives from the workflow what each upstream stamp must say (the job, the settings' and the code's
digests that the current config and checkout imply, and which of its files the consumer reads) and refuses a
mismatch naming the file: a copied or swapped file, one from another run or config, one edited or cut after it was
written, or one built from an upstream that changed since.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from assocmem.errors import AssocmemError
from assocmem.io import read_json, rebuild_hint, sha256_file, write_json
from assocmem.layout import TEMPLATES, job_id, match

VERSION = 1
SHORT = 12  # hex digits of a digest a consumer is told to expect (the command line stays short)
STAMP_NAMES = ("provenance.json", "audit.provenance.json")


def params_digest(params: dict[str, Any]) -> str:
    """sha256 of a job's settings, independent of key order and whitespace."""
    return hashlib.sha256(json.dumps(params, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def expectation(stamp: str | Path, rule: str, params: dict[str, Any], code: str, files: Iterable[str]) -> dict:
    """What the stamp of ``rule``'s job must record for a consumer that reads ``files`` from it."""
    return {"job": job_id(rule, stamp), "params": params_digest(params)[:SHORT], "code": code[:SHORT],
            "files": sorted(set(files))}


def content_digest(record: dict[str, Any]) -> str:
    """Digest of what a stamp says about content (job, settings, code, file hashes, upstream), not file times."""
    content = {"job": record.get("job"), "params": record.get("params_sha256"), "code": record.get("code"),
               "files": {name: entry.get("sha256") for name, entry in (record.get("files") or {}).items()},
               "upstream": record.get("upstream")}
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def file_entry(path: Path) -> dict[str, Any]:
    info = path.stat()
    return {"sha256": sha256_file(path), "size": info.st_size, "mtime_ns": info.st_mtime_ns}


def write_stamp(stamp: str | Path, rule: str, params: dict[str, Any], code: str, outputs: Iterable[str | Path],
                upstream: Iterable[str | Path] = ()) -> None:
    """Record a finished job's outputs (files only; the stamp itself excluded) and the stamps it read."""
    stamp = Path(stamp)
    files = {Path(path).name: file_entry(Path(path)) for path in outputs
             if Path(path).is_file() and Path(path).resolve() != stamp.resolve()}
    record = {"version": VERSION, "job": job_id(rule, stamp), "params_sha256": params_digest(params), "code": code,
              "params": params, "threads": ran_with_threads(), "files": dict(sorted(files.items())),
              "upstream": {relative_to_results(Path(path)): content_digest(read_stamp(Path(path)))
                           for path in sorted(map(str, upstream))}}
    write_json(stamp, record)


def ran_with_threads() -> int | None:
    """The OpenMP threads the job's products ran on ($OMP_NUM_THREADS: Snakemake's per-job setting, or the stage's
    own, assocmem.runtime.set_threads), None where unset. Not a setting: threads_per_job changes trained weights only
    by the order of float sums and is in no job's params, so a stamp records it beside them."""
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(value) if value.isdigit() else None


def relative_to_results(path: Path) -> str:
    """A stamp's path under its results directory (stamps record their upstream so, and stay valid when the
    results directory is moved or copied whole)."""
    found = match(path)
    if found is None:
        raise AssocmemError(f"{path} is not a provenance stamp of the results layout")
    name, fields, _ = found
    return TEMPLATES[name].format(**fields)


def read_stamp(stamp: Path) -> dict[str, Any]:
    if not stamp.is_file():
        raise AssocmemError(f"missing provenance stamp {stamp}: its job did not finish, or the stamp was deleted; "
                            f"{rebuild_hint(stamp)}")
    record = read_json(stamp)
    if not isinstance(record, dict) or record.get("version") != VERSION or "files" not in record:
        raise AssocmemError(f"{stamp} is not a provenance stamp of this version; {rebuild_hint(stamp)}")
    return record


def verify(stamp: str | Path, expect: dict[str, Any]) -> None:
    """Refuse an upstream job whose stamp does not say what the consumer expects, or whose files changed."""
    stamp = Path(stamp)
    record = read_stamp(stamp)
    what = f"{stamp.parent}"
    if record["job"] != expect["job"]:
        raise AssocmemError(f"{what} holds the outputs of job '{record['job']}', not of '{expect['job']}' (copied "
                            f"or moved from another job?); {rebuild_hint(stamp)}")
    if record["code"][:SHORT] != expect["code"]:
        raise AssocmemError(f"{what} was made by other code of stage {expect['job'].split()[0]} (code digest "
                            f"{record['code'][:SHORT]}, this checkout's {expect['code']}); {rebuild_hint(stamp)}")
    if record["params_sha256"][:SHORT] != expect["params"]:
        raise AssocmemError(f"{what} was made with other settings than the config gives its job (settings digest "
                            f"{record['params_sha256'][:SHORT]}, expected {expect['params']}; the settings it ran "
                            f"with are in {stamp}); {rebuild_hint(stamp)}")
    for name in expect["files"]:
        problem = file_problem(stamp.parent / name, record, full=True)
        if problem:
            raise AssocmemError(problem)
    problem = upstream_problem(stamp, record)
    if problem:
        raise AssocmemError(problem)


def verify_all(expectations: dict[str, dict[str, Any]]) -> None:
    for stamp, expect in sorted(expectations.items()):
        verify(stamp, expect)


def file_problem(path: Path, record: dict[str, Any], *, full: bool) -> str | None:
    """Why ``path`` is not the file its job wrote, or None. ``full`` hashes it; otherwise an unchanged size and
    modification time vouch for it (a swapped, copied, edited or cut file differs in one of them)."""
    entry = record["files"].get(path.name)
    job = record["job"]
    if entry is None:
        return f"{path} is not among the files job '{job}' wrote; {rebuild_hint(path)}"
    if not path.is_file():
        return f"missing file: {path} (written by job '{job}'); {rebuild_hint(path)}"
    info = path.stat()
    if not full and (info.st_size, info.st_mtime_ns) == (entry["size"], entry["mtime_ns"]):
        return None
    if info.st_size != entry["size"] or sha256_file(path) != entry["sha256"]:
        return (f"{path} is not the file job '{job}' wrote: it was edited, cut, copied or swapped since "
                f"(sha256 differs from its stamp); {rebuild_hint(path)}")
    return None


def upstream_problem(stamp: Path, record: dict[str, Any]) -> str | None:
    """Why the job behind ``stamp`` is stale against the upstream stamps it read, or None."""
    found = match(stamp)
    results_dir = found[2] if found else stamp.parent
    for path, digest in (record.get("upstream") or {}).items():
        upstream = results_dir / path
        if upstream.is_file() and content_digest(read_stamp(upstream)) != digest:
            return (f"{stamp.parent} was built from other outputs of {upstream.parent} than the ones there now "
                    f"(the upstream job reran or its files were replaced, and this job did not rerun); "
                    f"{rebuild_hint(stamp)}")
    return None


def find_stamps(results_dir: Path) -> Iterator[Path]:
    for name in STAMP_NAMES:
        yield from sorted(results_dir.rglob(name))


def scan(results_dir: str | Path) -> list[str]:
    """Every output under ``results_dir`` that is not what its job wrote and that Snakemake would not redo: a
    swapped, copied, edited or cut file (one whose size and time are unchanged is trusted without hashing), or a
    job directory copied whole from another job. A missing file, or a job older than its upstream, is left to
    Snakemake, which reruns both."""
    problems = []
    for stamp in find_stamps(Path(results_dir)):
        try:
            record = read_stamp(stamp)
        except AssocmemError as err:
            problems.append(str(err))
            continue
        placed = job_id(str(record["job"]).split(" ")[0], stamp)
        if record["job"] != placed:
            problems.append(f"{stamp.parent} holds the outputs of job '{record['job']}', not of '{placed}' (copied "
                            f"or moved from another job?); {rebuild_hint(stamp)}")
            continue
        problems += [problem for name in record["files"] if (stamp.parent / name).is_file()
                     and (problem := file_problem(stamp.parent / name, record, full=False))]
    return problems


def is_rank_zero() -> bool:
    """Only rank 0 of a distributed job writes its stamp."""
    return os.environ.get("RANK", "0") == "0"
