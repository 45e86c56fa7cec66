"""The process group of a multi-process (torchrun/DDP) training job: one GPU per process, or gloo on CPU."""

from __future__ import annotations

import os

import torch


def dist_rank_world() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def init_distributed(device: torch.device) -> torch.device:
    """Join the process group when launched by torchrun (WORLD_SIZE > 1); one GPU per process."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or torch.distributed.is_initialized():
        return device
    backend = "nccl" if device.type == "cuda" else "gloo"
    torch.distributed.init_process_group(backend=backend)
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    return device


def wrap_ddp(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    if dist_rank_world()[1] == 1:
        return model
    ids = [device.index] if device.type == "cuda" else None
    return torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)


def all_reduce_sum(value: float, device: torch.device) -> float:
    if dist_rank_world()[1] == 1:
        return value
    tensor = torch.tensor([value], dtype=torch.float64, device=device)
    torch.distributed.all_reduce(tensor)
    return float(tensor.item())


def finish_distributed() -> None:
    if dist_rank_world()[1] > 1:
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
