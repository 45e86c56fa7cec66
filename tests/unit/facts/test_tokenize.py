"""The facts in the token store (issue 25): every stored sequence decodes back to its fact, the store is
byte-identical from the same seed, the loss scores exactly the value tokens and <eos> of each fact (trainer,
subsets, evaluation), and a damaged facts file is refused naming its line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from assocmem.errors import AssocmemError
from assocmem.evaluation import row_losses
from assocmem.facts.generate import SPLITS, FactsSpec, write_facts
from assocmem.facts.tokenize import LOSS_TOKENS, ROLES, tokenize_facts_dir, vocabulary
from assocmem.model import DecoderLM, ModelConfig
from assocmem.subsets import make_subset
from assocmem.tokenstore import TokenStore
from assocmem.train import IGNORE, build_job, fixed_batches

SPEC = FactsSpec(count=64, unseen=16, key_length=4, value_length=2, key_vocab=5, value_vocab=7, min_key_distance=2,
                 seed=4)


@pytest.fixture
def store(tmp_path):
    write_facts(SPEC, tmp_path / "facts")
    tokenize_facts_dir(tmp_path / "facts", SPEC, tmp_path / "tokens")
    return tmp_path / "tokens"


def test_every_sequence_decodes_to_its_fact(store, tmp_path):
    vocab = vocabulary(SPEC.key_vocab, SPEC.value_vocab)
    meta = json.loads((store / "meta.json").read_text())
    assert meta["vocab_size"] == len(vocab) == 5 + 5 + 7 and meta["tokenizer"]["vocab"] == vocab
    assert meta["roles"] == ROLES and meta["batching"] == "sequences" and meta["loss_tokens"] == LOSS_TOKENS
    assert meta["loss_from"] == SPEC.key_length + 2 and meta["facts"] == SPEC.settings()
    for split in SPLITS:
        lines = (tmp_path / "facts" / f"{split}.tsv").read_text().splitlines()
        data = TokenStore(store, split)
        assert len(data) == len(lines) == (SPEC.count if split == "train" else SPEC.unseen)
        for row, line in enumerate(lines):
            key, value = line.split("\t")
            decoded = [vocab[i] for i in data.sequence(row)]
            assert decoded == ["<sos>", *key.split(), "<sep>", *value.split(), "<eos>"]


def test_the_store_is_byte_identical_from_the_same_seed(store, tmp_path):
    write_facts(SPEC, tmp_path / "again")
    tokenize_facts_dir(tmp_path / "again", SPEC, tmp_path / "tokens2")
    first = {p.name: p.read_bytes() for p in store.iterdir()}
    assert first == {p.name: p.read_bytes() for p in (tmp_path / "tokens2").iterdir()}


def test_the_loss_scores_the_value_tokens_and_eos_only(store, tmp_path):
    train = TokenStore(store, "train")
    scored_per_row = SPEC.value_length + 1
    for inputs, targets in fixed_batches(train, np.arange(len(train)), 16):
        assert ((targets != IGNORE).sum(dim=1) == scored_per_row).all()
        for row_inputs, row_targets in zip(inputs.tolist(), targets.tolist(), strict=True):
            sequence = row_inputs + [row_targets[-1]]
            assert [t for t in row_targets if t != IGNORE] == sequence[SPEC.key_length + 2:]
    # a subset view keeps the rule, and the trainer's batches follow it
    make_subset(store, 0.5, out_dir=tmp_path / "half")
    assert TokenStore(tmp_path / "half", "train").loss_from == SPEC.key_length + 2
    job = build_job({"batch_size": 8, "micro_batch_size": None, "max_steps": 1, "lr": 1e-3, "min_lr_ratio": 0.1,
                     "warmup_steps": 0, "weight_decay": 0.0, "beta1": 0.9, "beta2": 0.99, "grad_clip": 1.0,
                     "eval_interval": 1, "eval_batches": 1, "checkpoint_interval": 10, "device": "cpu",
                     "block_size": 8}, {"n_layer": 1, "d_model": 8, "n_head": 2, "d_ff": 16}, 0,
                    tmp_path / "half", tmp_path / "run")
    for batch in (job.train_batches.batch(3), *job.eval_sets["val"], *job.eval_sets["train_eval"]):
        assert ((batch[1] != IGNORE).sum(dim=1) == scored_per_row).all()
    assert job.summary_extra["loss_tokens"] == LOSS_TOKENS


def test_evaluation_scores_the_same_tokens_and_splits_off_eos(store):
    unseen = TokenStore(store, "unseen")
    sequences = [unseen.sequence(i).tolist() for i in range(len(unseen))]
    torch.manual_seed(0)
    model = DecoderLM(ModelConfig(vocab_size=unseen.vocab_size, n_layer=1, d_model=8, n_head=2, d_ff=16, max_len=16))
    losses = row_losses(model, sequences, 0, loss_from=unseen.loss_from)
    assert (losses["tokens"] == SPEC.value_length + 1).all()
    with torch.no_grad():
        log_probs = torch.log_softmax(model(torch.tensor([sequences[0][:-1]])), dim=-1)[0]
    positions = range(unseen.loss_from - 1, len(sequences[0]) - 1)
    expected = [-float(log_probs[j, sequences[0][j + 1]]) for j in positions]
    assert losses["nll"].iloc[0] == pytest.approx(sum(expected), rel=1e-5)
    assert losses["nll_eos"].iloc[0] == pytest.approx(expected[-1], rel=1e-5)


def test_a_damaged_facts_file_is_refused_naming_its_line(tmp_path):
    write_facts(SPEC, tmp_path / "facts")
    path = tmp_path / "facts" / "unseen.tsv"
    lines = path.read_text().splitlines()
    lines[2] = lines[2].replace("v", "k", 1)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(AssocmemError, match=r"unseen\.tsv, line 3: not a fact of 4 key symbols k0\.\.k4"):
        tokenize_facts_dir(tmp_path / "facts", SPEC, tmp_path / "tokens")
