"""The torch-free GPU probe the DAG sizes threads by (assocmem.runtime.gpu_probe), on made-up device directories and
torch version files, and against torch itself on this host."""

from __future__ import annotations

from pathlib import Path

import pytest

from assocmem.runtime.gpu_probe import (
    built_for_cuda,
    cuda_present,
    gpu_nodes,
    torch_version_file,
    visible_devices_hidden,
)

CUDA_BUILD = "from typing import Optional\n__version__ = '2.11.0+cu130'\ncuda: Optional[str] = '13.0'\nhip = None\n"
CPU_BUILD = "from typing import Optional\n__version__ = '2.13.0+cpu'\ncuda: Optional[str] = None\nhip = None\n"


def version_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "version.py"
    path.write_text(text)
    return path


def dev_dir(tmp_path: Path, *names: str) -> Path:
    root = tmp_path / "dev"
    root.mkdir()
    for name in names:
        (root / name).touch()
    return root


@pytest.mark.parametrize(("text", "cuda"), [
    (CUDA_BUILD, True),
    (CPU_BUILD, False),
    ("cuda = '12.4'\n", True),  # a plain assignment
    ("cuda = ''\n", False),
    ("cuda = None\n", False),
    ("__version__ = '2.0'\n", False),  # no cuda at all
    ("cuda: Optional[str]\n", False),  # annotated, no value
    ("cuda = get_cuda()\n", False),  # not a constant
    ("cuda = (\n", False),  # not Python
])
def test_a_torch_build_is_for_cuda_when_its_version_file_names_a_cuda_version(tmp_path, text: str,
                                                                              cuda: bool) -> None:
    assert built_for_cuda(version_file(tmp_path, text)) is cuda


def test_no_torch_version_file_is_no_cuda_build(tmp_path) -> None:
    assert built_for_cuda(None) is False
    assert built_for_cuda(tmp_path / "missing.py") is False


def test_the_installed_torch_is_read_as_torch_itself_says() -> None:
    import torch

    assert built_for_cuda(torch_version_file()) is (torch.version.cuda is not None)


def test_only_the_gpu_nodes_of_the_nvidia_driver_count(tmp_path) -> None:
    root = dev_dir(tmp_path, "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset", "nvidia1", "nvidia0",
                   "null")
    assert gpu_nodes(root) == ["nvidia0", "nvidia1"]
    assert gpu_nodes(tmp_path / "absent") == []


@pytest.mark.parametrize(("value", "hidden"), [
    (None, False), ("", True), (" ", True), ("-1", True), ("-1,0", True), ("0", False), ("1,0", False),
    ("GPU-8d3c", False),
])
def test_cuda_visible_devices_hides_every_device_when_empty_or_minus_one(value: str | None, hidden: bool) -> None:
    environ = {} if value is None else {"CUDA_VISIBLE_DEVICES": value}
    assert visible_devices_hidden(environ) is hidden


@pytest.mark.parametrize(("nodes", "build", "environ", "present"), [
    (("nvidia0", "nvidiactl"), CUDA_BUILD, {}, True),
    (("nvidia0", "nvidiactl"), CUDA_BUILD, {"CUDA_VISIBLE_DEVICES": "0"}, True),
    (("nvidia0", "nvidiactl"), CUDA_BUILD, {"CUDA_VISIBLE_DEVICES": ""}, False),  # every device hidden
    (("nvidia0", "nvidiactl"), CPU_BUILD, {}, False),  # torch cannot use it
    (("nvidiactl",), CUDA_BUILD, {}, False),  # a driver, no GPU node
    ((), CUDA_BUILD, {}, False),  # no driver
])
def test_cuda_is_present_when_a_gpu_node_a_cuda_build_and_a_visible_device_all_hold(
        tmp_path, nodes: tuple[str, ...], build: str, environ: dict[str, str], present: bool) -> None:
    found = cuda_present(dev_dir=dev_dir(tmp_path, *nodes), version_file=version_file(tmp_path, build),
                         environ=environ)
    assert found is present


@pytest.mark.gpu  # not skipped on a CPU: it holds there too
def test_the_probe_agrees_with_torch_on_this_host() -> None:
    """On a CPU host (CI) both say no; on the GPU machine (gpu_check.sh runs this suite) both say yes."""
    import torch

    assert cuda_present() is torch.cuda.is_available()
