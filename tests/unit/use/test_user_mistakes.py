"""Issue 39, a careful user's mistakes with the commands for a trained model: each one line, no traceback, nothing
silently accepted."""

from __future__ import annotations

import shutil

import pytest
from trained_run import run_dir, store_dir

from assocmem import cli


def assocmem(capsys: pytest.CaptureFixture, *args: object) -> tuple[int, str]:
    """`python -m assocmem ARGS` in this process: exit status and stderr."""
    capsys.readouterr()
    try:
        status = cli.main(list(map(str, args)))
    except SystemExit as exit_:  # argparse
        status = exit_.code
    return status, capsys.readouterr().err


def test_a_file_that_is_no_model_is_named_in_one_line(results, capsys) -> None:
    """torch's refusal ran to four lines."""
    meta = store_dir(results) / "meta.json"
    status, err = assocmem(capsys, "evaluate", "--model", meta)
    assert status == 2 and len(err.splitlines()) == 1
    assert err.startswith(f"assocmem evaluate: error: cannot read model {meta}: truncated or corrupt, or not a torch "
                          "file")


def test_an_unreadable_store_file_is_named_in_one_line(results, tmp_path, capsys) -> None:
    """A meta.json that cannot be read (here a directory in its place) gave an IsADirectoryError traceback."""
    store = tmp_path / "store"
    shutil.copytree(store_dir(results), store)
    (store / "meta.json").unlink()
    (store / "meta.json").mkdir()
    status, err = assocmem(capsys, "evaluate", "--model", run_dir(results), "--store", store)
    assert status == 2 and len(err.splitlines()) == 1
    assert err.startswith(f"assocmem evaluate: error: cannot read {store / 'meta.json'}: Is a directory")


@pytest.mark.parametrize("temperature", ["inf", "nan", "-1"])
def test_a_temperature_that_is_no_finite_number_is_refused(results, capsys, temperature) -> None:
    """`--temperature inf` sampled every token with the same probability (<pad> included), without a word."""
    status, err = assocmem(capsys, "sample", "--model", run_dir(results), "--temperature", temperature)
    assert status == 2 and f"--temperature: must be a finite number, 0 or more, got {temperature}" in err
    assert "Traceback" not in err
