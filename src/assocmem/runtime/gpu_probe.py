"""Whether this host's jobs will run on a CUDA GPU, asked while Snakemake builds the DAG: without importing torch
(seconds, and a CUDA context in the scheduler's process) and without a driver call. Three things must hold: a GPU
device node of the NVIDIA driver (``/dev/nvidia0``, ``/dev/nvidia1``, ...), a torch built for CUDA (its
``torch/version.py`` names a CUDA version), and ``CUDA_VISIBLE_DEVICES`` not hiding every device.

It only sizes the jobs' CPU threads (:func:`assocmem.runtime.job_threads`); the job itself asks torch
(:func:`assocmem.runtime.resolve_device`) and records the device it used. Where the probe is wrong the cost is
speed, never a result: a GPU it misses leaves the jobs their CPU share, as before; a GPU torch cannot use (a driver
too old for the build) runs those jobs on the CPU with ``threads_per_job`` threads."""

from __future__ import annotations

import ast
import importlib.util
import os
import re
from collections.abc import Mapping
from pathlib import Path

GPU_NODE = re.compile(r"nvidia\d+")


def torch_version_file() -> Path | None:
    """The installed torch's ``version.py``, found without importing torch; None where torch is not installed."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return None
    return Path(spec.origin).parent / "version.py"


def built_for_cuda(version_file: Path | None) -> bool:
    """Whether a torch ``version.py`` names a CUDA version (``cuda = '13.0'``; a CPU build has ``cuda = None``)."""
    if version_file is None or not version_file.is_file():
        return False
    try:
        tree = ast.parse(version_file.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return False
    for node in tree.body:
        targets = [node.target] if isinstance(node, ast.AnnAssign) else getattr(node, "targets", [])
        if any(isinstance(target, ast.Name) and target.id == "cuda" for target in targets):
            value = getattr(node.value, "value", None)  # a constant's value; None for any other expression
            return isinstance(value, str) and bool(value)
    return False


def gpu_nodes(dev_dir: Path = Path("/dev")) -> list[str]:
    """The NVIDIA driver's GPU device nodes (``nvidia0``, ...; not ``nvidiactl`` or ``nvidia-uvm``)."""
    try:
        return sorted(entry.name for entry in dev_dir.iterdir() if GPU_NODE.fullmatch(entry.name))
    except OSError:
        return []


def visible_devices_hidden(environ: Mapping[str, str]) -> bool:
    """Whether ``CUDA_VISIBLE_DEVICES`` hides every device (set to nothing, or a list starting with -1)."""
    value = environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return False
    first = value.split(",")[0].strip()
    return first in ("", "-1")


def cuda_present(*, dev_dir: Path = Path("/dev"), version_file: Path | None = None,
                 environ: Mapping[str, str] | None = None) -> bool:
    """Whether torch will most likely see a CUDA GPU here (the module docstring says how it is told)."""
    if visible_devices_hidden(os.environ if environ is None else environ):
        return False
    if not gpu_nodes(dev_dir):
        return False
    return built_for_cuda(version_file if version_file is not None else torch_version_file())
