"""Question-Formation data of another entropy, with its floor exact (issue 38): does a plateau land at the data's
entropy H or at 1?

Two transforms of the LM sequence ``<sos> w1..wk . task o1..om <eos>`` (:func:`assocmem.qf.generate.lm_tokens`),
applied at tokenization, so the generated files, their audit and their fidelity to McCoy's stay those of the grammar:

* ``synonyms`` = s: every input word w_i becomes one of s spellings (``w``, ``w~2``, ..., ``w~s``), drawn uniformly
  and independently per position; the output is built from the spelled words by the same rule (the question moves
  the spelled auxiliary), so it stays a function of the input. The map (sentence, spellings) -> sequence is
  one-to-one (strip ``~i``), so the sequence entropy grows by exactly E[k] log s (k words per sentence).
* ``output_copies`` = c: the output o1..om is written c times. The copies are determined by the input, so the
  entropy is unchanged and the predicted tokens grow by (c - 1) E[m], m = k + 1.

Hence, with H_seq, E[tokens] and E[k] of the grammar's split (:func:`assocmem.qf.floor.entropy_floor`),

    floor = (H_seq + E[k] log s) / (E[tokens] + (c - 1) (E[k] + 1))

per predicted token with ``<eos>`` (minus one token per sequence without it). The memorisation allowance (what a
model that memorised the pool could save) is the grammar's in nats per sequence, an upper bound: spellings only
make pool members harder to exclude. On the default's training split s = 3 gives about 1.45 and c = 3 about 0.52
nats/token (``config/entropy.yaml``; :func:`variant_floor` computes them).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from assocmem.errors import AssocmemError
from assocmem.qf.generate import EOS, SOS, QFExample, target_words
from assocmem.qf.grammar import template_of

SPELLING = "~"  # w~2 is the second spelling of w; the first is w itself
GRAMMAR_ONLY = ("source_floor_nats_per_token", "no_dedupe_floor_nats_per_token")  # floors of the grammar's tokens


@dataclass(frozen=True)
class Variant:
    synonyms: int = 1
    output_copies: int = 1

    @classmethod
    def from_config(cls, spec: Mapping[str, Any] | None) -> Variant:
        """The variant of a validated ``dataset.variant`` (None: the grammar's own data)."""
        return cls(**(spec or {}))

    @property
    def identity(self) -> bool:
        return self.synonyms == 1 and self.output_copies == 1

    def lm_tokens(self, example: QFExample, rng: np.random.Generator) -> list[str]:
        """The example's LM sequence under this variant (``rng`` draws the spellings)."""
        words, task, target = example.words, example.task, example.target
        if self.synonyms > 1:
            template = template_of(words)
            if template is None:
                raise AssocmemError(f"qf variant: {' '.join(words)!r} is not a sentence of the grammar")
            picks = rng.integers(1, self.synonyms + 1, size=len(words) - 1)
            words = (*(w if i == 1 else f"{w}{SPELLING}{i}" for w, i in zip(words[:-1], picks, strict=True)),
                     words[-1])
            target = target_words(words, task, template)
        return [SOS, *words, task, *(target * self.output_copies), EOS]


def variant_floor(base: Mapping[str, Any], variant: Variant) -> dict[str, Any]:
    """A split's floor record (:func:`assocmem.qf.floor.entropy_floor`) for the variant's sequences."""
    if variant.identity:
        return dict(base)
    words = float(base["expected_sentence_length"])
    entropy = float(base["seq_entropy_nats"]) + words * math.log(variant.synonyms)
    tokens = float(base["expected_predicted_tokens"]) + (variant.output_copies - 1) * (words + 1)
    saved = float(base["exclusion_bound_nats_per_token"]) * float(base["expected_predicted_tokens"])
    record = {key: value for key, value in base.items() if key not in GRAMMAR_ONLY}
    return {**record, "variant": {"synonyms": variant.synonyms, "output_copies": variant.output_copies},
            "grammar_floor_nats_per_token": base["floor_nats_per_token"],
            "floor_nats_per_token": entropy / tokens, "floor_nats_per_token_no_eos": entropy / (tokens - 1),
            "seq_entropy_nats": entropy, "expected_predicted_tokens": tokens,
            "exclusion_bound_nats_per_token": saved / tokens}


def variant_rng(seed: int, file_name: str) -> np.random.Generator:
    """The spellings' stream of one file: the config's seed and the file's name (question.train, the fresh file)."""
    return np.random.default_rng([seed, zlib.crc32(file_name.encode())])
