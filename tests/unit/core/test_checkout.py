"""The checkout's state as records and the report's header state it (assocmem.checkout)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from assocmem import checkout
from assocmem.checkout import CheckoutState, checkout_state, record_commit


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                   capture_output=True)


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    """A checkout of one commit holding src/a.py and notes.md."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_text("a = 1\n")
    (tmp_path / "notes.md").write_text("notes\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "one")
    return tmp_path


def test_a_folder_outside_any_checkout_has_no_commit(tmp_path: Path) -> None:
    assert checkout_state(tmp_path) == CheckoutState(None, False)


def test_a_machine_without_git_has_no_commit(monkeypatch, repo: Path) -> None:
    def no_git(*args, **kwargs):
        raise FileNotFoundError("git")

    monkeypatch.setattr(checkout.subprocess, "run", no_git)
    assert checkout_state(repo) == CheckoutState(None, False)


def test_a_clean_checkout_names_its_commit_at_the_asked_length(repo: Path) -> None:
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    for digits in (7, 12):
        state = checkout_state(repo, digits=digits)
        assert state == CheckoutState(head[:digits], False)


def test_edited_and_staged_tracked_files_are_changes_untracked_files_are_not(repo: Path) -> None:
    (repo / "new.txt").write_text("untracked\n")
    assert not checkout_state(repo).dirty
    (repo / "notes.md").write_text("edited\n")
    assert checkout_state(repo).dirty
    _git(repo, "add", "notes.md")
    assert checkout_state(repo).dirty


def test_changes_are_read_under_the_paths_asked_about(repo: Path) -> None:
    (repo / "notes.md").write_text("edited\n")
    assert checkout_state(repo).dirty and not checkout_state(repo, paths=("src",)).dirty
    (repo / "src" / "a.py").write_text("a = 2\n")
    assert checkout_state(repo, paths=("src",)).dirty


def test_a_records_commit_is_short_and_marks_changes_under_src_only(repo: Path) -> None:
    commit = checkout_state(repo, digits=7).commit
    assert record_commit(repo) == commit and len(commit) >= 7
    (repo / "notes.md").write_text("edited\n")
    assert record_commit(repo) == commit
    (repo / "src" / "a.py").write_text("a = 2\n")
    assert record_commit(repo) == commit + "+changes"


def test_a_records_commit_outside_a_checkout_says_no_git(tmp_path: Path) -> None:
    assert record_commit(tmp_path) == "no git"
