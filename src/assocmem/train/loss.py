"""The training loss: summed next-token cross-entropy over the scored targets."""

from __future__ import annotations

import torch
from torch.nn import functional as F

from assocmem.stopping import IGNORE


def summed_nll(model: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Summed next-token cross-entropy (nats) over the non-padding targets; stays on the device (no host sync).

    The logits are the padded vocabulary's (a DecoderLM's padding columns are -inf: no probability, no gradient).
    log_softmax reads them as they are (bf16 under autocast) and computes and writes fp32: the cross-entropy of
    upcast logits, without an fp32 copy of the whole logits tensor first."""
    logits = model(inputs, padded=True)
    log_probs = F.log_softmax(logits.reshape(-1, logits.shape[-1]), dim=-1, dtype=torch.float32)
    return F.nll_loss(log_probs, targets.reshape(-1), ignore_index=IGNORE, reduction="sum")


def step_loss(model: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor, world: int,
              n_targets: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A micro-batch's loss to backpropagate, its summed NLL times ``world / n_targets`` (the step's token mean once
    DDP averages the ranks' gradients), and the summed NLL itself, detached. Compiled (``train.compile``), the
    scaling is part of the graph and its backward: no separate kernels for it, forward or backward."""
    nll = summed_nll(model, inputs, targets)
    return nll * world / n_targets, nll.detach()
