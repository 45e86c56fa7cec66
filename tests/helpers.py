"""Shared paths and builders for tests: the repository root, the shared material beside the checkout, tiny
McCoy-format files and tokenized stores, and the rules for the report's receipts."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]  # the repository
SHARED = ROOT.parent / "shared"  # test material beside the checkout (absent: the tests that need it skip)
STUB_DIR_VARIABLE = "ASSOCMEM_TESTS_SCONTROL_STUB"
_STUB_MADE_HERE: list[Path] = []  # pytest-xdist workers inherit the stub; only the process that made it removes it


def stub_scontrol() -> None:
    """Shadow an installed ``scontrol`` with one that fails at once, for this process and its children.

    snakemake-executor-plugin-slurm runs ``scontrol show config`` when Snakemake loads its plugins (every start,
    2.x); where SLURM's client is installed but no controller runs (a machine where the SLURM test ran before),
    that call waits about 9 s, every time, in every test that starts Snakemake. The stub answers as a machine
    without a controller does, at once. The SLURM test's own cluster gets the real one (``real_slurm_env``)."""
    if os.environ.get(STUB_DIR_VARIABLE) or not shutil.which("scontrol"):
        return
    stub_dir = Path(tempfile.mkdtemp(prefix="assocmem-tests-stub."))
    _STUB_MADE_HERE.append(stub_dir)
    stub = stub_dir / "scontrol"
    stub.write_text("#!/bin/sh\necho 'scontrol: stubbed by the test suite (no controller)' >&2\nexit 1\n")
    stub.chmod(stub.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    os.environ[STUB_DIR_VARIABLE] = str(stub_dir)
    os.environ["PATH"] = f"{stub_dir}{os.pathsep}{os.environ.get('PATH', '')}"


def remove_scontrol_stub() -> None:
    while _STUB_MADE_HERE:
        shutil.rmtree(_STUB_MADE_HERE.pop(), ignore_errors=True)


def once_per_test_run(tmp_path_factory: Any, name: str, make: Callable[[Path], str]) -> tuple[Path, str]:
    """``make(directory)`` once per test session, however many pytest-xdist workers ask for it: the first makes it
    under a lock while the others wait, and all get the directory and the text ``make`` returned (kept beside it)."""
    from assocmem.io import write_text

    if not os.environ.get("PYTEST_XDIST_WORKER"):
        directory = tmp_path_factory.mktemp(name)
        return directory, make(directory)
    shared = tmp_path_factory.getbasetemp().parent  # one per session, above every worker's own
    directory, kept = shared / name, shared / f"{name}.out"
    with (shared / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not kept.exists():
            shutil.rmtree(directory, ignore_errors=True)  # what a failed attempt of another worker left
            directory.mkdir()
            write_text(kept, make(directory))
        return directory, kept.read_text()


def real_slurm_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment with the real ``scontrol`` back on PATH (see ``stub_scontrol``), plus ``extra``."""
    env = {**os.environ, **(extra or {})}
    stub_dir = env.pop(STUB_DIR_VARIABLE, None)
    if stub_dir:
        env["PATH"] = os.pathsep.join(part for part in env.get("PATH", "").split(os.pathsep) if part != stub_dir)
    return env

LINES = {
    "train": [
        "the newt does swim . decl\tthe newt does swim .",
        "the newt does swim . quest\tdoes the newt swim ?",
        "my yaks don't read . quest\tdon't my yaks read ?",
        "her quail doesn't admire the yak . decl\ther quail doesn't admire the yak .",
        "our ravens do applaud some zebra . quest\tdo our ravens applaud some zebra ?",
        "the walrus who does smile doesn't wait . decl\tthe walrus who does smile doesn't wait .",
        "some unicorns near the newt do eat . quest\tdo some unicorns near the newt eat ?",
        "your zebra doesn't move . decl\tyour zebra doesn't move .",
    ],
    "dev": ["the yak does sleep . quest\tdoes the yak sleep ?", "my newt doesn't swim . decl\tmy newt doesn't swim ."],
    "test": ["the quail does smile . decl\tthe quail does smile .", "her yaks do wait . quest\tdo her yaks wait ?"],
    "gen": ["the newt who does swim doesn't eat . quest\tdoesn't the newt who does swim eat ?"],
}


def write_raw(directory: Path, repeat: int = 1) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for split, lines in LINES.items():
        (directory / f"question.{split}").write_text("\n".join(lines * repeat) + "\n")
    return directory


def make_token_dir(tmp_path: Path, repeat: int = 1) -> Path:
    """A QF token store of LINES (each split repeated ``repeat`` times)."""
    from assocmem.qf.tokenize import tokenize_qf_dir

    raw = write_raw(tmp_path / "raw", repeat)
    out = tmp_path / "tokens"
    tokenize_qf_dir(raw, out)
    return out


def make_corpus_store(out: Path, docs: list[str], tokenizer, *, shard_tokens: int = 100_000_000,
                      splits: tuple[str, ...] = ("train",), **kwargs) -> Path:
    """A windows store of ``docs`` (every split gets the same documents) written through the shared writer."""
    from assocmem.tokenwriter import finish_store, tokenize_corpus

    for split in splits:
        tokenize_corpus(iter(docs), tokenizer, out, split=split, shard_tokens=shard_tokens, progress=False,
                        **kwargs)
    roles = {"validation": splits[-1], "heldout": splits[-1]}
    finish_store(out, list(splits), tokenizer, batching="windows", roles=roles, loss_tokens="every token")
    return out


def planned_rules(result: subprocess.CompletedProcess) -> set[str]:
    """Rule names from the dry-run job-stats table."""
    text = result.stdout + result.stderr
    if "Nothing to be done" in text:
        return set()
    table = text.split("Job stats:", 1)[1].split("\n\n", 1)[0]
    rows = [line.split() for line in table.splitlines()[3:]]
    return {row[0] for row in rows if len(row) == 2 and row[0] not in ("total", "all")}


def sweep_cells(b: float, *, alpha: float = 0.8, noise: float = 0.003, tolerance: float = 0.006, seeds: int = 3,
                seed: int = 0):
    """A sweep's cells table as the sweep stage builds it (one row per run), simulated with a known boundary
    exponent ``b`` on a 6 N x 4 D grid whose boundary (excess = ``tolerance``) sits at the grid's centre
    (assocmem.sweep.boundary), with seed noise ``noise`` at every D."""
    import numpy as np
    import pandas as pd

    from assocmem.sweep.boundary import simulate_cells

    n_values = np.geomspace(2e3, 2e5, 6).round()
    d_values = np.geomspace(2.4e4, 2.4e5, 4).round()
    design = pd.DataFrame([{"n_tokens": d, "n_params": n, "seed": s, "model": f"S{i}", "fraction": d / d_values[-1]}
                           for d in d_values for i, n in enumerate(n_values) for s in range(seeds)])
    noise_by_d = {float(d): noise for d in d_values}
    cells = simulate_cells(design, noise_by_d, b, alpha, tolerance, np.random.default_rng(seed))
    return cells.assign(subset=[f"pct{100 * f:g}" for f in cells["fraction"]], label=cells["model"],
                        final_val_ce=cells["val_ce"], train_ce=cells["val_ce"] - 0.01, best_step=1000, steps=1800,
                        stopped_early=True, budget_limited=False, late_spread=noise, eval_se=noise / 2)


# The report's receipts (a check row's evidence, computed and limits): formulas in $...$, truth values as yes/no,
# lists as words. Outside math and `code`, none of these may remain (issue 29).
ASCII_MATH = {
    "norm bars": r"\|\|",
    "a caret": r"\^",
    "a TeX subscript": r"_\{",
    "an ASCII relation": r"\s(<=|>=|~=|->)\s|\s(<|>)\s(?=[-\w(])",
    "a Python truth value": r"\b(True|False)\b",
    "a Python list": r"\['|\[\]|\[\"",
    "a function call written in ASCII": r"\b(sqrt|exp|erfinv|log10|gammaln)\(",
    "a Greek letter spelled out": r"\b(pi|rho|rho_i|beta|delta|delta_i|xi|theta|sigma|chi|Gamma|gamma|alpha)\b",
    "a snake_case name": r"\b[a-z][a-z0-9]*_[a-z0-9_]*[a-z0-9]\b",
    "r* outside math": r"\br\*",
}
_MATH_OR_CODE = re.compile(r"`[^`]*`|(?<!\\)\$\$.+?(?<!\\)\$\$|(?<!\\)\$.+?(?<!\\)\$", re.S)


def ascii_math(text: str | None) -> list[str]:
    """What a receipt shows as plain ASCII that the report should typeset or say in words: 'kind: excerpt'."""
    rest = _MATH_OR_CODE.sub(" ", text or "")
    found = []
    for kind, pattern in ASCII_MATH.items():
        for match in re.finditer(pattern, rest):
            found.append(f"{kind}: ...{rest[max(0, match.start() - 30):match.end() + 30]}...")
    return found


def receipt_problems(row: dict) -> list[str]:
    """ascii_math of a check row's evidence, computed and limits, each problem naming its field."""
    return [f"{row.get('id')}.{field}: {problem}" for field in ("evidence", "computed", "limits")
            for problem in ascii_math(row.get(field))]


class FakeTimer:
    """A clock for ``assocmem.autotune`` tests that stands in for the timed candidates: a call of candidate ``name``
    moves the clock by ``cost[name]``. ``candidates`` replaces the function that builds the runners; it records the
    shape it was asked for (its only argument, or the tuple of them)."""

    def __init__(self, cost: dict[str, float]) -> None:
        self.now, self.cost = 0.0, cost
        self.calls: list[str] = []
        self.shapes: list[Any] = []

    def __call__(self) -> float:
        return self.now

    def candidates(self, *shape: Any) -> dict[str, Callable[[], None]]:
        self.shapes.append(shape[0] if len(shape) == 1 else shape)
        return {name: self._runner(name) for name in self.cost}

    def _runner(self, name: str) -> Callable[[], None]:
        def run() -> None:
            self.calls.append(name)
            self.now += self.cost[name]
        return run


def fake_timer_installer(monkeypatch: Any, module: Any, builder: str) -> Callable[[dict[str, float]], FakeTimer]:
    """A function that installs a :class:`FakeTimer` with the given costs as ``module.builder`` (the function that
    builds the timed candidates) and returns it."""
    def install(cost: dict[str, float]) -> FakeTimer:
        timer = FakeTimer(cost)
        monkeypatch.setattr(module, builder, timer.candidates)
        return timer
    return install
