"""Cross-entropy of a trained model on large evaluation sets: a fresh sample from the data's own generator, so the
standard error of a run's level sits far below the gap between the data's entropy floor and 1, and McCoy et al.'s
real files where the config names one.

A Question-Formation file is encoded with the training store's vocabulary (unknown words become ``<unk>`` and are
counted). Each row's summed NLL is split into its ``<eos>`` term and the rest, so the CE is reported under both
conventions of the floor: *with* ``<eos>`` (every token after ``<sos>``, as the training loss) and *without* it
(``<eos>`` is determined by the tokens before it). Standard errors treat rows as independent clusters
(:func:`assocmem.stats.clustered_ce`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch.nn import functional as F

from assocmem.io import sha256_file
from assocmem.model import DecoderLM
from assocmem.progress import bar
from assocmem.qf.tokenize import UNK_ID, WordTokenizer, sequence_texts
from assocmem.qf.variant import Variant
from assocmem.stats import clustered_ce
from assocmem.tokenstore import read_store_meta
from assocmem.train import IGNORE, to_lm_batch

BATCH_SIZE = 512


def encode_file(path: Path, tokenizer_meta: dict[str, Any]) -> tuple[list[list[int]], int]:
    """Token ids of every LM sequence of a McCoy-format file (``<eos>`` appended), encoded as the store's tokenizer
    record says (its vocabulary, and its data variant if any), and the number of unknown words."""
    tokenizer = WordTokenizer({"vocab": tokenizer_meta["vocab"]})
    texts = sequence_texts(path, Variant.from_config(tokenizer_meta.get("variant")),
                           int(tokenizer_meta.get("variant_seed", 0)))
    ids = [row + [tokenizer.eot_id] for row in tokenizer.encode_batch(texts)]
    return ids, sum(token == UNK_ID for row in ids for token in row)


def _padded(rows: list[list[int]], pad_id: int) -> np.ndarray:
    batch = np.full((len(rows), max(len(row) for row in rows)), pad_id, dtype=np.int64)
    for i, row in enumerate(rows):
        batch[i, :len(row)] = row
    return batch


@torch.no_grad()
def row_losses(model: DecoderLM, sequences: list[list[int]], pad_id: int, desc: str = "evaluate",
               loss_from: int = 0) -> pd.DataFrame:
    """Per sequence: summed NLL over every scored target (``nll``; ``loss_from`` as the store's), the NLL of its
    last target, ``<eos>`` (``nll_eos``), and the number of targets (``tokens``). Sequences are sorted by length
    into batches, so little is padded. Runs where the model's weights are; the sums are the host's, in float64."""
    model.eval()
    device = next(model.parameters()).device
    order = np.argsort([len(row) for row in sequences], kind="stable")
    nll, nll_eos, tokens = (np.zeros(len(sequences)) for _ in range(3))
    progress = bar(total=len(order), desc=desc, unit="sequence")
    for start in range(0, len(order), BATCH_SIZE):
        rows = order[start:start + BATCH_SIZE]
        inputs, targets = to_lm_batch(_padded([sequences[i] for i in rows], pad_id), pad_id, loss_from)
        logits = model(inputs.to(device))
        losses = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.to(device).reshape(-1),
                                 ignore_index=IGNORE, reduction="none").reshape(targets.shape).cpu().double()
        scored = targets != IGNORE
        counts = scored.sum(dim=1)
        nll[rows] = losses.sum(dim=1).numpy()
        last = scored.long().cumsum(dim=1).argmax(dim=1)  # the first column where the count peaks: the last scored
        nll_eos[rows] = losses[torch.arange(len(rows)), last].numpy()
        tokens[rows] = counts.numpy()
        progress.update(len(rows))
    progress.close()
    return pd.DataFrame({"nll": nll, "nll_eos": nll_eos, "tokens": tokens.astype(np.int64)})


def summarise_losses(losses: pd.DataFrame) -> dict[str, Any]:
    """CE and its standard error with and without the ``<eos>`` term."""
    nll, nll_eos, tokens = (losses[c].to_numpy(dtype=np.float64) for c in ("nll", "nll_eos", "tokens"))
    ce, se = clustered_ce(nll, tokens)
    ce_no_eos, se_no_eos = clustered_ce(nll - nll_eos, tokens - 1)
    return {"rows": len(losses), "tokens": int(tokens.sum()), "ce": ce, "se": se, "ce_no_eos": ce_no_eos,
            "se_no_eos": se_no_eos}


def evaluate_files(model: DecoderLM, store_dir: Path, files: dict[str, Path]) -> dict[str, Any]:
    """The model's CE on each named McCoy-format file, encoded with the store's vocabulary."""
    meta = read_store_meta(store_dir)
    pad_id = int(meta["pad_id"])
    sets = {}
    for name, path in files.items():
        sequences, unknown = encode_file(path, meta["tokenizer"])
        sets[name] = {**summarise_losses(row_losses(model, sequences, pad_id, desc=f"evaluate {name}")),
                      "file": Path(path).name, "sha256": sha256_file(path), "unknown_words": unknown}
    return sets
