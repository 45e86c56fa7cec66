"""assocmem.use.sample: reproducible from a seed, words of the vocabulary, at most --max-new new tokens, and a
sequence ends at its first <eos>."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from trained_run import run_dir, store_dir

from assocmem.errors import AssocmemError
from assocmem.tokenstore import read_store_meta
from assocmem.use.checkpoint import load_model
from assocmem.use.sample import generate, sample_texts
from assocmem.use.vocabulary import default_store, load_vocabulary

EOS = 3


class Scripted(torch.nn.Module):
    """A stand-in model: after the prompt it puts ``weight`` on each next id of ``script``, the rest on <eos>."""

    def __init__(self, script: list[int], prompt_len: int, weight: float = 20.0, vocab: int = 12) -> None:
        super().__init__()
        self.cfg = SimpleNamespace(max_len=64)
        self.bias = torch.nn.Parameter(torch.zeros(vocab))
        self.script, self.prompt_len, self.weight = script, prompt_len, weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        logits = torch.zeros(*idx.shape, len(self.bias))
        step = idx.shape[1] - self.prompt_len
        logits[:, -1, self.script[min(step, len(self.script) - 1)]] = self.weight
        return logits


@pytest.fixture(scope="module")
def model_and_vocabulary(trained):
    model = load_model(run_dir(trained))
    return model, load_vocabulary(default_store(run_dir(trained) / "best.pt"), model)


def test_samples_repeat_with_the_seed_and_are_words_of_the_vocabulary(model_and_vocabulary, trained) -> None:
    model, vocabulary = model_and_vocabulary
    first = sample_texts(model, vocabulary, n=6, max_new=30, seed=11)
    assert first == sample_texts(model, vocabulary, n=6, max_new=30, seed=11)
    assert first != sample_texts(model, vocabulary, n=6, max_new=30, seed=12)
    words = set(read_store_meta(store_dir(trained))["tokenizer"]["vocab"]) - {"<sos>", "<eos>", "<pad>"}
    assert len(first) == 6 and all(line.split() and set(line.split()) <= words for line in first)


def test_a_prompt_is_continued_and_max_new_bounds_each_sample(model_and_vocabulary) -> None:
    model, vocabulary = model_and_vocabulary
    prompt = "the newt does swim . quest"
    for line in sample_texts(model, vocabulary, prompt, n=4, max_new=3, seed=0):
        assert line.startswith(prompt + " ") and len(line.split()) <= len(prompt.split()) + 3
    start = vocabulary.encode_prompt(prompt)
    assert start == vocabulary.encode_prompt("<sos> " + prompt) and vocabulary.decode(start) == prompt
    assert all(len(ids) <= 3 for ids in generate(model, start, n=8, max_new=3, stop_id=vocabulary.stop_id))


def test_a_sequence_ends_at_its_first_eos() -> None:
    assert generate(Scripted([7, 8, EOS, 9], prompt_len=1), [2], n=2, max_new=10, stop_id=EOS) == [[7, 8, EOS]] * 2
    assert generate(Scripted([7, 8, 9], prompt_len=1), [2], n=1, max_new=2, stop_id=EOS) == [[7, 8]]
    # half the mass on <eos> at every step: rows stop at different steps, and nothing follows a row's <eos>
    rows = generate(Scripted([5], prompt_len=1, weight=0.0, vocab=6), [2], n=40, max_new=30, stop_id=EOS, seed=1)
    assert len({len(row) for row in rows}) > 3
    assert all(EOS not in row[:-1] for row in rows) and all(row[-1] == EOS or len(row) == 30 for row in rows)


def test_temperature_zero_and_top_1_take_the_most_likely_token(model_and_vocabulary) -> None:
    model, vocabulary = model_and_vocabulary
    greedy = sample_texts(model, vocabulary, n=2, temperature=0, seed=1)
    assert greedy == sample_texts(model, vocabulary, n=2, temperature=0, seed=2) and greedy[0] == greedy[1]
    assert sample_texts(model, vocabulary, n=2, top_k=1, seed=3) == greedy


def test_a_prompt_word_outside_the_vocabulary_is_named(model_and_vocabulary) -> None:
    _, vocabulary = model_and_vocabulary
    with pytest.raises(AssocmemError, match=r"prompt word\(s\) 'zorblax' not in the vocabulary of .*meta.json"):
        vocabulary.encode_prompt("the zorblax does swim")


def test_the_store_is_found_beside_the_run_or_named_when_it_is_not(results, tmp_path) -> None:
    model = load_model(run_dir(results))
    assert default_store(run_dir(results) / "model.pt") == store_dir(results)
    with pytest.raises(AssocmemError, match="pass --store") as err:
        default_store(tmp_path / "elsewhere" / "best.pt")
    assert "\n" not in str(err.value)
    (store_dir(results) / "meta.json").unlink()
    with pytest.raises(AssocmemError, match=f"not at {store_dir(results)}: pass --store DIR"):
        default_store(run_dir(results) / "best.pt")
    with pytest.raises(AssocmemError, match=r"missing file: .*tokens/meta.json \(written by job 'tokenize"):
        load_vocabulary(store_dir(results), model)
