"""Train K same-shape jobs in one process as stacked replicas (issue 41): one step of K replicas is one batched step.

Faithful per replica: each replica starts from its job's seed, reads its job's batches, has its gradient clipped over
its own slices, follows its own learning-rate schedule, evaluates on its own sets, stops by its own rule (step
budget, early stopping, recall) and is then frozen (no gradient, no AdamW move), and writes exactly the files a
single run of its job writes (``TrainJob``'s own writers: ``model.pt``, ``best.pt``, ``metrics.csv``,
``summary.json``, ``timing.*``, ``eval_rows.parquet``, with the job's name and fingerprint). What differs is fp32
rounding (batched products, per-replica sums) and the wall clock.

Every ``train.checkpoint_interval`` steps (shared by the replicas) the group writes one checkpoint
(:mod:`assocmem.train.stacked_checkpoint`); a killed group resumes from it, each replica exactly where it stood (the
same weights, metrics and files as an uninterrupted group: bit for bit where the steps are deterministic, as on a
CPU), a replica that had finished staying frozen with its files kept (or written back where the workflow deleted
them). A checkpoint of other replicas, settings, data or code is deleted, in one logged line, and the group starts
at step 0.

    from assocmem.train import build_job
    from assocmem.train.stacked import train_stacked
    summaries = train_stacked([build_job(cfg, spec, seed, store, run_dir / str(seed)) for seed in (1, 2, 3)])
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import torch
from torch.optim import Optimizer

from assocmem.autotune.measure import Choice
from assocmem.errors import AssocmemError
from assocmem.gemm import measure_peak_flops
from assocmem.model import DecoderLM, flops_per_token
from assocmem.progress import bar
from assocmem.runtime import resolve_device
from assocmem.runtime.cuda_start import cuda_ready
from assocmem.stopping import is_new_best
from assocmem.train.batches import Batch, scored_targets, static_stack, static_width, upload
from assocmem.train.files import BEST_IN_PROGRESS, RunState
from assocmem.train.loop import TrainJob, cuda_graphs_on
from assocmem.train.settings import TrainSettings, lr_at
from assocmem.train.stacked_checkpoint import (
    FINISHED_FILES,
    GROUP_CHECKPOINT,
    GroupState,
    load_group,
    read_files,
    restore_missing,
    save_group,
    summary_of,
)
from assocmem.train.stacked_eval import StackedEvaluation
from assocmem.train.stacked_graphed import StackedGraphedStep
from assocmem.train.stacked_model import (
    StackedDecoder,
    clip_and_mask,
    optimizer_step,
    stacked_optimizer,
    summed_nll,
)

log = logging.getLogger(__name__)
# settings the replicas must share (one batch shape, one AdamW, one device and precision, one group checkpoint);
# the rest is per replica
SHARED_SETTINGS = ("batch_size", "micro_batch_size", "weight_decay", "beta1", "beta2", "device", "precision",
                   "compile", "cuda_graphs", "checkpoint_interval")
LEFTOVERS = ("checkpoint.pt", "metrics.inprogress.csv", BEST_IN_PROGRESS)


def check_stackable(jobs: Sequence[TrainJob]) -> None:
    """Refuse, in one line, jobs that cannot train as one stack."""
    if not jobs:
        raise AssocmemError("no jobs to stack")
    first = jobs[0]
    for job in jobs[1:]:
        if job.model_config != first.model_config:
            raise AssocmemError(f"{job.run_dir} cannot stack with {first.run_dir}: the model shapes differ")
        shared = {k: v for k, v in asdict(job.settings).items() if k in SHARED_SETTINGS}
        theirs = {k: v for k, v in asdict(first.settings).items() if k in SHARED_SETTINGS}
        if shared != theirs:
            differ = sorted(k for k in shared if shared[k] != theirs[k])
            raise AssocmemError(f"{job.run_dir} cannot stack with {first.run_dir}: train.{', train.'.join(differ)} "
                                "differ")
    if len({job.run_dir for job in jobs}) < len(jobs):
        raise AssocmemError("stacked jobs need one run directory each")


def stack_batches(batches: Sequence[Batch | None], batch_size: int) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """The replicas' batches as (K, B, T) inputs and targets, padded to the longest (:func:`static_stack`: a causal
    model's earlier positions never see the padding; a frozen replica's None wholly unscored: no loss, no gradient),
    and each replica's scored-target count."""
    length = max(b[0].shape[1] for b in batches if b is not None)
    return *static_stack(batches, batch_size, length), [scored_targets(batch) for batch in batches]


