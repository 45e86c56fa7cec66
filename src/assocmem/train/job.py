"""Build one model's training job from the config and a token store."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from assocmem.errors import AssocmemError
from assocmem.model import ModelConfig
from assocmem.tokenstore import TokenStore, data_fingerprint
from assocmem.train.batches import (
    RECALL_BATCH,
    RECALL_SET,
    BatchSource,
    SequenceBatches,
    WindowBatches,
    fixed_batches,
    fixed_windows,
)
from assocmem.train.loop import TrainJob
from assocmem.train.settings import TrainSettings, step_budget


def model_context(store: TokenStore, train_cfg: dict[str, Any]) -> int:
    """Positions the model needs: the longest sequence of any split, or the training window."""
    if store.batching == "sequences":
        return int(max(info["max_len"] for info in store.meta["splits"].values()))
    return int(train_cfg["block_size"])



def build_job(train_cfg: dict[str, Any], model_spec: dict[str, Any], seed: int, store_dir: Path,
              run_dir: Path, code: str = "", job: str = "") -> TrainJob:
    """One model's training job on one subset view (batching follows the store); resumes only under ``code``."""
    settings = TrainSettings.from_config(train_cfg)
    train = TokenStore(store_dir, "train")
    settings = replace(settings, max_steps=step_budget(settings, len(train)))
    val = TokenStore(store_dir, train.roles["validation"])
    spec = dict(model_spec, max_len=max(model_spec.get("max_len", 64), model_context(train, train_cfg)))
    model_config = ModelConfig.from_dict(spec, vocab_size=train.vocab_size)
    batch, n_eval = settings.batch_size, settings.eval_batches * settings.batch_size
    if train.batching == "sequences":
        rng = np.random.default_rng([seed, 99])
        rows = np.arange(len(train))
        train_eval_rows = np.sort(rng.choice(rows, size=min(n_eval, len(rows)), replace=False))
        eval_sets = {"train_eval": fixed_batches(train, train_eval_rows, batch),
                     "val": fixed_batches(val, np.arange(min(n_eval, len(val))), batch)}
        batches: BatchSource = SequenceBatches(train, 0, len(train), batch, seed, loss_from=train.loss_from)
        if settings.stop_at_recall is not None:
            eval_sets[RECALL_SET] = fixed_batches(train, rows, max(batch, RECALL_BATCH))
        tokens_per_sequence = float(train.meta["splits"]["train"]["mean_len"])
    else:
        if settings.stop_at_recall is not None:
            raise AssocmemError(f"train.stop_at_recall needs a store of whole sequences (facts); {store_dir} holds "
                                "windows over a token stream")
        block = int(train_cfg["block_size"])
        eval_sets = {"train_eval": fixed_windows(train, settings.eval_batches, batch, block, seed),
                     "val": fixed_windows(val, settings.eval_batches, batch, block, seed + 1)}
        batches = WindowBatches(train, batch, block, seed)
        tokens_per_sequence = float(block)
    subset = {"n_tokens": train.n_tokens, "n_docs": train.n_docs, **train.meta.get("subset", {})}
    fingerprint = job_fingerprint(model_config, settings, seed, data_fingerprint(train), code)
    return TrainJob(run_dir=run_dir, model_config=model_config, settings=settings, train_batches=batches,
                    eval_sets=eval_sets, seed=seed, tokens_per_sequence=tokens_per_sequence, job=job,
                    summary_extra={"subset": subset, "loss_tokens": train.loss_tokens}, fingerprint=fingerprint)


def job_fingerprint(model_config: ModelConfig, settings: TrainSettings, seed: int, data: str, code: str = "") -> str:
    """sha256 of everything that determines a run's weights: model, training settings, seed, data and code."""
    spec = {"model": model_config.to_dict(), "train": asdict(settings), "seed": seed, "data": data, "code": code}
    return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()
