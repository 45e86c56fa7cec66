"""Train a group of same-shape training jobs as stacked replicas and write each one's run directory (issue 41).

Each replica is given as the ``train`` stage is: its ``--params`` object (``model``, ``train``, ``seed``, ``job``),
its subset store and run directory, and optionally its provenance (``stamp``, ``outputs``, ``upstream``: the stamps
it reads and what they must match). Every run directory ends with the files a single ``assocmem train`` run writes,
and every given stamp is written as that run's stamp is, for the rule ``train``.

    python -m assocmem.train.stacked_cli --threads 1 --group group.json    (or --group-json '{...}')

``group.json``: ``{"replicas": [{"params": {...}, "store_dir": "...", "run_dir": "...", "stamp": "...",
"outputs": ["..."], "upstream": {"<stamp>": {...}}}, ...], "upstream": {...}}``; a group-level ``upstream`` is
every replica's that gives none. The workflow's ``train_stacked_<exp>`` rules pass it as ``--group-json``
(workflow/rules/stacking.smk, ``train.stack_replicas``).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from assocmem import stamps
from assocmem.codehash import code_digest
from assocmem.errors import AssocmemError
from assocmem.io import read_json
from assocmem.runtime import set_threads
from assocmem.train.job import build_job
from assocmem.train.stacked import train_stacked

REPLICA_KEYS = ("params", "store_dir", "run_dir")
log = logging.getLogger(__name__)


def parse_json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise AssocmemError(f"--group-json: not JSON ({err})") from None


def read_group(path: Path | str, group: Any = None) -> list[dict[str, Any]]:
    """The replicas of a group file (or of ``group``, the file's object, read from ``path``), each checked for the
    keys it needs and given the group's ``upstream`` where it has none (one line naming the file otherwise)."""
    group = read_json(path) if group is None else group
    replicas = group.get("replicas") if isinstance(group, dict) else None
    if not isinstance(replicas, list) or not replicas:
        raise AssocmemError(f"{path}: expected an object with a non-empty list 'replicas'")
    for i, replica in enumerate(replicas):
        missing = [key for key in REPLICA_KEYS if key not in replica]
        if missing:
            raise AssocmemError(f"{path}: replicas[{i}] lacks {', '.join(missing)}")
        replica.setdefault("upstream", group.get("upstream"))
    return replicas


def train_group(replicas: list[dict[str, Any]], threads: int = 1) -> list[dict[str, Any]]:
    """Train the replicas as one stack; write each one's stamp where given; return their summaries."""
    set_threads(threads)
    for replica in replicas:
        stamps.verify_all(replica.get("upstream") or {})
    code = code_digest("train")  # the train stage's, stacking modules included: downstream stamps check it
    jobs = [build_job(r["params"]["train"], r["params"]["model"], r["params"]["seed"], Path(r["store_dir"]),
                      Path(r["run_dir"]), code=code, job=r["params"].get("job", "")) for r in replicas]
    summaries = train_stacked(jobs)
    for replica in replicas:
        if replica.get("stamp"):
            stamps.write_stamp(replica["stamp"], "train", replica["params"], code, replica.get("outputs", []),
                               replica.get("upstream") or {})
    return summaries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--group", type=Path, help="the group file (JSON, see above)")
    source.add_argument("--group-json", help="the group file's object itself")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        replicas = (read_group(args.group) if args.group_json is None
                    else read_group("--group-json", parse_json(args.group_json)))
        summaries = train_group(replicas, args.threads)
    except AssocmemError as err:
        print(f"assocmem: {err}", file=sys.stderr)
        return 2
    for summary in summaries:
        print(f"{summary['steps']} steps, best val CE {summary['best_val_ce']:.3f} ({summary['stop_rule']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
