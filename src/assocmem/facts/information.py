"""The exact information content of the facts, and the cross-entropy floor it implies.

The values are i.i.d. uniform over ``value_vocab`` = V symbols and independent of the keys, so given the keys the
values of the D training facts carry exactly

    H(values | keys) = D * value_length * log2 V bits,

which is the quantity counted: what a model must store to recall every value from its key (the loss scores the
value tokens and ``<eos>`` only, never the keys, so the key set itself need not be stored). The Bayes-optimal
next-token distribution then gives, per value token,

* a stored fact (one of the D training facts, the table known): 0 nats, its value is determined by its key;
* an unseen fact (a fresh key): log V nats, its value is independent of everything stored, so uniform.

``<eos>`` follows the last value token deterministically (0 nats), so per scored token (value_length values and
``<eos>``) the floors are 0 and value_length * log V / (value_length + 1). The randomness of the key set is not
counted; where keys are only distinct (min_key_distance 1) the ordered key sequence is uniform over the
K! / (K - D)! sequences of distinct keys (K = key_vocab^key_length) and its entropy, log2 of that count, is given
for reference; at a larger minimum distance the sampler's key law has no closed form and none is given.
"""

from __future__ import annotations

import math
from typing import Any

COUNTED = ("H(values | keys) of the training facts: D x value_length x log2(value_vocab) bits (values i.i.d. "
           "uniform, independent of the keys); the key set's own randomness is not counted, the loss never "
           "scores key tokens")


def key_sequence_bits(key_space: int, count: int, min_key_distance: int) -> float | None:
    """Entropy (bits) of the ordered sequence of ``count`` keys when keys are only distinct (uniform over the
    sequences of distinct keys); None at a larger minimum distance (no closed form)."""
    if min_key_distance > 1:
        return None
    return math.fsum(math.log2(key_space - i) for i in range(count))


def information_content(count: int, unseen: int, value_length: int, value_vocab: int, *, key_space: int,
                        min_key_distance: int) -> dict[str, Any]:
    """The information content of ``count`` stored facts (and ``unseen`` held-out ones) and the per-token floors."""
    bits_per_token, nats_per_token = math.log2(value_vocab), math.log(value_vocab)
    scored = value_length + 1  # the value tokens and <eos>
    return {
        "counted": COUNTED,
        "facts": count,
        "bits": count * value_length * bits_per_token,
        "nats": count * value_length * nats_per_token,
        "bits_per_fact": value_length * bits_per_token,
        "bits_per_value_token": bits_per_token,
        "unseen_bits": unseen * value_length * bits_per_token,
        "nats_per_value_token": {"stored": 0.0, "unseen": nats_per_token},
        "scored_tokens_per_fact": scored,
        "nats_per_scored_token": {"stored": 0.0, "unseen": value_length * nats_per_token / scored},
        "key_sequence_bits": key_sequence_bits(key_space, count, min_key_distance),
    }


INFORMATION_HEADER = ["quantity", "value"]


def information_rows(record: dict[str, Any]) -> list[list[Any]]:
    """The report's table of an ``information.json`` record (:func:`assocmem.facts.generate.write_facts`)."""
    s, keys, info = record["settings"], record["keys"], record["information"]
    achieved = keys["min_distance_train"]
    return [
        ["facts D (stored) / unseen", f"{s['count']} / {s['unseen']}"],
        ["key: length x vocabulary", f"{s['key_length']} x {s['key_vocab']} ({keys['space']} keys)"],
        ["value: length x vocabulary V", f"{s['value_length']} x {s['value_vocab']}"],
        ["min key distance: requested / reached (stored; unseen to stored)",
         f"{keys['min_distance_requested']} / {'n/a' if achieved is None else achieved}; "
         f"{keys['min_distance_unseen_to_train']}"],
        ["information stored, H(values | keys) (bits)", f"{info['bits']:.6g}"],
        ["bits per fact", f"{info['bits_per_fact']:.6g}"],
        ["floor, stored facts (nats per value token)", f"{info['nats_per_value_token']['stored']:g}"],
        ["floor, unseen facts (nats per value token = ln V)", f"{info['nats_per_value_token']['unseen']:.6g}"],
        ["floor, unseen facts (nats per scored token, values and <eos>)",
         f"{info['nats_per_scored_token']['unseen']:.6g}"],
        ["seed", s["seed"]],
    ]
