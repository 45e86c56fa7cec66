"""The command that reruns this run, for every "delete X and rerun ..." hint (issue 39): the command the user typed,
with its ``--configfile`` and ``--set`` options, so that following a hint never runs the default config instead.

The workflow exports it to every job (``ASSOCMEM_RERUN``, set in workflow/rules/common.smk from Snakemake's own
command line, or by ``python -m assocmem run`` from the command the user typed); outside a run the hints name the
plain ``snakemake --cores all``.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence

ENVIRONMENT = "ASSOCMEM_RERUN"
DEFAULT = "snakemake --cores all"


def rerun_command() -> str:
    """The command that reruns this run (:data:`DEFAULT` outside one)."""
    return os.environ.get(ENVIRONMENT, "").strip() or DEFAULT


def forcerun_command(rule: str) -> str:
    """The rerun command, forcing ``rule``'s jobs to run again."""
    return f"{rerun_command()} --forcerun {rule}"


def typed_command(program: str, args: Sequence[str]) -> str:
    """``program`` and its arguments as a shell line the user can paste."""
    return " ".join([program, *(shlex.quote(arg) for arg in args)])


def snakemake_command(argv: Sequence[str]) -> str:
    """Snakemake's command line as typed (``sys.argv`` of its main process: the script or module path first)."""
    return typed_command("snakemake", list(argv[1:]))
