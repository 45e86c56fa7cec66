"""What a job will allocate, estimated before it allocates, so that a model or batch too large for the machine is
refused in one line (the estimate and the machine's memory) instead of dying in an allocation traceback or in the
kernel's OOM killer (issue 39).

The estimate is of the large buffers only (allocator overhead and the framework itself are left out): the training
and activations estimates err low (a job refused would certainly not fit; one that passes may still be tight); the
neighbours estimate measured 1.0-1.4x the peak RSS of real searches on synthetic activations (issue 39).
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


def refuse_above_memory(what: str, estimate: int, device: str = "cpu",
                        remedy: str = "make the model or the batch smaller") -> None:
    """Raise a one-line AssocmemError when ``estimate`` bytes exceed the memory of ``device``."""
    total, where = machine_memory(device)
    if estimate > total:
        raise AssocmemError(f"{what} needs at least {gib(estimate)} of memory by estimate, more than {where} "
                            f"({gib(total)}): {remedy}")


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


# The search's per-query working arrays over a candidate pool: float32 distances, int64 rows, the refine's float64
# exact distances and norm scale, and the sorted float64/int64 best lists.
POOL_BYTES_PER_CANDIDATE = 4 + 8 + 8 + 8 + 8 + 8
# A tile of scores of the CPU engines (faiss: 4096 queries x 1024 rows of float32; onednn's are smaller).
CPU_TILE_BYTES = 16 << 20
EXTRA_CANDIDATES = 8  # assocmem.knn.exact's refine fetches k + max(8, k // 4) candidates first
# A row of the neighbour frames (fraction, query row, rank, neighbour row as int64/float64, float32 distance, the
# layer's name as an object pointer), held twice: the per-layer frames and their concatenation.
FRAME_ROW_BYTES = 2 * (8 + 8 + 8 + 8 + 4 + 8)


def neighbours_bytes(n_train: int, n_heldout: int, n_radius: int, dim: int, n_layers: int,
                     cfg: dict[str, Any]) -> int:
    """Host memory of a neighbours job (:func:`assocmem.stages.neighbours`) from its activation files' shapes: the
    memory-mapped arrays once read (the finite check reads them whole), one layer's search (its float32 copies of
    the training and held-out rows, their de-duplicated and mean-centred copies, float64 squared norms, the
    refine's candidate pool per query and one tile of scores), the neighbour frames of every layer,
    and the radius test's sample (its float64 gain-free copy and float32 copies)."""
    k = int(cfg["k"]) + 1  # the self-search excludes each row's own id
    pool = k + max(EXTRA_CANDIDATES, k // 4)
    mapped = 4 * dim * (n_layers * (n_train + n_heldout) + n_radius)
    queries = max(n_train, n_heldout)
    search = 4 * dim * 3 * (n_train + n_heldout) + 8 * (n_train + n_heldout) + queries * pool * POOL_BYTES_PER_CANDIDATE
    frame_rows = n_layers * int(cfg["k"]) * (n_train * sum(float(f) for f in cfg["fractions"]) + n_heldout)
    radius_rows = min(n_radius, cfg.get("radius_sample_max") or n_radius)
    radius = 24 * dim * n_radius + radius_rows * pool * POOL_BYTES_PER_CANDIDATE
    return int(mapped + search + CPU_TILE_BYTES + FRAME_ROW_BYTES * frame_rows + radius)


def neighbours_device_bytes(n_train: int, n_heldout: int, dim: int) -> int:
    """GPU memory a neighbours job cannot do without: the training rows resident for the search and again for the
    refine's distances, and the held-out queries (score blocks take a share of what is free, so they adapt)."""
    return 4 * dim * (2 * n_train + n_heldout)


def check_neighbours_memory(meta: dict[str, Any], cfg: dict[str, Any], device: str, job: str) -> None:
    """Refuse a neighbours job whose arrays and searches cannot fit the machine (and, on CUDA, the GPU), from the
    activation dump's ``meta.json`` alone (nothing loaded yet)."""
    n_train, n_heldout = (int(meta["splits"][split]["n_chunks"]) for split in ("train", "heldout"))
    dim, n_layers, n_radius = int(meta["d_model"]), len(meta["layers"]), int(meta["radius"]["n_chunks"])
    what = f"neighbours job {job} ({n_layers} layers x {n_train} + {n_heldout} rows x d={dim})"
    remedy = "dump fewer chunks (activations.n_chunks, radius_chunks) or lower neighbours.radius_sample_max"
    refuse_above_memory(what, neighbours_bytes(n_train, n_heldout, n_radius, dim, n_layers, cfg),
                        remedy=remedy)
    if device.startswith("cuda"):
        refuse_above_memory(what, neighbours_device_bytes(n_train, n_heldout, dim), device, remedy)


def forward_bytes(shape: ModelConfig, batch: int, length: int) -> int:
    """One no-grad forward of ``batch`` sequences of ``length`` tokens that returns every hidden state, as the dump
    runs it: the states of every layer twice (the previous batch's are still referenced while the next is
    computed), the larger of one block's attention phase (its LayerNorm, q/k/v, output, reshaped copy, projection
    and residual; three score-sized arrays of the attention) and its feed-forward phase (LayerNorm, the hidden layer
    before and after its GELU, output and residual), and the logits."""
    tokens = batch * length
    states = 2 * (shape.n_layer + 2) * tokens * shape.d_model
    attention = 8 * tokens * shape.d_model + 3 * batch * shape.n_head * length * length
    feed_forward = 3 * tokens * shape.d_model + 2 * tokens * shape.d_ff
    return FLOAT_BYTES * (states + max(attention, feed_forward) + tokens * shape.vocab_size)


def activations_bytes(shape: ModelConfig, acts: dict[str, Any], n_dumped: int, length: int) -> tuple[int, int]:
    """(model-side, host-side) bytes of an activations job: the weights and one batch's forward; the output array
    of the largest split (``n_dumped`` layers x ``n_chunks``, or the radius sample's last layer)."""
    model = FLOAT_BYTES * parameter_count(shape) + forward_bytes(shape, int(acts["batch_size"]), length)
    rows = max(n_dumped * int(acts["n_chunks"]), int(acts.get("radius_chunks") or 0))
    return model, FLOAT_BYTES * rows * shape.d_model


def check_activations_memory(shape: ModelConfig, acts: dict[str, Any], n_dumped: int, length: int, device: str,
                             job: str) -> None:
    """Refuse an activations job whose model, one batch's hidden states and output arrays cannot fit its device
    (the model on ``device``, the output arrays in host memory)."""
    model, host = activations_bytes(shape, acts, n_dumped, length)
    what = (f"activations job {job} ({n_dumped} layers x {acts['n_chunks']} chunks x d={shape.d_model}, "
            f"batch {acts['batch_size']} x {length} tokens)")
    remedy = "lower activations.n_chunks, radius_chunks or batch_size"
    if device.startswith("cuda"):
        refuse_above_memory(what, model, device, remedy)
        refuse_above_memory(what, host, remedy=remedy)
    else:
        refuse_above_memory(what, model + host, remedy=remedy)
