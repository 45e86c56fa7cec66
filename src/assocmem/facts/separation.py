"""Well-separated keys: how many keys of length n over q symbols can lie at Hamming distance >= d from one another.

A set of keys at pairwise distance >= d is a q-ary code of length n and minimum distance d. Its size A_q(n, d) is
bounded above by the sphere-packing (Hamming) bound, q^n / V(n, t) with t = floor((d - 1) / 2), and by the
Singleton bound, q^(n - d + 1); a request above the smaller of the two is impossible. Below, random sequential
rejection sampling (:mod:`assocmem.facts.generate`) never jams before the Gilbert-Varshamov size q^n / V(n, d - 1):
a code that no further key can join has radius-(d - 1) balls covering the whole space. Between the two, the sampler
may or may not get there, and it stops with an error when it does not.

V(n, r) is the number of keys within distance r of a key (a Hamming ball). All arithmetic is exact (integers).
"""

from __future__ import annotations

from collections.abc import Mapping
from math import comb
from typing import Any

import numpy as np


def ball_volume(q: int, n: int, radius: int) -> int:
    """Keys of length ``n`` over ``q`` symbols within Hamming distance ``radius`` of a given key."""
    return sum(comb(n, i) * (q - 1) ** i for i in range(min(radius, n) + 1))


def max_keys(q: int, n: int, d: int) -> int:
    """An upper bound on the number of keys at pairwise distance >= ``d``: the smaller of the sphere-packing and
    Singleton bounds (1 when ``d > n``: no two keys of length n differ in more than n places)."""
    if d <= 1:
        return q ** n
    sphere_packing = q ** n // ball_volume(q, n, (d - 1) // 2)
    singleton = q ** max(n - d + 1, 0)
    return min(sphere_packing, singleton)


def guaranteed_keys(q: int, n: int, d: int) -> int:
    """The Gilbert-Varshamov size ceil(q^n / V(n, d - 1)): random sequential rejection sampling always reaches it."""
    return -(-q ** n // ball_volume(q, n, d - 1))


def hamming(a: Any, b: Any) -> int:
    return sum(x != y for x, y in zip(a, b, strict=True))


def min_distance(keys: np.ndarray, others: np.ndarray | None = None, floor: int = 0) -> int | None:
    """The smallest Hamming distance between two rows of ``keys``, or between a row of ``keys`` and a row of
    ``others``; None without a pair. Exact, without comparing every pair: two keys at distance <= t agree on one
    of t + 1 disjoint groups of positions (pigeonhole), so for t = ``floor``, ``floor`` + 1, ... only keys that
    share a group are compared, and the first t at which such a pair lies within t is the answer."""
    rows = keys if others is None else np.concatenate([keys, others])
    side = np.zeros(len(rows), dtype=bool) if others is None else np.arange(len(rows)) >= len(keys)
    if (len(keys) < 2 and others is None) or (others is not None and (len(keys) == 0 or len(others) == 0)):
        return None
    length = rows.shape[1]
    for t in range(min(max(floor, 0), length - 1), length):
        groups = np.array_split(np.arange(length), t + 1)
        found = min((_closest_sharing(rows, side, group, others is not None) for group in groups), default=None)
        if found is not None and found <= t:
            return found
    return length  # no two keys agree anywhere


def _closest_sharing(rows: np.ndarray, side: np.ndarray, group: np.ndarray, across: bool) -> int:
    """The smallest distance between two rows that agree on the positions ``group`` (rows of different ``side``
    when ``across``); the key length when there is none."""
    code = _group_code(rows[:, group])
    order = np.argsort(code, kind="stable")
    code, sorted_rows, sorted_side = code[order], rows[order], side[order]
    best = rows.shape[1]
    for offset in range(1, len(rows)):
        same = np.flatnonzero(code[offset:] == code[:-offset])
        if not len(same):
            break  # sorted by code: no run of equal codes is longer than this offset
        if across:
            same = same[sorted_side[same] != sorted_side[same + offset]]
        if len(same):
            best = min(best, int(np.count_nonzero(sorted_rows[same] != sorted_rows[same + offset], axis=1).min()))
    return best


def _group_code(columns: np.ndarray) -> np.ndarray:
    """One integer per row naming its symbols on these columns (equal codes: equal symbols)."""
    base = int(columns.max(initial=0)) + 1
    if base ** columns.shape[1] < 2 ** 62:
        return columns.astype(np.int64) @ (base ** np.arange(columns.shape[1], dtype=np.int64))
    return np.unique(columns, axis=0, return_inverse=True)[1].ravel()


def request_problems(facts: Mapping[str, Any]) -> list[str]:
    """The problems of a ``dataset.facts`` config that no sampling can meet, each naming its key (relative to
    ``dataset``): more keys (facts + unseen) than a code of that length, alphabet and distance can hold."""
    q, n, d = facts["key_vocab"], facts["key_length"], facts["min_key_distance"]
    want = facts["count"] + facts["unseen"]
    bound = max_keys(q, n, d)
    if want <= bound:
        return []
    what = "distinct keys exist" if d <= 1 else f"keys can lie at pairwise Hamming distance >= {d}"
    return [f"facts.min_key_distance: {want} keys are needed (facts.count {facts['count']} + facts.unseen "
            f"{facts['unseen']}), but at most {bound} {what} with key_length {n} over key_vocab {q} "
            "(sphere-packing and Singleton bounds): impossible; lower facts.count, facts.unseen or "
            "facts.min_key_distance, or raise facts.key_length or facts.key_vocab"]
