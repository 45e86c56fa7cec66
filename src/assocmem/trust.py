"""What the pipeline checks before a job reads a model or a token store, checked again before ``load_model``,
``sample`` and ``evaluate`` use them (issue 39): a model file inside a results directory must be the file its
training job wrote (its provenance stamp, ``assocmem.stamps``), made by this checkout's code, from the upstream
that is there now; a token store must hold the files its tokenize job wrote (an edited ``meta.json`` with two
words swapped scores and samples wrong words), and must be the store the model was trained on.

A file outside a results directory's layout has no stamp to check: only its weights are (``assocmem.provenance``).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from assocmem import layout, stamps
from assocmem.codehash import code_digest
from assocmem.errors import AssocmemError
from assocmem.io import rebuild_hint

# the small files of a job that are always hashed (a hand edit that kept the file's time is still found)
HASHED_SUFFIXES = (".json", ".pt")
current_code = functools.cache(code_digest)  # a stage's code does not change while one command checks it


def check_job(stamp: Path, rule: str) -> dict[str, Any]:
    """Refuse the job behind ``stamp`` when the pipeline would: copied from another job, made by other code, built
    from upstream outputs that changed since, or one of its files edited; returns its stamp's record."""
    record = stamps.read_stamp(stamp)
    placed = layout.job_id(rule, stamp)
    if record["job"] != placed:
        raise AssocmemError(f"{stamp.parent} holds the outputs of job '{record['job']}', not of '{placed}' (copied "
                            f"or moved from another job?); {rebuild_hint(stamp)}")
    problem = code_problem(stamp, record) or stamps.upstream_problem(stamp, record) or files_problem(stamp, record)
    if problem:
        raise AssocmemError(problem)
    return record


def code_problem(stamp: Path, record: dict[str, Any]) -> str | None:
    """Why the job behind ``stamp`` was not made by this checkout's code of its stage, or None."""
    stage = str(record["job"]).split(" ")[0]
    try:
        current = current_code(stage)
    except AssocmemError:
        return None  # a stage this checkout does not have: nothing to compare with
    if str(record.get("code", ""))[:stamps.SHORT] == current[:stamps.SHORT]:
        return None
    return (f"{stamp.parent} was made by other code of stage {stage} than this checkout's (code digest "
            f"{str(record.get('code'))[:stamps.SHORT]}, this checkout's {current[:stamps.SHORT]}: copied from another "
            f"commit, or the code changed since); {rebuild_hint(stamp)}")


def files_problem(stamp: Path, record: dict[str, Any]) -> str | None:
    """The first of the job's files that is not what the job wrote (a missing one included), or None."""
    for name in sorted(record["files"]):
        path = stamp.parent / name
        problem = stamps.file_problem(path, record, full=path.suffix in HASHED_SUFFIXES)
        if problem:
            return problem
    return None


def check_chain(stamp: Path, rule: str) -> dict[str, Any]:
    """:func:`check_job` for ``stamp`` and, through the upstream its stamp records, every job it was built from."""
    record = check_job(stamp, rule)
    found = layout.match(stamp)
    results_dir = found[2] if found else stamp.parent
    for upstream in sorted(record.get("upstream") or {}):
        path = results_dir / upstream
        upstream_rule = layout.stamp_of(path)
        if upstream_rule is not None and path.is_file():
            check_chain(path, upstream_rule[0])
    return record


def check_model_run(model_file: Path) -> None:
    """A model file inside a results directory: its training job, and every job it was built from, as the pipeline
    checks them. A file elsewhere is left to its weights' own check."""
    found = layout.stamp_of(model_file)
    if found is None or found[0] != "train":
        return
    check_chain(found[1], found[0])


def store_stamp(store_dir: Path) -> Path | None:
    """The tokenize job's stamp of a store placed in a results directory's layout, else None."""
    stamp = store_dir / "provenance.json"
    found = layout.stamp_of(stamp)
    return stamp if found is not None and found[0] == "tokenize" else None


def check_store(store_dir: Path, model_file: Path | None = None) -> None:
    """A token store inside a results directory: the files its tokenize job wrote; and, for a model trained in the
    same results directory, the store that model was trained on (the one its chain of jobs records)."""
    stamp = store_stamp(store_dir)
    if stamp is None:
        return
    check_chain(stamp, "tokenize")
    trained_on = trained_store(model_file) if model_file is not None else None
    if trained_on is not None and trained_on.resolve() != stamp.resolve():
        raise AssocmemError(f"{model_file} was trained on the token store {trained_on.parent}, not on {store_dir}: "
                            f"pass --store {trained_on.parent} (or leave --store out)")


def trained_store(model_file: Path) -> Path | None:
    """The stamp of the token store a model in a results directory was trained on, found through its upstream."""
    found = layout.stamp_of(model_file)
    if found is None or found[0] != "train" or not found[1].is_file():
        return None
    results_dir = layout.match(found[1])[2]  # type: ignore[index]  # a stamp of the layout matches
    pending = [found[1]]
    while pending:
        record = stamps.read_stamp(pending.pop())
        for upstream in record.get("upstream") or {}:
            stamp = layout.stamp_of(results_dir / upstream)
            if stamp is not None and stamp[0] == "tokenize":
                return stamp[1]
            if stamp is not None:
                pending.append(stamp[1])
    return None


def audit(results_dir: Path) -> list[str]:
    """What the pipeline would refuse under ``results_dir``, beyond :func:`assocmem.stamps.scan` (swapped, copied,
    edited or cut files): jobs made by other code than this checkout's, or built from upstream outputs that changed
    since (a job directory copied with ``cp -a`` from another commit or run, whose times Snakemake trusts)."""
    problems = stamps.scan(results_dir)
    for stamp in stamps.find_stamps(results_dir):
        named = (f"{stamp.parent}/", f"{stamp.parent} ")
        if any(problem.removeprefix("missing file: ").startswith(named) for problem in problems):
            continue  # scan named this job already (a file of it, or the job itself)
        try:
            record = stamps.read_stamp(stamp)
            problem = code_problem(stamp, record) or stamps.upstream_problem(stamp, record)
        except AssocmemError as err:
            problem = str(err)
        if problem:
            problems.append(problem)
    return problems
