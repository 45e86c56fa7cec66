"""The checkout a result was made from: its git commit and whether its tracked files differ from that commit.

The report's header and the records under ``docs/results`` state it. Where there is no git, or the code is not a
git checkout, the state says so: a result is never lost for want of its commit.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

GIT_TIMEOUT_S = 20
CODE_PATHS = ("src", "workflow", "Snakefile")  # what a run executes (its config files are stated apart)
COMMIT_HELP = ("the commit to record (default: this checkout's, '+changes' where its src differs from it, "
               "'no git' outside a git checkout)")
CHECKOUT = Path(__file__).resolve().parents[2]  # src/assocmem/checkout.py -> the repository root


@dataclass(frozen=True)
class CheckoutState:
    commit: str | None  # HEAD abbreviated; None where git is missing or the folder is not a git checkout
    dirty: bool  # tracked files (under the paths asked about) differ from HEAD; untracked files do not count


def _git(checkout: Path, *args: str) -> str | None:
    """git's stdout, stripped; None when git is missing, times out or fails."""
    try:
        result = subprocess.run(["git", "-C", str(checkout), *args], capture_output=True, text=True,
                                timeout=GIT_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def checkout_state(checkout: Path, *, paths: tuple[str, ...] = (), digits: int = 12) -> CheckoutState:
    """The commit of ``checkout`` (``digits`` hex digits at least) and whether its tracked files under ``paths``
    (all of them when empty) differ from it, staged or not."""
    commit = _git(checkout, "rev-parse", f"--short={digits}", "HEAD")
    if not commit:
        return CheckoutState(None, False)
    changes = _git(checkout, "status", "--porcelain", "--untracked-files=no", "--", *paths)
    return CheckoutState(commit, changes is None or bool(changes))


def record_commit(checkout: Path | None = None) -> str:
    """The commit a record under ``docs/results`` names: 7 hex digits, with '+changes' where the tracked files under
    src differ from it (the records' numbers come from src), 'no git' where there is no git or no checkout.
    ``checkout``: this package's repository unless given."""
    state = checkout_state(checkout or CHECKOUT, paths=("src",), digits=7)
    if state.commit is None:
        return "no git"
    return state.commit + ("+changes" if state.dirty else "")
