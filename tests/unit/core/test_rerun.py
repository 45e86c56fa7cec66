"""Issue 39: every "delete X and rerun ..." hint names the command the user ran, and a job or command ended by
Ctrl-C says so in one line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from assocmem import cli, rerun
from assocmem.io import rebuild_hint
from assocmem.tokenstore import rebuild_hint as store_hint

TYPED = "python -m assocmem run --cores all --configfile 'my config.yaml' --set experiments.qf.train.lr=0.01"


def test_a_hint_repeats_the_command_the_user_ran(monkeypatch) -> None:
    """The hints dropped the user's --configfile: following one ran the default config (5 minutes, into results/)."""
    path = "results/qf/train/tiny/pct100/best.pt"
    monkeypatch.delenv(rerun.ENVIRONMENT, raising=False)
    assert rebuild_hint(path) == (f"delete {path} and rerun `snakemake --cores all` (or `snakemake --cores all "
                                  "--forcerun train`)")
    monkeypatch.setenv(rerun.ENVIRONMENT, TYPED)
    assert rebuild_hint(path) == f"delete {path} and rerun `{TYPED}` (or `{TYPED} --forcerun train`)"
    assert f"rerun `{TYPED}` (or `{TYPED} --forcerun tokenize`" in store_hint(Path("s/meta.json"))


def test_snakemakes_command_line_is_written_as_typed() -> None:
    argv = ["/usr/lib/python3/site-packages/snakemake/__main__.py", "--cores", "all", "--configfile", "a b.yaml"]
    assert rerun.snakemake_command(argv) == "snakemake --cores all --configfile 'a b.yaml'"


def test_assocmem_run_exports_the_command_it_was_given(monkeypatch, tmp_path) -> None:
    calls = []
    monkeypatch.setattr(cli.os, "execvp", lambda *args: calls.append(args))
    monkeypatch.setattr(cli, "_clear_stale_lock", lambda args: None)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(rerun.ENVIRONMENT, "")  # restored when the test ends
    config = Path(__file__).resolve().parents[3] / "config" / "test.yaml"
    cli.run_snakemake(["--cores", "1", "--configfile", str(config), "-n"])
    assert calls and os.environ[rerun.ENVIRONMENT] == (f"python -m assocmem run --cores 1 --configfile {config} "
                                                              "-n")


@pytest.mark.parametrize("command", ["tokenize", "sample"])
def test_ctrl_c_in_a_job_or_a_command_is_one_line(monkeypatch, capsys, command) -> None:
    """A job interrupted by Ctrl-C printed a KeyboardInterrupt traceback."""
    def interrupted(*_args, **_kwargs):
        raise KeyboardInterrupt

    if command == "tokenize":
        monkeypatch.setattr(cli, "run_stage", interrupted)
        argv = ["tokenize", "--params", "{}", "--out-dir", "x"]
    else:
        from assocmem.use import cli as use_cli

        monkeypatch.setitem(use_cli.COMMANDS, "sample", interrupted)
        argv = ["sample", "--model", "m.pt"]
    assert cli.main(argv) == 130
    err = capsys.readouterr().err
    assert err.startswith(f"assocmem {command}: interrupted (Ctrl-C)") and len(err.splitlines()) == 1
