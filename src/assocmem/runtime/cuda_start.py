"""A job's CUDA start, timed: the first call that touches a CUDA device creates its context, once per process, and
the main run on a GPU pays it in every job (issue 40 asks where those seconds go). :func:`cuda_ready` creates it at
once where the stage has resolved its device and logs how long it took; :func:`parse_cuda_start` reads it back
(``benchmarks/gpu_check.py cpu``)."""

from __future__ import annotations

import logging
import re
import time
from typing import Any

log = logging.getLogger("assocmem")
_LINE = re.compile(r"CUDA: context on (\S+) \(([^)]*)\) created in ([0-9.]+) s")


_READIED: set[str] = set()  # the devices this process has readied


def cuda_ready(device: Any) -> float | None:
    """Create ``device``'s CUDA context now, timed and logged; None (nothing done) on the CPU or where this process
    has readied the device before. torch's CUDA may be initialised already (a training's memory check reads the GPU's
    properties): that starts the driver, not the device's context, which the first allocation here creates, so the
    test is this process's own record, not ``torch.cuda.is_initialized()``."""
    import torch

    device = torch.device(device)
    if device.type != "cuda" or str(device) in _READIED:
        return None
    began = time.perf_counter()
    torch.empty(1, device=device)
    torch.cuda.synchronize(device)
    seconds = time.perf_counter() - began
    _READIED.add(str(device))
    log.info("CUDA: context on %s (%s) created in %.2f s", device, torch.cuda.get_device_name(device), seconds)
    return seconds


def parse_cuda_start(text: str) -> float | None:
    """The seconds of the first :func:`cuda_ready` line in a job's log; None where it has none (a CPU job)."""
    found = _LINE.search(text)
    return None if found is None else float(found.group(3))