class StackedTraining:
    """K jobs (:func:`check_stackable`) trained as one stack; :meth:`run` returns each job's summary."""

    def __init__(self, jobs: Sequence[TrainJob]) -> None:
        check_stackable(jobs)
        self.jobs = list(jobs)
        self.settings: TrainSettings = jobs[0].settings
        self.device = torch.device(resolve_device(self.settings.device, key="train.device"))
        cuda_ready(self.device)
        if self.settings.gemm == "onednn" and self.device.type == "cpu":
            raise AssocmemError("train.gemm onednn: stacked replicas run batched products (bmm), not oneDNN's Linear; "
                                "set train.gemm to auto or native")
        self.clips = torch.tensor([job.settings.grad_clip for job in self.jobs], device=self.device)
        self._schedules: list[tuple[TrainSettings, list[int]]] = []  # replicas with equal settings, together
        for i, job in enumerate(self.jobs):
            same = next((members for settings, members in self._schedules if settings == job.settings), None)
            if same is None:
                self._schedules.append((job.settings, [i]))
            else:
                same.append(i)
        self._masks: dict[tuple[bool, ...], torch.Tensor] = {}
        self._forward: torch.nn.Module | None = None  # the stack's torch.compile where train.compile
        self._graphed: StackedGraphedStep | None = None  # the step in one CUDA graph where train.cuda_graphs
        self.peak = math.nan  # the MFU's denominator: measured by run()

    def _models(self) -> list[DecoderLM]:
        models = []
        for job in self.jobs:
            torch.manual_seed(job.seed)  # the initial weights a single run of the job starts from
            models.append(DecoderLM(job.model_config).to(self.device))
        return models

    def _mask(self, active: list[bool]) -> torch.Tensor:
        """The active replicas as a device tensor, built once per set of active replicas (no copy per step)."""
        key = tuple(active)
        if key not in self._masks:
            self._masks[key] = torch.tensor(active, dtype=torch.float32, device=self.device)
        return self._masks[key]

    def _step(self, stack, optimizer, step: int, active: list[bool], autocast) -> tuple[torch.Tensor, list[int]]:
        """One step of the stack: the replicas' summed training NLL (on the device) and scored-target counts."""
        s = self.settings
        lrs = [0.0] * len(self.jobs)
        for settings, members in self._schedules:  # one schedule's rate once a turn
            rate = lr_at(step, settings)
            for i in members:
                lrs[i] = rate if active[i] else 0.0
        if self._graphed is not None:
            return self._graphed.run(step, active, lrs)
        batches = [job.train_batches.batch(step) if on else None for job, on in zip(self.jobs, active, strict=True)]
        inputs, targets, counts = stack_batches(batches, s.batch_size)
        denominators = upload(torch.tensor([max(c, 1) for c in counts], dtype=torch.float32), self.device)
        total = torch.zeros(len(self.jobs), dtype=torch.float64, device=self.device)
        size = s.micro_batch_size or s.batch_size
        for i in range(0, s.batch_size, size):
            x, y = upload(inputs[:, i:i + size], self.device), upload(targets[:, i:i + size], self.device)
            with autocast():
                nll = summed_nll(stack if self._forward is None else self._forward, x, y)
            (nll / denominators).sum().backward()  # the replicas share no weight: each gets its own gradient
            total += nll.detach()
        clip_and_mask(stack, self.clips, self._mask(active))
        optimizer_step(optimizer, stack, lrs)
        optimizer.zero_grad(set_to_none=True)
        return total, counts  # no host sync: the losses are read at evaluations

    def prepare(self) -> tuple[Optimizer, int, torch.Tensor]:
        """The stack in training mode and its optimizer, at the replicas' initial weights or where the group's
        checkpoint left them, with the step's path (one CUDA graph, compiled or eager) chosen; returns the optimizer,
        the step to train from and the training NLL not yet in a RunState."""
        s, device = self.settings, self.device
        self.models = self._models()
        self.stack = StackedDecoder(self.models).to(device).train()
        optimizer = stacked_optimizer(self.stack, s.weight_decay, s.lr, (s.beta1, s.beta2), device)
        step, pending = self._start(optimizer)
        self._graphed = self._graphed_step(optimizer)
        self._forward = torch.compile(self.stack) if s.compile and self._graphed is None else None
        self.autocast = self.jobs[0]._autocast(device)
        self._evaluation = StackedEvaluation.of([job.eval_sets for job in self.jobs], device)
        return optimizer, step, pending

    def run(self) -> list[dict]:
        s, k = self.settings, len(self.jobs)
        optimizer, step, pending = self.prepare()
        active = [not summary and not job._stopped(state)
                  for job, state, summary in zip(self.jobs, self.states, self.summaries, strict=True)]
        self.peak = measure_peak_flops(self.device)
        progress = bar(total=max(job.settings.max_steps for job in self.jobs), initial=step,
                       desc=f"train stacked x{k}", unit="step")
        clock = time.perf_counter()
        while any(active):
            active, clock = self.loop_step(optimizer, step, active, pending, clock)
            step += 1
            progress.update()
            if step % s.checkpoint_interval == 0 and any(active):
                self._save(step, optimizer, pending)
        progress.close()
        self.checkpoint.unlink(missing_ok=True)  # the outputs hold the result
        return self.summaries

    def _graphed_step(self, optimizer: Optimizer) -> StackedGraphedStep | None:
        """The step in one CUDA graph (:mod:`assocmem.train.stacked_graphed`) where ``train.cuda_graphs`` holds on
        this device (elsewhere a logged no-op), over the replicas' widest batch; None otherwise."""
        if not cuda_graphs_on(self.settings, self.device):
            return None
        if self.settings.compile:
            log.info("train.cuda_graphs: the graphed stacked step runs the stack as it is (train.compile is not used)")
        width = max(static_width(job.train_batches, job.model_config.max_len) for job in self.jobs)
        return StackedGraphedStep(self.stack, optimizer, self.settings, self.clips, width, self.device,
                                  self.jobs[0]._autocast(self.device, cache=False),
                                  [job.train_batches for job in self.jobs])

    def loop_step(self, optimizer: Optimizer, step: int, active: list[bool], pending: torch.Tensor, clock: float
                  ) -> tuple[list[bool], float]:
        """One turn of the training loop from ``step``: the stacked step, then each active replica's bookkeeping
        (count, evaluate where due, stop). Returns the replicas still active (a finished one is frozen) and the
        clock, restarted after an evaluation."""
        sums, counts = self._step(self.stack, optimizer, step, active, self.autocast)
        pending += sums
        due = [i for i, job in enumerate(self.jobs) if active[i] and _due(job, step + 1)]
        if due and self.device.type == "cuda":  # the steps' time ends when the device has run them (as read_loss's)
            torch.cuda.synchronize(self.device)
        elapsed = time.perf_counter() - clock
        measured = self.evaluations(due)
        for i in range(len(self.jobs)):
            if active[i]:
                self._advance(i, step + 1, counts[i], pending, elapsed, measured.get(i))
        return [not summary for summary in self.summaries], time.perf_counter() if measured else clock

    def evaluations(self, due: list[int]) -> dict[int, dict[str, float] | None]:
        """The evaluations of the replicas ``due``: every replica's in one stacked pass
        (:mod:`assocmem.train.stacked_eval`) where their sets stack, else None each (evaluated alone when logged)."""
        if not due:
            return {}
        if self._evaluation is None:
            return dict.fromkeys(due)
        metrics = self._evaluation.metrics(self.stack, self.autocast)
        return {i: metrics[i] for i in due}

    def log_evaluation(self, i: int, state: RunState, elapsed: float, measured: dict[str, float] | None) -> None:
        """Replica i's row of an evaluation, as a single run logs it (``measured``: from :meth:`evaluations`; None:
        replica i evaluated alone, through its exported model)."""
        job, model = self.jobs[i], self.models[i]
        if measured is None:
            self.stack.export(i, model)
        flops_token = flops_per_token(job.model_config, int(job.tokens_per_sequence), model.num_parameters())
        job._log_row(model, state, self.device, self.autocast, elapsed, flops_token, self.peak, measured)

    @property
    def checkpoint(self) -> Path:
        return self.jobs[0].run_dir / GROUP_CHECKPOINT

    def _start(self, optimizer: Optimizer) -> tuple[int, torch.Tensor]:
        """The group's step and pending training NLL: its checkpoint's where there is one of this group (each
        replica's states and files as they were then), else step 0 with nothing an earlier attempt left."""
        self.states = [RunState(0, [], 0.0, 0, gemm="native") for _ in self.jobs]
        self.summaries: list[dict] = [{} for _ in self.jobs]
        self.finished_files: list[dict[str, bytes]] = [{} for _ in self.jobs]
        for job in self.jobs:  # a single run's leftovers, or this group's newer than its checkpoint
            for leftover in LEFTOVERS:
                (job.run_dir / leftover).unlink(missing_ok=True)
        saved = load_group(self.checkpoint, self.jobs, self.stack, optimizer)
        if saved is None:
            return 0, torch.zeros(len(self.jobs), dtype=torch.float64, device=self.device)
        self.states = saved.states
        for i, (job, files) in enumerate(zip(self.jobs, saved.files, strict=True)):
            if saved.finished[i]:  # frozen: its files kept, or written back as they were
                self.summaries[i], self.finished_files[i] = summary_of(files), files
                restored = restore_missing(job.run_dir, files)
                log.info("stacked replica %s finished at step %d%s", job.run_dir, saved.states[i].step,
                         f"; written back: {', '.join(restored)}" if restored else "")
            else:
                restore_missing(job.run_dir, files)  # its best weights up to the checkpoint
        log.info("stacked group resumed at step %d from %s", saved.step, self.checkpoint)
        return saved.step, saved.pending.to(self.device)

    def _save(self, step: int, optimizer: Optimizer, pending: torch.Tensor) -> None:
        files = [self.finished_files[i] if self.summaries[i] else read_files(job.run_dir, (BEST_IN_PROGRESS,))
                 for i, job in enumerate(self.jobs)]
        group = GroupState(step, self.states, [bool(summary) for summary in self.summaries], files, pending)
        save_group(self.checkpoint, self.jobs, self.stack, optimizer, group)

    def _advance(self, i: int, step: int, count: int, pending: torch.Tensor, elapsed: float,
                 measured: dict[str, float] | None) -> None:
        """Replica i's bookkeeping after a step, as a single run does it: count, log its evaluation where due
        (``measured``: :meth:`evaluations`'), keep the best weights, finish where its rule stops it (it is frozen
        from the next step on)."""
        job, state, model = self.jobs[i], self.states[i], self.models[i]
        state.running_tokens += count
        state.step = step
        if _due(job, step):
            state.running_loss += float(pending[i])  # a replica stops only at an evaluation
            pending[i] = 0.0
            self.log_evaluation(i, state, elapsed, measured)
            if is_new_best(state.metrics):  # evaluated alone, the replica's model already holds its weights
                job._save_model(model if measured is None else self.stack.export(i, model), BEST_IN_PROGRESS,
                                step=step)
            if job._stopped(state):  # its rule reads the evaluations (and the budget, whose end is due too)
                self.summaries[i] = self._finish(i, self.stack.export(i, model), state)

    def _finish(self, i: int, model: DecoderLM, state: RunState) -> dict:
        job = self.jobs[i]
        # the products are batched (bmm): the gemm a single run's summary records is native
        summary = job._finish(model, state, model.num_parameters(), self.peak, self.device, Choice("native", "stacked"),
                              cuda_graphs=self._graphed is not None)
        for leftover in LEFTOVERS:
            (job.run_dir / leftover).unlink(missing_ok=True)
        self.finished_files[i] = read_files(job.run_dir, FINISHED_FILES)  # for the checkpoint
        log.info("stacked replica %s stopped at step %d (%s)", job.run_dir, state.step, summary["stop_rule"])
        return summary


def _due(job: TrainJob, step: int) -> bool:
    """Whether ``job`` evaluates after ``step`` steps: every eval_interval and at its budget's end."""
    return step % job.settings.eval_interval == 0 or step == job.settings.max_steps


def train_stacked(jobs: Sequence[TrainJob]) -> list[dict]:
    """Train ``jobs`` as stacked replicas; returns their summaries in order (each as its single run returns it)."""
    return StackedTraining(jobs).run()
