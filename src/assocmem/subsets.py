"""Training subsets: the first X% of the training split's fixed order, as in the paper (Fig. 3: "the first
1% / 0.1% of OpenWebText"; Fig. 4 analogue: the first X% of McCoy's training sequences).

``by="document"`` keeps the first floor(fraction * n_docs) documents (for Question-Formation a document is one
example) and cuts after the last one's end-of-text id. ``by="token"`` keeps exactly the first
floor(fraction * n_tokens) tokens, so the last document is usually cut mid-way (``partial_last_doc``).
Fractions are read as decimals (0.001 means 1/1000 exactly) before flooring; at least one unit is kept.
The training split is in a fixed order (generation order for QF, source order for corpora), so the subsets
are nested: the 1% subset is inside the 10% subset. Every other split is shared by all subsets.

The result is a *view* store (:mod:`assocmem.tokenstore`): ``out_dir/meta.json`` points at the token range
``[0, token_end)`` of the parent's training split; nothing is copied.
"""

from __future__ import annotations

import math
import os
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from assocmem.errors import AssocmemError
from assocmem.io import write_json
from assocmem.tokenstore import TokenStore, meta_path, read_store_meta

BY = ("document", "token")
_SCAN_TOKENS = 1 << 22  # tokens per chunk when scanning for end-of-text ids, to keep memory bounded
_SHARED_KEYS = ("format", "format_version", "dtype", "vocab_size", "eot_id", "pad_id", "tokenizer", "batching",
                "roles", "loss_tokens")
_OPTIONAL_KEYS = ("loss_from",)  # a store's keys that only some kinds write (facts: the first scored position)


def prefix_count(fraction: float, total: int) -> int:
    """floor(fraction * total) with the fraction read as a decimal, at least 1."""
    if not 0 < fraction <= 1:
        raise AssocmemError(f"subset fraction must be in (0, 1], got {fraction}")
    return max(1, math.floor(Fraction(repr(float(fraction))) * total))


def make_subset(store_dir: str | os.PathLike[str], fraction: float, *, by: str = "document",
                out_dir: str | os.PathLike[str], split: str = "train") -> dict[str, Any]:
    """Write the view of the first ``fraction`` of ``split`` into ``out_dir/meta.json``; return that meta.

    ``meta["subset"]`` states the fraction, ``n_tokens``, ``n_docs`` (documents with at least one token),
    ``n_docs_complete``, ``partial_last_doc``, the token range and the parent's totals.
    """
    store_dir, out_dir = Path(store_dir), Path(out_dir)
    if by not in BY:
        raise AssocmemError(f"subsets.by must be one of {BY}, got {by!r}")
    if out_dir.resolve() == store_dir.resolve():
        raise AssocmemError(f"make_subset: out_dir {out_dir} must differ from the parent store directory")
    parent_meta = read_store_meta(store_dir)
    if "view" in parent_meta:
        raise AssocmemError(f"{meta_path(store_dir)} is itself a view; make subsets of the full store")
    parent = TokenStore(store_dir, split)
    if by == "document":
        n_complete = prefix_count(fraction, parent.n_docs)
        token_end, partial = _document_end(parent, n_complete), False
    else:
        token_end = prefix_count(fraction, parent.n_tokens)
        n_complete, partial = _documents_before(parent, token_end)
    n_docs = n_complete + int(partial)
    subset = {
        "by": by, "fraction": fraction, "n_tokens": token_end, "n_docs": n_docs, "n_docs_complete": n_complete,
        "partial_last_doc": partial, "token_range": [0, token_end],
        "cut": "after the last kept document's end-of-text id" if by == "document" else "exact token",
        "order": "the training split's fixed order (nested prefixes)",
        "parent": {"split": split, "n_tokens": parent.n_tokens, "n_docs": parent.n_docs,
                   "order_sha256": parent.info.get("order_sha256")},
    }
    view_split: dict[str, Any] = {"n_tokens": token_end, "n_docs": n_docs}
    meta: dict[str, Any] = {key: parent_meta[key] for key in _SHARED_KEYS}
    meta.update({key: parent_meta[key] for key in _OPTIONAL_KEYS if key in parent_meta})
    # the parent's per-split statistics without shard lists, for stages that size models from every split
    meta["splits"] = {name: {k: v for k, v in info.items() if k != "shards"}
                      for name, info in parent_meta["splits"].items()}
    meta["view"] = {"parent": os.path.relpath(store_dir.resolve(), out_dir.resolve()), "splits": {split: view_split}}
    meta["subset"] = subset
    if parent.batching == "sequences" and not partial:
        view = TokenStore(out_dir, split, meta)
        lengths = view.lengths()
        view_split.update(max_len=int(lengths.max()), mean_len=float(lengths.mean()))
    write_json(meta_path(out_dir), meta)
    return meta


def _document_end(store: TokenStore, n_docs: int) -> int:
    """Token offset just after document ``n_docs - 1``'s end-of-text id."""
    if store.batching == "sequences":
        return int(store.offsets[n_docs])
    seen, position = 0, 0
    while position < store.n_tokens:
        length = min(_SCAN_TOKENS, store.n_tokens - position)
        hits = np.flatnonzero(store.window(position, length) == store.eot_id)
        if seen + len(hits) >= n_docs:
            return position + int(hits[n_docs - seen - 1]) + 1
        seen += len(hits)
        position += length
    raise AssocmemError(f"{store.store_dir}: split {store.split!r} holds fewer end-of-text ids than its "
                        f"{store.n_docs} documents: the store is corrupt")


def _documents_before(store: TokenStore, token_end: int) -> tuple[int, bool]:
    """(complete documents in tokens [0, token_end), whether a document is cut at token_end)."""
    complete, position = 0, 0
    while position < token_end:
        length = min(_SCAN_TOKENS, token_end - position)
        complete += int(np.count_nonzero(store.window(position, length) == store.eot_id))
        position += length
    return complete, bool(store.window(token_end - 1, 1)[0] != store.eot_id)
