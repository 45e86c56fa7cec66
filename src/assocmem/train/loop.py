"""The training loop (:class:`TrainJob`): steps, evaluations, checkpoints and exact resume, and the files of a finished
run; :mod:`assocmem.train` describes what a run writes, its determinism and its loss."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from assocmem.autotune.gemm import Choice, choose_gemm
from assocmem.gemm import measure_peak_flops
from assocmem.io import write_bytes, write_csv, write_json, write_parquet
from assocmem.model import DecoderLM, ModelConfig, flops_per_token
from assocmem.progress import bar
from assocmem.runtime import resolve_device, seed_device
from assocmem.runtime.cpu_time import SetupClock
from assocmem.runtime.cuda_start import cuda_ready
from assocmem.runtime.distributed import all_reduce_sum, dist_rank_world, finish_distributed, init_distributed, wrap_ddp
from assocmem.stopping import IGNORE, early_stop_reached, is_new_best, recall, recall_reached
from assocmem.train.batches import RECALL_SET, Batch, BatchSource, DeviceBatches, static_width
from assocmem.train.files import BEST_IN_PROGRESS, RunState, eval_rows, load_checkpoint, save_checkpoint, save_model
from assocmem.train.graphed import GraphedStep
from assocmem.train.loss import step_loss, summed_nll
from assocmem.train.settings import TrainSettings, lr_at, make_optimizer

log = logging.getLogger(__name__)


@torch.no_grad()
def evaluate(model: torch.nn.Module, batches: list[Batch], device: torch.device, autocast: Any) -> float:
    """Mean NLL a scored target over ``batches``, its sum and count kept on the device (the sum in float64: the same
    additions, in the same order, as adding each batch's value on the host) and read once: no host sync a batch."""
    was_training = model.training
    model.eval()
    total = torch.zeros((), dtype=torch.float64, device=device)
    scored = torch.zeros((), dtype=torch.int64, device=device)
    for inputs, targets in batches:
        targets = targets.to(device, non_blocking=True)
        with autocast():
            total += summed_nll(model, inputs.to(device, non_blocking=True), targets)
        scored += (targets != IGNORE).sum()
    model.train(was_training)
    return float(total) / max(int(scored), 1)


def on_device(batches: list[Batch], device: torch.device) -> list[Batch]:
    """``batches`` copied to ``device`` (as they are on a CPU): the evaluation sets are read at every evaluation, so
    they are uploaded once, not at each."""
    if device.type == "cpu":
        return batches
    return [(inputs.to(device), targets.to(device)) for inputs, targets in batches]


def cuda_graphs_on(settings: TrainSettings, device: torch.device, world: int = 1) -> bool:
    """Whether the step runs in one CUDA graph: ``train.cuda_graphs`` on a CUDA device and one process. Elsewhere
    the key is a no-op, logged, so one config serves a GPU and a CPU machine (and DDP, whose gradient all-reduce
    the graph does not hold)."""
    if not settings.cuda_graphs:
        return False
    if device.type != "cuda":
        log.info("train.cuda_graphs: %s has no CUDA graphs; the step runs without them", device)
    elif world > 1:
        log.info("train.cuda_graphs: not under DDP (%d processes); the step runs without graphs", world)
    return device.type == "cuda" and world == 1


def read_loss(state: RunState, pending: torch.Tensor, device: torch.device) -> None:
    """Move the loss summed on the device (every rank's) into the run state: the host sync of an evaluation or a
    checkpoint."""
    state.running_loss += all_reduce_sum(float(pending), device)
    pending.zero_()


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
    _batches: DeviceBatches | None = field(default=None, init=False, repr=False)
    _graphed: GraphedStep | None = field(default=None, init=False, repr=False)  # set by run(): under CUDA graphs
    _eval_on: tuple[torch.device, dict[str, list[Batch]]] | None = field(default=None, init=False, repr=False)
    _loss: Callable[..., tuple[torch.Tensor, torch.Tensor]] = field(default_factory=lambda: step_loss, init=False,
                                                                   repr=False)

    def _autocast(self, device: torch.device, cache: bool = True) -> Callable[[], Any]:
        """bf16 autocast where ``precision`` says so (on a CPU too: choose_gemm warns where it is emulated);
        ``cache``: off inside a CUDA graph, whose replays must cast the weights they update."""
        enabled = self.settings.precision == "bf16"
        return lambda: torch.autocast(device.type, dtype=torch.bfloat16, enabled=enabled, cache_enabled=cache)

    def _micro_batches(self, batch: Batch) -> Iterator[Batch]:
        size = self.settings.micro_batch_size or self.settings.batch_size
        inputs, targets = batch
        for i in range(0, inputs.shape[0], size):
            yield inputs[i:i + size], targets[i:i + size]

    def _device_batches(self, device: torch.device) -> DeviceBatches:
        if self._batches is None or self._batches.device != device:
            self._batches = DeviceBatches(self.train_batches, device, *dist_rank_world())
        return self._batches

    def _eval_sets_on(self, device: torch.device) -> dict[str, list[Batch]]:
        """The evaluation sets on ``device``, uploaded at the first evaluation (:func:`on_device`)."""
        if self._eval_on is None or self._eval_on[0] != device:
            self._eval_on = device, {name: on_device(batches, device) for name, batches in self.eval_sets.items()}
        return self._eval_on[1]

    def _graphed_step(self, model: DecoderLM, optimizer: torch.optim.Optimizer, device: torch.device) -> GraphedStep:
        """The step in one CUDA graph (:mod:`assocmem.train.graphed`), over the source's widest batch."""
        if self.settings.compile:
            log.info("train.cuda_graphs: the graphed step runs the model as it is (train.compile is not used)")
        width = static_width(self.train_batches, self.model_config.max_len)
        return GraphedStep(model, optimizer, self.settings, width, device, self._autocast(device, cache=False))

    def _train_step(self, model, optimizer, step: int, device, autocast) -> tuple[torch.Tensor, int]:
        """One optimizer step; returns the step's summed loss, on the device (read at an evaluation or a
        checkpoint: no host sync per step), and its count of scored targets."""
        seed_device(self.seed * 1_000_003 + step, device)  # dropout is a function of the step
        batches = self._device_batches(device)
        local, n_targets = batches.get(step)
        if self._graphed is not None:
            total = self._graphed.run(step, local, n_targets)
            batches.prefetch(step + 1)
            return total, n_targets
        world = dist_rank_world()[1]
        total: torch.Tensor | None = None
        for inputs, targets in self._micro_batches(local):
            with autocast():
                scaled, nll = self._loss(model, inputs, targets, world, n_targets)
            scaled.backward()
            # summed in float64 as from a float64 zero (the same value), without a zero tensor and its kernel
            total = nll if total is None else total.double() + nll
        if self.settings.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), self.settings.grad_clip)
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, self.settings)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        batches.prefetch(step + 1)  # on CUDA: built and copied while this step's kernels run
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

    def run(self, on_step: Callable[[int], None] | None = None, setup: SetupClock | None = None) -> dict[str, Any]:
        """Train; ``on_step`` is called with each step's number after it. ``setup``: the job's set-up clock, marked
        here phase by phase and logged before the first step (the stage starts it before its imports)."""
        s, setup = self.settings, setup or SetupClock()
        device = init_distributed(torch.device(resolve_device(s.device, key="train.device")))
        cuda_ready(device)
        setup.mark("device")
        is_main = dist_rank_world()[0] == 0
        torch.manual_seed(self.seed)
        model = DecoderLM(self.model_config).to(device)
        setup.mark("model")
        optimizer = make_optimizer(model, s, device)  # torch.optim's first call imports torch._dynamo
        setup.mark("optimizer")
        ckpt_path = self.run_dir / "checkpoint.pt"
        state = RunState(0, [], 0.0, 0)
        if ckpt_path.exists():
            state = load_checkpoint(ckpt_path, model, optimizer, self.fingerprint) or state
            setup.mark("checkpoint")
        graphs = cuda_graphs_on(s, device, dist_rank_world()[1])
        gemm = choose_gemm(s.gemm, device, model, self._gemm_rows(), resumed=state.gemm if state.step else None,
                           precision=s.precision, compiled=s.compile or graphs)
        setup.mark("GEMM choice")
        model.set_gemm(gemm.value)
        state.gemm = gemm.value
        log.info("train.gemm %s: %s (%s)", s.gemm, gemm.value, gemm.how)
        if state.step == 0:  # best weights left by an earlier attempt must not survive a fresh start
            (self.run_dir / BEST_IN_PROGRESS).unlink(missing_ok=True)
        step_model = wrap_ddp(model, device)
        # compiled, the model and its loss are one graph: Inductor fuses the log-softmax and the loss over the
        # logits (a vocabulary-wide tensor per token) instead of writing them out in fp32 between kernels
        self._loss = torch.compile(step_loss) if s.compile and not graphs else step_loss
        autocast = self._autocast(device)
        self._graphed = self._graphed_step(model, optimizer, device) if graphs else None
        n_params = model.num_parameters()
        flops_token = flops_per_token(self.model_config, int(self.tokens_per_sequence), n_params)
        setup.mark("step set-up")  # DDP, the compiled loss's wrapper, the graphed step's buffers
        peak = measure_peak_flops(device)
        setup.mark("peak FLOP/s")
        if is_main:
            log.info(setup.message(self.job or "train", before="the first step"))
        model.train()
        clock = time.perf_counter()
        label = f"train {self.run_dir.parent.name}/{self.run_dir.name}"  # model/subset
        progress = bar(total=s.max_steps, initial=state.step, desc=label, unit="step", disable=not is_main)
        pending = torch.zeros((), dtype=torch.float64, device=device)  # summed loss since the last read
        while not self._stopped(state):
            loss_sum, n_targets = self._train_step(step_model, optimizer, state.step, device, autocast)
            pending += loss_sum
            state.running_tokens += n_targets
            state.step += 1
            progress.update()
            if state.step % s.eval_interval == 0 or state.step == s.max_steps:
                read_loss(state, pending, device)
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
            if state.step % s.checkpoint_interval == 0 or self._stopped(state):
                read_loss(state, pending, device)  # on every rank: a collective under DDP
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
                 peak: float, measured: dict[str, float] | None = None) -> dict[str, float]:
        """Evaluate ``model`` and log the row (``measured``: the evaluation's values, already computed, as a stacked
        replica's are)."""
        tokens = state.running_tokens
        row: dict[str, float] = {"step": state.step, "lr": lr_at(state.step - 1, self.settings),
                                 "train_loss": state.running_loss / max(tokens, 1)}
        tokens_per_s = tokens / max(elapsed, 1e-9)
        state.timing.append({"step": state.step, "seconds": elapsed, "tokens_per_s": tokens_per_s,
                             "mfu": tokens_per_s * flops_token / peak})
        if measured is not None:
            row.update(measured)
            return self._logged(row, state)
        # every rank holds the same weights, so only rank 0 (which writes the metrics) evaluates
        main = dist_rank_world()[0] == 0
        sets = self._eval_sets_on(device) if main else self.eval_sets
        for name, batches in sets.items():
            if name != RECALL_SET:
                row[f"{name}_ce"] = evaluate(model, batches, device, autocast) if main else float("nan")
        if RECALL_SET in sets:
            row["train_recall"] = recall(model, sets[RECALL_SET], device, autocast) if main else 0.0
        return self._logged(row, state)

    @staticmethod
    def _logged(row: dict[str, float], state: RunState) -> dict[str, float]:
        state.metrics.append(row)
        state.running_loss, state.running_tokens = 0.0, 0
        return row

    def _save_model(self, model: DecoderLM, name: str, step: int) -> None:
        """``model.pt``: final; ``best.pt``: the weights at the lowest validation CE so far."""
        save_model(self.run_dir / name, model, step, self.job, self.fingerprint)

    def _finish(self, model: DecoderLM, state: RunState, n_params: int, peak: float, device, gemm: Choice,
                cuda_graphs: bool | None = None) -> dict:
        """The run's files (``cuda_graphs``: whether its steps ran in a CUDA graph, when not its own graphed step's,
        as for a stacked replica)."""
        self._save_model(model, "model.pt", step=state.step)
        write_bytes(self.run_dir / "best.pt", (self.run_dir / BEST_IN_PROGRESS).read_bytes())  # kept until the end
        metrics = pd.DataFrame(state.metrics)
        write_csv(self.run_dir / "metrics.csv", metrics)
        timing = pd.DataFrame(state.timing)
        write_csv(self.run_dir / "timing.csv", timing)  # wall-clock numbers live apart from the science
        write_json(self.run_dir / "timing.json", {"peak_flops_measured": peak, "device": str(device),
                                                  "gemm": gemm.value, "gemm_choice": gemm.record(),
                                                  "cuda_graphs": (self._graphed is not None if cuda_graphs is None
                                                                  else cuda_graphs),
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
