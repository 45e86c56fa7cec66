"""A trained model's CE (nats/token, with its clustered standard error) on a file or on a split of its token store,
computed by the pipeline's own evaluation code (``assocmem.evaluation``).

A Question-Formation model is scored per sequence, with and without ``<eos>``: on a McCoy-format file exactly as
the evaluate stage scores it, or on a store split's stored sequences. A corpus model is scored on consecutive
windows of its context length over the token stream (a plain text file is one document), each token after the
first predicted once; ``<eos>`` does not apply.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from assocmem.errors import AssocmemError
from assocmem.evaluation import evaluate_files, row_losses, summarise_losses
from assocmem.model import DecoderLM
from assocmem.stats import clustered_ce
from assocmem.tokenstore import TokenStore, read_store_meta
from assocmem.use.vocabulary import Vocabulary

T = TypeVar("T")
NO_PADDING = -1  # an id no token has: windows of one length need no padding, so no target is masked


def evaluate_file(model: DecoderLM, vocabulary: Vocabulary, file: Path) -> dict[str, Any]:
    """The model's CE on ``file``: a McCoy-format file for a word-level model, plain text for a corpus model."""
    if not file.is_file():
        raise AssocmemError(f"evaluation file not found: {file}")
    if vocabulary.words:
        sets = naming(str(file), lambda: evaluate_files(model, vocabulary.store_dir, {file.name: file}))
        return {**sets[file.name], "unit": "sequences"}
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise AssocmemError(f"{file}: not UTF-8 text (byte {err.start}: {err.reason})") from err
    ids = vocabulary.tokenizer.encode_batch([text])[0] + [vocabulary.stop_id]
    return {**window_ce(model, ids, what=str(file)), "file": file.name}


def evaluate_split(model: DecoderLM, vocabulary: Vocabulary, split: str | None = None,
                   limit: int | None = None) -> dict[str, Any]:
    """The model's CE on a split of its token store (default: the store's validation split), on its first
    ``limit`` sequences (windows, for a corpus store) if given."""
    store = TokenStore(vocabulary.store_dir, split or read_store_meta(vocabulary.store_dir)["roles"]["validation"])
    if store.batching == "sequences":
        count = len(store) if limit is None else min(limit, len(store))
        sequences = [store.sequence(i).tolist() for i in range(count)]
        losses = row_losses(model, sequences, int(store.pad_id), desc=f"evaluate {store.split}",
                            loss_from=store.loss_from)
        summary = naming(f"split {store.split!r} of {store.store_dir}", lambda: summarise_losses(losses))
        return {**summary, "split": store.split, "unit": "sequences"}
    width = model.cfg.max_len
    n_tokens = store.n_tokens if limit is None else min(store.n_tokens, limit * width + 1)
    ids = store.window(0, n_tokens).tolist()
    return {**window_ce(model, ids, what=f"split {store.split!r} of {store.store_dir}"), "split": store.split}


def naming(what: str, compute: Callable[[], T]) -> T:
    """``compute()``, its one-line error prefixed with ``what`` unless it names it already."""
    try:
        return compute()
    except AssocmemError as err:
        if what in str(err):
            raise
        raise AssocmemError(f"{what}: {err}") from err


def windows(ids: list[int], width: int) -> list[list[int]]:
    """Windows of ``width + 1`` ids, each starting where the previous one ends, so that every id after the first
    is a target exactly once; the last window may be shorter."""
    return [ids[start:start + width + 1] for start in range(0, len(ids) - 1, width)]


def window_ce(model: DecoderLM, ids: list[int], what: str) -> dict[str, Any]:
    """CE over the windows of ``ids`` (a token stream), clustered by window."""
    rows = windows(ids, model.cfg.max_len)
    if not rows:
        raise AssocmemError(f"{what} holds fewer than 2 tokens: nothing to predict")
    full = [row for row in rows if len(row) == len(rows[0])]
    groups = [group for group in (full, rows[len(full):]) if group]  # each group has one length: no padding
    losses = pd.concat([row_losses(model, group, NO_PADDING, desc="evaluate") for group in groups])
    nll, tokens = losses["nll"].to_numpy(), losses["tokens"].to_numpy(dtype=np.float64)
    ce, se = naming(what, lambda: clustered_ce(nll, tokens))
    return {"rows": len(losses), "tokens": int(tokens.sum()), "ce": ce, "se": se, "unit": "windows"}
