"""assocmem.use.evaluate: the pipeline's own CE (assocmem.evaluation) of a model on a file or a store split; a
corpus model on consecutive windows, every token after the first predicted once."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import make_corpus_store
from trained_run import dev_file, run_dir, store_dir

from assocmem.corpus.bpe import get_tokenizer
from assocmem.errors import AssocmemError
from assocmem.evaluation import evaluate_files
from assocmem.model import DecoderLM, ModelConfig
from assocmem.use.checkpoint import load_model
from assocmem.use.evaluate import evaluate_file, evaluate_split, window_ce, windows
from assocmem.use.sample import sample_texts
from assocmem.use.vocabulary import load_vocabulary

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


@pytest.fixture(scope="module")
def qf(trained):
    model = load_model(run_dir(trained))
    return model, load_vocabulary(store_dir(trained), model)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A corpus store whose byte-level BPE lies in the store under a relative name, as tokenize writes it, and an
    untrained model of its vocabulary."""
    root = tmp_path_factory.mktemp("corpus")
    rng = np.random.default_rng(0)
    docs = [" ".join(rng.choice(WORDS, size=30)) for _ in range(20)]
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        tokenizer = get_tokenizer({"kind": "bytelevel_bpe", "path": "tokenizer.json", "vocab_size": 300},
                                  train_texts=iter(docs))
        make_corpus_store(root, docs, tokenizer, splits=("train", "val"))
    torch.manual_seed(0)
    model = DecoderLM(ModelConfig(vocab_size=tokenizer.vocab_size, n_layer=1, d_model=16, n_head=2, d_ff=32,
                                  max_len=16)).eval()
    return model, load_vocabulary(root, model)


@torch.no_grad()
def direct_ce(model: DecoderLM, rows: list[list[int]]) -> float:
    total, count = 0.0, 0
    for row in rows:
        tokens = torch.tensor(row)[None]
        log_probs = torch.log_softmax(model(tokens[:, :-1]), dim=-1)[0]
        total -= float(log_probs[torch.arange(len(row) - 1), tokens[0, 1:]].double().sum())
        count += len(row) - 1
    return total / count


def test_a_qf_file_gets_the_evaluate_stages_numbers(qf, trained) -> None:
    model, vocabulary = qf
    result = evaluate_file(model, vocabulary, dev_file(trained))
    stage = evaluate_files(model, store_dir(trained), {"dev": dev_file(trained)})["dev"]
    assert {key: result[key] for key in stage} == stage and result["unit"] == "sequences"
    assert result["ce_no_eos"] != result["ce"] and result["rows"] == 8


def test_a_store_split_is_its_stored_sequences(qf, trained) -> None:
    model, vocabulary = qf
    split = evaluate_split(model, vocabulary)  # the validation split: dev, the same sequences as question.dev
    from_file = evaluate_file(model, vocabulary, dev_file(trained))
    assert split["split"] == "dev" and split["ce"] == pytest.approx(from_file["ce"], rel=1e-12)
    assert split["tokens"] == from_file["tokens"] and split["se_no_eos"] == pytest.approx(from_file["se_no_eos"])
    first = evaluate_split(model, vocabulary, "train", limit=3)
    assert first["rows"] == 3 and first["tokens"] < evaluate_split(model, vocabulary, "train")["tokens"]


def test_windows_predict_every_token_after_the_first_once() -> None:
    assert windows(list(range(10)), 4) == [[0, 1, 2, 3, 4], [4, 5, 6, 7, 8], [8, 9]]
    assert windows(list(range(9)), 4) == [[0, 1, 2, 3, 4], [4, 5, 6, 7, 8]]
    assert sum(len(row) - 1 for row in windows(list(range(1000)), 16)) == 999


def test_a_corpus_model_is_scored_on_windows(corpus, tmp_path) -> None:
    model, vocabulary = corpus
    text = tmp_path / "notes.txt"
    text.write_text("alpha beta gamma delta\n" * 30)
    ids = vocabulary.tokenizer.encode_batch([text.read_text()])[0] + [vocabulary.stop_id]
    result = evaluate_file(model, vocabulary, text)
    assert result["ce"] == pytest.approx(direct_ce(model, windows(ids, 16)), rel=1e-6)
    assert result["tokens"] == len(ids) - 1 and result["unit"] == "windows" and "ce_no_eos" not in result
    split = evaluate_split(model, vocabulary, limit=4)
    assert split["split"] == "val" and split["rows"] == 4 and split["tokens"] == 64


def test_a_corpus_vocabulary_round_trips_a_prompt_and_samples_text(corpus) -> None:
    model, vocabulary = corpus
    start = vocabulary.encode_prompt("alpha beta")
    assert start[0] == vocabulary.stop_id and vocabulary.decode(start) == "alpha beta"
    lines = sample_texts(model, vocabulary, "alpha", n=3, max_new=8, seed=0)
    assert len(lines) == 3 and all(line.startswith("alpha") and "\n" not in line for line in lines)


def test_bad_inputs_give_one_line_errors_naming_them(qf, corpus, tmp_path) -> None:
    model, vocabulary = qf
    cases = [(tmp_path / "none.dev", "evaluation file not found"), (tmp_path / "bad.dev", "bad.dev:1"),
             (tmp_path / "one.dev", "need at least 2 evaluation rows")]
    (tmp_path / "bad.dev").write_text("no tab here\n")
    (tmp_path / "one.dev").write_text("the newt does swim . quest\tdoes the newt swim ?\n")
    for path, message in cases:
        with pytest.raises(AssocmemError, match=message) as err:
            evaluate_file(model, vocabulary, path)
        assert str(path) in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(AssocmemError, match="split 'nope' not found"):
        evaluate_split(model, vocabulary, "nope")
    with pytest.raises(AssocmemError, match="holds fewer than 2 tokens"):
        window_ce(corpus[0], [5], what="x")
    with pytest.raises(AssocmemError, match=f"the token store {vocabulary.store_dir} has .* tokens but the model"):
        load_vocabulary(vocabulary.store_dir, corpus[0])
