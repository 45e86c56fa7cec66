"""The report's run header: when and from what it was built (date, the checkout's commit, the config files with
their sha256, the host and the devices the runs used, the package versions), and a banner when the config is a
toy one, so that a test run's report is never mistaken for evidence.

The header describes the report's making, not the science: the report pages carry it, checks.json does not.
"""

from __future__ import annotations

import contextlib
import html
import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from assocmem.checkout import CHECKOUT, CODE_PATHS, checkout_state
from assocmem.io import sha256_file

TOY_BANNER = ("Toy configuration: this run exercises the pipeline on tiny models and data. Its numbers say nothing "
              "about the paper's claims; run config/config.yaml (or config/scaling.yaml, config/paper.yaml) for "
              "evidence.")
HEADER_CSS = (".run-header{font-size:.85em;margin:.5em 0 1em;border-collapse:collapse}"
              ".run-header th{text-align:left;padding:.1em 1em .1em 0;white-space:nowrap}"
              ".run-header td{padding:.1em 0;overflow-wrap:anywhere}"
              ".toy-banner{background:#a23c00;color:#fff;font-weight:bold;padding:.6em 1em;border-radius:4px}")


@dataclass(frozen=True)
class RunHeader:
    rows: tuple[tuple[str, str], ...]
    banner: str | None = None

    def markdown(self) -> str:
        lines = [f"> **{self.banner}**", ""] if self.banner else []
        lines += ["| run | |", "|---|---|", *(f"| {key} | {value} |" for key, value in self.rows), ""]
        return "\n".join(lines)

    def html(self) -> str:
        banner = f"<p class='toy-banner' role='note'>{html.escape(self.banner)}</p>" if self.banner else ""
        rows = "".join(f"<tr><th scope='row'>{html.escape(key)}</th><td>{html.escape(value)}</td></tr>"
                       for key, value in self.rows)
        return (f"<style>{HEADER_CSS}</style>{banner}"
                f"<div class='table-wrap'><table class='run-header'>{rows}</table></div>")


def run_header(config: dict[str, Any], config_files: list[dict[str, str]], devices: list[str],
               versions: dict[str, str]) -> RunHeader:
    rows = (("built", datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")),
            ("code", git_state(CHECKOUT)),
            ("config", config_state(config_files)),
            ("host", f"{cpu_model()} ({os.cpu_count()} logical CPUs); runs on {', '.join(devices) or 'n/a'}"),
            ("packages", ", ".join(f"{name} {versions.get(name, 'n/a')}"
                                   for name in ("python", "torch", "faiss-cpu", "snakemake", "transformers"))))
    return RunHeader(rows, TOY_BANNER if config.get("report", {}).get("toy") else None)


def git_state(checkout: Path) -> str:
    """The checkout's commit, with '(uncommitted changes)' when its tracked code (CODE_PATHS) differs from it: an
    edit to the docs while the run goes on is no change to what ran."""
    state = checkout_state(checkout, paths=CODE_PATHS)
    if state.commit is None:
        return "not a git checkout"
    return f"git {state.commit}" + (" (uncommitted changes)" if state.dirty else "")


def config_files_of_the_run() -> list[dict[str, str]]:
    """The run's config files with the sha256 each had when the run started, as the workflow's shell prefix exports
    them (ASSOCMEM_CONFIG_FILES, a JSON list of {"path", "sha256"}; a bare path has no recorded digest)."""
    try:
        files = json.loads(os.environ.get("ASSOCMEM_CONFIG_FILES", "[]"))
    except json.JSONDecodeError:
        return []
    if not isinstance(files, list):
        return []
    return [{"path": str(entry.get("path")), "sha256": str(entry.get("sha256", ""))} if isinstance(entry, dict)
            else {"path": str(entry), "sha256": ""} for entry in files]


def config_state(config_files: list[dict[str, str]]) -> str:
    """Each config file with the sha256 it had when the run started (the run's settings came from that text), and a
    note where the file changed or went since."""
    if not config_files:
        return "config/config.yaml (the default)"
    return "; ".join(config_file_state(entry["path"], entry.get("sha256", "")) for entry in config_files)


def config_file_state(path: str, at_start: str) -> str:
    now = sha256_file(path)[:12] if Path(path).is_file() else None
    if not at_start:
        return f"{path} (sha256 {now})" if now else f"{path} (gone)"
    if now == at_start[:12]:
        return f"{path} (sha256 {now})"
    since = f"now sha256 {now}" if now else "gone since"
    return f"{path} (sha256 {at_start[:12]} when the run started; {since}: the run used the text it started with)"


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    import platform

    return platform.processor() or platform.machine()
