"""What a job will allocate, estimated before it allocates, so that a model or batch too large for the machine is
refused in one line (the estimate and the machine's memory) instead of dying in an allocation traceback or in the
kernel's OOM killer (issue 39).

The estimate is of the large buffers only and errs low (allocator overhead, temporary copies and the framework
itself are left out): a job refused here would certainly not fit; one that passes may still be tight.
"""

from __future__ import annotations

from typing import Any

from assocmem.errors import AssocmemError
from assocmem.model import ModelConfig

FLOAT_BYTES = 4  # fp32 weights, gradients, optimizer moments and activations
ADAM_STATE = 2  # AdamW keeps two moments per parameter
GIB = 1 << 30


def model_shape(spec: dict[str, Any], vocab_size: int, context: int) -> ModelConfig:
    """A config's model spec (``d_ff`` null = 4 x d_model) on a store of ``vocab_size`` tokens, with room for
    ``context`` positions (the model's own ``max_len`` if longer)."""
    return ModelConfig.from_dict({**spec, "max_len": max(int(spec.get("max_len", 64)), context),
                                  "bias": spec.get("bias") is not False}, vocab_size)


def parameter_count(shape: ModelConfig) -> int:
    """The parameters of ``assocmem.model.DecoderLM`` of this shape (a tied head counted once)."""
    d, f = shape.d_model, shape.d_ff
    biases = 7 * d + f if shape.bias else 0  # qkv, proj, both feed-forward layers, both LayerNorms
    per_block = 4 * d * d + 2 * d * f + 2 * d + biases
    embeddings = shape.vocab_size * d + shape.max_len * d
    head = 0 if shape.tie_embeddings else shape.vocab_size * d
    final_norm = 2 * d if shape.bias else d
    return shape.n_layer * per_block + embeddings + head + final_norm


def training_bytes(shape: ModelConfig, micro_batch: int, length: int) -> int:
    """Weights, gradients and AdamW's two moments, and the activations one micro-batch of ``length`` tokens keeps
    for the backward pass (per block: the residual stream, attention's q, k, v and output, the feed-forward's
    hidden layer before and after its GELU, the attention weights; then the logits and their gradient)."""
    state = (2 + ADAM_STATE) * parameter_count(shape)
    tokens = micro_batch * length
    per_block = tokens * (8 * shape.d_model + 2 * shape.d_ff) + micro_batch * shape.n_head * length * length
    logits = 2 * tokens * shape.vocab_size
    return FLOAT_BYTES * (state + shape.n_layer * per_block + logits)


def machine_memory(device: str = "cpu") -> tuple[int, str]:
    """The memory a job on ``device`` can use, in bytes, and what it is (host RAM or the GPU's memory)."""
    if device.startswith("cuda"):
        import torch

        if torch.cuda.is_available():
            index = torch.device(device).index or 0
            return torch.cuda.get_device_properties(index).total_memory, f"the memory of GPU {index}"
    import psutil

    return psutil.virtual_memory().total, "this machine's memory"


def gib(n_bytes: float) -> str:
    return f"{n_bytes / GIB:.3g} GiB"


def refuse_above_memory(what: str, estimate: int, device: str = "cpu") -> None:
    """Raise a one-line AssocmemError when ``estimate`` bytes exceed the memory of ``device``."""
    total, where = machine_memory(device)
    if estimate > total:
        raise AssocmemError(f"{what} needs at least {gib(estimate)} of memory by estimate, more than {where} "
                            f"({gib(total)}): make the model or the batch smaller")


def check_training_memory(train_cfg: dict[str, Any], model_spec: dict[str, Any], store_meta: dict[str, Any],
                          job: str) -> None:
    """Refuse a training job whose model, optimizer and one micro-batch's activations cannot fit its device (the
    store's ``meta.json`` gives the vocabulary and the batching; a sequence is at most the model's ``max_len``)."""
    from assocmem.runtime import resolve_device

    windows = store_meta.get("batching") != "sequences"
    length = int(train_cfg["block_size"]) if windows else int(model_spec.get("max_len", 64))
    shape = model_shape(model_spec, int(store_meta["vocab_size"]), length)
    micro_batch = int(train_cfg.get("micro_batch_size") or train_cfg["batch_size"])
    device = resolve_device(train_cfg.get("device", "cpu"), key="train.device")
    refuse_above_memory(f"training job {job} ({parameter_count(shape):.3g} parameters, micro-batch {micro_batch} x "
                        f"{length} tokens)", training_bytes(shape, micro_batch, length), device)
