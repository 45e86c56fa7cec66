"""The trainer on corpus windows (the GPT-2 path) at a tiny GPT-2 shape: kill, resume, identical result."""

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import make_corpus_store

from assocmem.corpus.bpe import get_tokenizer
from assocmem.model import ModelConfig
from assocmem.tokenstore import TokenStore
from assocmem.train import TrainJob, TrainSettings, WindowBatches, fixed_windows

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> TokenStore:
    root = tmp_path_factory.mktemp("corpus")
    rng = np.random.default_rng(0)
    docs = [" ".join(rng.choice(WORDS, size=40)) for _ in range(60)]
    tokenizer = get_tokenizer({"kind": "bytelevel_bpe", "path": str(root / "tok.json"), "vocab_size": 300},
                              train_texts=iter(docs))
    make_corpus_store(root, docs, tokenizer)
    return TokenStore(root, "train")


def job(store: TokenStore, run_dir, **kw) -> TrainJob:
    settings = TrainSettings(batch_size=4, micro_batch_size=2, max_steps=8, lr=3e-3, min_lr_ratio=0.1,
                             warmup_steps=2, weight_decay=0.1, beta1=0.9, beta2=0.95, grad_clip=1.0,
                             eval_interval=4, eval_batches=1, checkpoint_interval=3, device="cpu", **kw)
    cfg = ModelConfig(vocab_size=store.vocab_size, n_layer=2, d_model=24, n_head=2, d_ff=96, max_len=16)
    return TrainJob(run_dir=run_dir, model_config=cfg, settings=settings,
                    train_batches=WindowBatches(store, 4, 16, seed=5),
                    eval_sets={"val": fixed_windows(store, 1, 4, 16, seed=5)}, seed=5, tokens_per_sequence=16)


def test_windows_are_step_deterministic(store):
    source = WindowBatches(store, 4, 16, seed=1)
    x, y = source.batch(3)
    assert torch.equal(x, source.batch(3)[0]) and not torch.equal(x, source.batch(4)[0])
    assert torch.equal(x[:, 1:], y[:, :-1])  # targets are the inputs shifted by one


def test_corpus_training_resumes_identically(store, tmp_path):
    job(store, tmp_path / "full").run()

    def kill(step: int) -> None:
        if step == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        job(store, tmp_path / "resumed").run(on_step=kill)
    job(store, tmp_path / "resumed").run()
    a = torch.load(tmp_path / "full" / "model.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "resumed" / "model.pt", weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    metrics = pd.read_csv(tmp_path / "resumed" / "metrics.csv")
    assert metrics["step"].tolist() == [4, 8] and (metrics["val_ce"] < np.log(store.vocab_size) + 1).all()
