"""Train a decoder-only LM with AdamW, warmup + cosine decay, periodic eval, checkpoints and exact resume.

Writes the final weights (``model.pt``) and the weights at the lowest validation CE (``best.pt``, the
checkpoint later stages use where a run over-fits), the metrics, a summary and the final model's per-row
validation losses (``eval_rows.parquet``).

Determinism: the batch of step ``s`` is a pure function of (seed, s), dropout is re-seeded every step, and
the checkpoint holds model, optimizer and the running-loss accumulator, so a run killed and resumed from
its last checkpoint produces the same weights and metrics as an uninterrupted run (on the same device).

Loss: cross-entropy in nats per predicted token, averaged over every non-padding target token (for
Question-Formation: every token after ``<sos>``, up to and including ``<eos>``; a store with ``loss_from``
scores only the tokens from that position on, for facts the value tokens and ``<eos>``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd
import torch
from torch.nn import functional as F

from assocmem.autotune.gemm import Choice, choose_gemm
from assocmem.errors import AssocmemError
from assocmem.gemm import measure_peak_flops
from assocmem.io import load_torch, rebuild_hint, save_torch, write_bytes, write_csv, write_json, write_parquet
from assocmem.model import DecoderLM, ModelConfig, flops_per_token
from assocmem.progress import bar
from assocmem.provenance import check_provenance, stamp
from assocmem.runtime import resolve_device, seed_device
from assocmem.runtime.distributed import all_reduce_sum, dist_rank_world, finish_distributed, init_distributed, wrap_ddp
from assocmem.stopping import IGNORE, early_stop_reached, is_new_best, recall, recall_reached
from assocmem.tokenstore import TokenStore, data_fingerprint

# The weights at the lowest validation CE so far. Not a workflow output until the run completes, so it survives the
# deletion of a killed job's outputs, like checkpoint.pt, and a resumed run ends with the same best.pt.
BEST_IN_PROGRESS = "best.inprogress.pt"
log = logging.getLogger(__name__)
Batch = tuple[torch.Tensor, torch.Tensor]


class BatchSource(Protocol):
    def batch(self, step: int) -> Batch: ...


class SequenceBatches:
    """Padded batches of whole sequences, drawn epoch by epoch from rows [start, stop) of a sequences store.

    Epoch e visits the rows in the order of a permutation seeded by (seed, e), computed once per epoch."""

    def __init__(self, store: TokenStore, start: int, stop: int, batch_size: int, seed: int,
                 loss_from: int = 0) -> None:
        if stop <= start:
            raise AssocmemError(f"no training sequences in rows [{start}, {stop}) of {store.store_dir}")
        self.store, self.start, self.stop, self.batch_size, self.seed = store, start, stop, batch_size, seed
        self.loss_from = loss_from  # targets before this position of a sequence are not scored (store.loss_from)
        self._cached: tuple[int, np.ndarray] | None = None

    def _permutation(self, epoch: int) -> np.ndarray:
        if self._cached is None or self._cached[0] != epoch:
            self._cached = (epoch, np.random.default_rng([self.seed, epoch]).permutation(self.stop - self.start))
        return self._cached[1]

    def rows(self, step: int) -> list[int]:
        """Store rows of the batch of ``step``."""
        n = self.stop - self.start
        first = step * self.batch_size
        rows = []
        for position in range(first, first + self.batch_size):
            epoch, offset = divmod(position, n)
            rows.append(self.start + int(self._permutation(epoch)[offset]))
        return rows

    def batch(self, step: int) -> Batch:
        return to_lm_batch(self.store.padded_batch(self.rows(step)), self.store.pad_id, self.loss_from)


@dataclass(frozen=True)
class WindowBatches:
    """nanoGPT-style random windows of ``block_size`` tokens from a token store (any object with
    ``sample_windows(rng, batch_size, block_size)``); the windows of step s depend only on (seed, s)."""

    store: Any
    batch_size: int
    block_size: int
    seed: int

    def batch(self, step: int) -> Batch:
        x, y = self.store.sample_windows(np.random.default_rng([self.seed, step]), self.batch_size, self.block_size)
        return torch.from_numpy(x), torch.from_numpy(y)


def fixed_windows(store: Any, n_batches: int, batch_size: int, block_size: int, seed: int) -> list[Batch]:
    """The same evaluation windows at every eval step."""
    source = WindowBatches(store, batch_size, block_size, seed=seed + 7919)
    return [source.batch(i) for i in range(n_batches)]


def to_lm_batch(padded: np.ndarray, pad_id: int = 0, loss_from: int = 0) -> Batch:
    """Inputs and next-token targets of padded sequences; padding, and the tokens before position ``loss_from`` of
    each sequence (context only, e.g. a fact's key), are not scored."""
    tokens = torch.from_numpy(padded)
    inputs, targets = tokens[:, :-1].clone(), tokens[:, 1:].clone()
    targets[targets == pad_id] = IGNORE
    targets[:, :max(loss_from - 1, 0)] = IGNORE  # target column j is the token at position j + 1
    return inputs, targets


def fixed_batches(store: TokenStore, rows: np.ndarray, batch_size: int) -> list[Batch]:
    return [to_lm_batch(store.padded_batch(rows[i:i + batch_size]), store.pad_id, store.loss_from)
            for i in range(0, len(rows), batch_size)]


@dataclass
class TrainSettings:
    batch_size: int
    micro_batch_size: int | None
    max_steps: int
    lr: float
    min_lr_ratio: float
    warmup_steps: int
    weight_decay: float
    beta1: float
    beta2: float
    grad_clip: float
    eval_interval: int
    eval_batches: int
    checkpoint_interval: int
    device: str = "auto"
    precision: str = "fp32"
    compile: bool = False
    gemm: str = "auto"  # fp32 CPU GEMM library: auto (the faster here, timed), native (MKL via F.linear), onednn
    early_stopping_patience: int | None = None  # evaluations without improvement before stopping
    early_stopping_min_delta: float = 0.0  # nats: an improvement smaller than this does not count
    max_epochs: float | None = None  # passes over the training sequences; sets the step budget (capped by max_steps)
    stop_at_recall: float | None = None  # stop once this share of the training facts is recalled exactly

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> TrainSettings:
        names = cls.__dataclass_fields__.keys()
        return cls(**{k: cfg[k] for k in names if k in cfg})


def lr_at(step: int, s: TrainSettings) -> float:
    """Linear warmup to ``lr``, then cosine decay to ``min_lr_ratio * lr`` at ``max_steps``."""
    if s.warmup_steps and step < s.warmup_steps:
        return s.lr * (step + 1) / s.warmup_steps
    span = max(1, s.max_steps - s.warmup_steps)
    progress = min(1.0, (step - s.warmup_steps) / span)
    floor = s.lr * s.min_lr_ratio
    return floor + 0.5 * (s.lr - floor) * (1 + math.cos(math.pi * progress))


def make_optimizer(model: torch.nn.Module, s: TrainSettings, device: torch.device) -> torch.optim.AdamW:
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": s.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    # fused on a CPU too: one kernel per tensor instead of a dozen, the same update to fp32 rounding
    return torch.optim.AdamW(groups, lr=s.lr, betas=(s.beta1, s.beta2), fused=device.type in ("cuda", "cpu"))


def summed_nll(model: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Summed next-token cross-entropy (nats) over the non-padding targets; stays on the device (no host sync)."""
    logits = model(inputs)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1),
                           ignore_index=IGNORE, reduction="sum")


@torch.no_grad()
def evaluate(model: torch.nn.Module, batches: list[Batch], device: torch.device, autocast: Any) -> float:
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for inputs, targets in batches:
        with autocast():
            nll = summed_nll(model, inputs.to(device), targets.to(device))
        total += float(nll)
        count += int((targets != IGNORE).sum())  # counted on the host copy
    model.train(was_training)
    return total / max(count, 1)


def step_budget(settings: TrainSettings, n_sequences: int) -> int:
    """The run's step budget: ``max_steps``, or fewer where ``max_epochs`` passes over the training sequences end
    sooner (so every fact of a memorisation grid gets the same number of exposures, whatever D)."""
    if settings.max_epochs is None:
        return settings.max_steps
    return max(1, min(settings.max_steps, math.ceil(settings.max_epochs * n_sequences / settings.batch_size)))


@dataclass
class RunState:
    step: int
    metrics: list[dict[str, float]]
    running_loss: float
    running_tokens: int
    timing: list[dict[str, float]] = field(default_factory=list)
    gemm: str | None = None  # the Linear backend the run trains with; a resumed run keeps it


def save_checkpoint(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: RunState,
                    fingerprint: str) -> None:
    payload = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": state.step,
               "metrics": pd.DataFrame(state.metrics).to_dict(orient="list"),
               "timing": pd.DataFrame(state.timing).to_dict(orient="list"),
               "running_loss": state.running_loss, "running_tokens": state.running_tokens,
               "fingerprint": fingerprint, "gemm": state.gemm}
    save_torch(path, payload)


def load_checkpoint(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    fingerprint: str) -> RunState | None:
    """The run state saved at ``path`` if it was written by this exact job (same fingerprint), else None.

    A checkpoint of another configuration, data, seed or code, or an unreadable one, is logged and removed: the run
    starts fresh instead of silently continuing a different model."""
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - any unreadable checkpoint means: start fresh
        log.warning("checkpoint %s is unreadable (%s); starting this run from scratch", path, err)
        path.unlink()
        return None
    if payload.get("fingerprint") != fingerprint:
        log.warning("checkpoint %s was written for another configuration, data, seed or code (fingerprint %s, "
                    "this job %s); starting this run from scratch", path, str(payload.get("fingerprint"))[:12],
                    fingerprint[:12])
        path.unlink()
        return None
    model.load_state_dict(payload["model"])
    optimizer.load_state_dict(payload["optimizer"])
    return RunState(int(payload["step"]), pd.DataFrame(payload["metrics"]).to_dict(orient="records"),
                    float(payload["running_loss"]), int(payload["running_tokens"]),
                    pd.DataFrame(payload["timing"]).to_dict(orient="records"), payload.get("gemm"))


@dataclass
class TrainJob:
    run_dir: Path
    model_config: ModelConfig
    settings: TrainSettings
    train_batches: BatchSource
    eval_sets: dict[str, list[Batch]]
    seed: int
    tokens_per_sequence: float
    summary_extra: dict[str, Any] = field(default_factory=dict)
    fingerprint: str = ""  # of everything that determines the weights; a checkpoint resumes only on a match
    job: str = ""  # "<exp>/<model>/<subset>": written into model.pt and best.pt, checked by their readers

    def _autocast(self, device: torch.device) -> Callable[[], Any]:
        enabled = self.settings.precision == "bf16"  # on a CPU too (choose_gemm warns where it is emulated)
        return lambda: torch.autocast(device.type, dtype=torch.bfloat16, enabled=enabled)

    def _micro_batches(self, batch: Batch) -> Iterator[Batch]:
        size = self.settings.micro_batch_size or self.settings.batch_size
        inputs, targets = batch
        for i in range(0, inputs.shape[0], size):
            yield inputs[i:i + size], targets[i:i + size]

    def _train_step(self, model, optimizer, step: int, device, autocast) -> tuple[float, int]:
        seed_device(self.seed * 1_000_003 + step, device)  # dropout is a function of the step
        batch = self.train_batches.batch(step)
        n_targets = int((batch[1] != IGNORE).sum())
        rank, world = dist_rank_world()
        inputs_all, targets_all = batch
        local = (inputs_all[rank::world], targets_all[rank::world])
        total = torch.zeros((), dtype=torch.float64, device=device)  # summed on the device: no sync per micro-batch
        for inputs, targets in self._micro_batches(local):
            with autocast():
                nll = summed_nll(model, inputs.to(device, non_blocking=True), targets.to(device, non_blocking=True))
            # DDP averages gradients over ranks; scaling by world makes the result the global token mean
            (nll * world / n_targets).backward()
            total += nll.detach()
        total = all_reduce_sum(float(total), device)  # the step's one host sync (RunState keeps a float)
        if self.settings.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), self.settings.grad_clip)
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, self.settings)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return total, n_targets

    def _gemm_rows(self) -> int:
        """Rows of the job's Linear products: this rank's micro-batch of the first training batch times its length."""
        inputs = self.train_batches.batch(0)[0]
        per_rank = -(-inputs.shape[0] // dist_rank_world()[1])
        return min(self.settings.micro_batch_size or per_rank, per_rank) * inputs.shape[1]

    def _stopped(self, state: RunState) -> bool:
        s = self.settings
        return (state.step >= s.max_steps or recall_reached(state.metrics, s.stop_at_recall)
                or early_stop_reached(state.metrics, s.early_stopping_patience, s.early_stopping_min_delta))

    def _stop_rule(self, state: RunState) -> str:
        """What ended the run: the recall target, early stopping, or the step budget."""
        s = self.settings
        if recall_reached(state.metrics, s.stop_at_recall):
            return "recall"
        if early_stop_reached(state.metrics, s.early_stopping_patience, s.early_stopping_min_delta):
            return "early_stopping"
        return "budget"

    def run(self, on_step: Callable[[int], None] | None = None) -> dict[str, Any]:
        s = self.settings
        device = init_distributed(torch.device(resolve_device(s.device, key="train.device")))
        is_main = dist_rank_world()[0] == 0
        torch.manual_seed(self.seed)
        model = DecoderLM(self.model_config).to(device)
        optimizer = make_optimizer(model, s, device)
        ckpt_path = self.run_dir / "checkpoint.pt"
        state = RunState(0, [], 0.0, 0)
        if ckpt_path.exists():
            state = load_checkpoint(ckpt_path, model, optimizer, self.fingerprint) or state
        gemm = choose_gemm(s.gemm, device, model, self._gemm_rows(), resumed=state.gemm if state.step else None,
                           precision=s.precision, compiled=s.compile)
        model.set_gemm(gemm.value)
        state.gemm = gemm.value
        log.info("train.gemm %s: %s (%s)", s.gemm, gemm.value, gemm.how)
        if state.step == 0:  # best weights left by an earlier attempt must not survive a fresh start
            (self.run_dir / BEST_IN_PROGRESS).unlink(missing_ok=True)
        step_model = wrap_ddp(model, device)
        step_model = torch.compile(step_model) if s.compile else step_model
        autocast = self._autocast(device)
        n_params = model.num_parameters()
        flops_token = flops_per_token(self.model_config, int(self.tokens_per_sequence), n_params)
        peak = measure_peak_flops(device)
        model.train()
        clock = time.perf_counter()
        label = f"train {self.run_dir.parent.name}/{self.run_dir.name}"  # model/subset
        progress = bar(total=s.max_steps, initial=state.step, desc=label, unit="step", disable=not is_main)
        while not self._stopped(state):
            loss_sum, n_targets = self._train_step(step_model, optimizer, state.step, device, autocast)
            state.running_loss += loss_sum
            state.running_tokens += n_targets
            state.step += 1
            progress.update()
            if state.step % s.eval_interval == 0 or state.step == s.max_steps:
                elapsed = time.perf_counter() - clock
                row = self._log_row(model, state, device, autocast, elapsed, flops_token, peak)
                recalled = {"recall": f"{row['train_recall']:.3f}"} if "train_recall" in row else {}
                progress.set_postfix(train=f"{row['train_loss']:.3f}", val=f"{row['val_ce']:.3f}",
                                     best=f"{min(r['val_ce'] for r in state.metrics):.3f}", **recalled)
                if is_main and is_new_best(state.metrics):  # kept beside the checkpoint until the run completes
                    self._save_model(model, BEST_IN_PROGRESS, step=state.step)
                clock = time.perf_counter()
                if is_main:  # for watching a run; metrics.csv itself appears only when the run is complete
                    write_csv(self.run_dir / "metrics.inprogress.csv", pd.DataFrame(state.metrics))
            if is_main and (state.step % s.checkpoint_interval == 0 or self._stopped(state)):
                save_checkpoint(ckpt_path, model, optimizer, state, self.fingerprint)
            if on_step is not None:
                on_step(state.step)
        progress.close()
        summary = self._finish(model, state, n_params, peak, device, gemm) if is_main else {}
        if is_main:  # the outputs hold the result; these only served a crash (one in _finish included)
            for leftover in (ckpt_path.name, "metrics.inprogress.csv", BEST_IN_PROGRESS):
                (self.run_dir / leftover).unlink(missing_ok=True)
        finish_distributed()
        return summary

    def _log_row(self, model, state: RunState, device, autocast, elapsed: float, flops_token: float,
                 peak: float) -> dict[str, float]:
        tokens = state.running_tokens
        row: dict[str, float] = {"step": state.step, "lr": lr_at(state.step - 1, self.settings),
                                 "train_loss": state.running_loss / max(tokens, 1)}
        tokens_per_s = tokens / max(elapsed, 1e-9)
        state.timing.append({"step": state.step, "seconds": elapsed, "tokens_per_s": tokens_per_s,
                             "mfu": tokens_per_s * flops_token / peak})
        # every rank holds the same weights, so only rank 0 (which writes the metrics) evaluates
        main = dist_rank_world()[0] == 0
        for name, batches in self.eval_sets.items():
            if name != RECALL_SET:
                row[f"{name}_ce"] = evaluate(model, batches, device, autocast) if main else float("nan")
        if RECALL_SET in self.eval_sets:
            row["train_recall"] = recall(model, self.eval_sets[RECALL_SET], device, autocast) if main else 0.0
        state.metrics.append(row)
        state.running_loss, state.running_tokens = 0.0, 0
        return row

    def _save_model(self, model: DecoderLM, name: str, step: int) -> None:
        """The weights and config as :func:`load_model` reads them (``model.pt``: final; ``best.pt``: the weights
        at the lowest validation CE so far)."""
        save_torch(self.run_dir / name, {"model": model.state_dict(), "config": self.model_config.to_dict(),
                                         "step": step, "provenance": stamp(self.job, self.fingerprint, model)})

    def _finish(self, model: DecoderLM, state: RunState, n_params: int, peak: float, device, gemm: Choice) -> dict:
        self._save_model(model, "model.pt", step=state.step)
        write_bytes(self.run_dir / "best.pt", (self.run_dir / BEST_IN_PROGRESS).read_bytes())  # kept until the end
        metrics = pd.DataFrame(state.metrics)
        write_csv(self.run_dir / "metrics.csv", metrics)
        timing = pd.DataFrame(state.timing)
        write_csv(self.run_dir / "timing.csv", timing)  # wall-clock numbers live apart from the science
        write_json(self.run_dir / "timing.json", {"peak_flops_measured": peak, "device": str(device),
                                                  "gemm": gemm.value, "gemm_choice": gemm.record(),
                                                  "seconds": float(timing["seconds"].sum()) if len(timing) else 0.0,
                                                  "mean_mfu": float(timing["mfu"].mean()) if len(timing) else 0.0})
        rows, best = eval_rows(self.run_dir / "model.pt", self.eval_sets["val"]), int(metrics["val_ce"].idxmin())
        write_parquet(self.run_dir / "eval_rows.parquet", rows)  # its row count goes into the summary for readers
        summary = {"n_params": n_params, "steps": state.step, "best_val_ce": float(metrics["val_ce"].iloc[best]),
                   "best_step": int(metrics["step"].iloc[best]), "stopped_early": state.step < self.settings.max_steps,
                   "device": str(device), "model_config": self.model_config.to_dict(), "fingerprint": self.fingerprint,
                   "gemm": gemm.value, "precision": self.settings.precision, "final": metrics.iloc[-1].to_dict(),
                   "eval_rows": len(rows), "max_steps": self.settings.max_steps, "stop_rule": self._stop_rule(state)}
        summary |= self.summary_extra
        if self.settings.stop_at_recall is not None:
            summary["recall"] = float(metrics["train_recall"].iloc[-1])
            summary["stored"] = summary["recall"] >= self.settings.stop_at_recall
        write_json(self.run_dir / "summary.json", summary)  # the one writer of summary.json (rank 0 only)
        return summary


@torch.no_grad()
def eval_rows(model_path: Path, batches: list[Batch]) -> pd.DataFrame:
    """Summed NLL (nats) and predicted-token count of every row of the fixed evaluation batches, for the model
    saved at ``model_path`` as a fresh process loads it (CPU, plain products): the evaluation noise of the final
    validation CE (the report's convergence tolerance) comes from these rows."""
    model = load_model(model_path)
    sums, counts = [], []
    for inputs, targets in batches:
        logits = model(inputs)
        nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1),
                              ignore_index=IGNORE, reduction="none").reshape(targets.shape)
        sums.append(nll.sum(dim=1).double().numpy())
        counts.append((targets != IGNORE).sum(dim=1).numpy())
    nll_sums, tokens = np.concatenate(sums), np.concatenate(counts).astype(np.int64)
    return pd.DataFrame({"row": np.arange(len(tokens), dtype=np.int64), "nll": nll_sums, "tokens": tokens})


def load_model(path: Path, device: str | torch.device = "cpu", expect: dict[str, Any] | None = None) -> DecoderLM:
    """The model saved at ``path``, its provenance checked (against ``expect``, if given: assocmem.provenance)."""
    payload = load_torch(path, what="model")
    check_provenance(path, payload, expect)
    try:
        model = DecoderLM(ModelConfig(**payload["config"]))
        model.load_state_dict(payload["model"])
    except (KeyError, TypeError, RuntimeError) as err:
        raise AssocmemError(f"{path} is not a model saved by `assocmem train` ({err}); {rebuild_hint(path)}") from err
    return model.to(device).eval()


def model_context(store: TokenStore, train_cfg: dict[str, Any]) -> int:
    """Positions the model needs: the longest sequence of any split, or the training window."""
    if store.batching == "sequences":
        return int(max(info["max_len"] for info in store.meta["splits"].values()))
    return int(train_cfg["block_size"])


RECALL_SET = "recall"  # every training sequence, for the recall of a memorisation run (not a CE evaluation)
RECALL_BATCH = 256


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
