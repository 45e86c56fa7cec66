"""Shared paths and builders for tests: the repository root, the shared material beside the checkout, tiny
McCoy-format files and tokenized stores."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the repository
SHARED = ROOT.parent / "shared"  # test material beside the checkout (absent: the tests that need it skip)

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
