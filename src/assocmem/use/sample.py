"""Sampling from a trained model: ancestral sampling with a temperature and an optional top-k cut, reproducible
from a seed (on one device)."""

from __future__ import annotations

import torch

from assocmem.model import DecoderLM
from assocmem.use.vocabulary import Vocabulary


def next_tokens(logits: torch.Tensor, temperature: float, top_k: int | None,
                generator: torch.Generator) -> torch.Tensor:
    """One token id per row of ``logits`` (rows, vocabulary): the most likely at temperature 0, else drawn from
    softmax(logits / temperature) restricted to the ``top_k`` most likely tokens."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator).squeeze(1)


@torch.no_grad()
def generate(model: DecoderLM, prompt: list[int], *, n: int, max_new: int, stop_id: int, temperature: float = 1.0,
             top_k: int | None = None, seed: int = 0) -> list[list[int]]:
    """``n`` continuations of ``prompt``, each of at most ``max_new`` new ids and ending at the first ``stop_id``
    (included); the model sees at most its last ``max_len`` ids."""
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed)
    tokens = torch.tensor([prompt] * n, dtype=torch.long, device=device)
    finished = torch.zeros(n, dtype=torch.bool, device=device)
    model.eval()
    for _ in range(max_new):
        if bool(finished.all()):
            break
        logits = model(tokens[:, -model.cfg.max_len:])[:, -1, :].float()
        chosen = next_tokens(logits, temperature, top_k, generator).masked_fill(finished, stop_id)
        tokens = torch.cat([tokens, chosen[:, None]], dim=1)
        finished |= chosen == stop_id
    return [until_stop(row[len(prompt):], stop_id) for row in tokens.tolist()]


def until_stop(ids: list[int], stop_id: int) -> list[int]:
    return ids[:ids.index(stop_id) + 1] if stop_id in ids else ids


def sample_texts(model: DecoderLM, vocabulary: Vocabulary, prompt: str = "", *, n: int = 5, max_new: int = 40,
                 temperature: float = 1.0, top_k: int | None = None, seed: int = 0) -> list[str]:
    """``n`` samples as text, prompt included, one line each (a corpus sample's newlines are written ``\\n``)."""
    start = vocabulary.encode_prompt(prompt)
    continuations = generate(model, start, n=n, max_new=max_new, stop_id=vocabulary.stop_id,
                             temperature=temperature, top_k=top_k, seed=seed)
    return [vocabulary.decode(start + ids).replace("\n", "\\n") for ids in continuations]
