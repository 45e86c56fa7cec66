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

Modules: :mod:`.batches` (batch sources), :mod:`.settings` (settings, schedule, optimizer), :mod:`.loop` (the
training loop, :class:`TrainJob`; patch its names to change what the loop calls), :mod:`.files` (checkpoints and
model files: the one :func:`load_model`), :mod:`.job` (:func:`build_job`: the training entry point of a stage),
:mod:`.stacked` (:func:`train_stacked`: K same-shape jobs as stacked replicas in one process; its command line is
:mod:`.stacked_cli`).
"""

from assocmem.stopping import IGNORE, early_stop_reached, recall, recall_reached
from assocmem.train.batches import (
    RECALL_BATCH,
    RECALL_SET,
    Batch,
    BatchSource,
    DeviceBatches,
    SequenceBatches,
    WindowBatches,
    fixed_batches,
    fixed_windows,
    to_lm_batch,
)
from assocmem.train.files import (
    BEST_IN_PROGRESS,
    RunState,
    eval_rows,
    load_checkpoint,
    load_model,
    model_file,
    save_checkpoint,
    save_model,
)
from assocmem.train.job import build_job, job_fingerprint, model_context
from assocmem.train.loop import TrainJob, evaluate
from assocmem.train.loss import summed_nll
from assocmem.train.settings import TrainSettings, lr_at, make_optimizer, step_budget
from assocmem.train.stacked import StackedTraining, train_stacked  # in the train stage's code digest (codehash)

__all__ = [
    "BEST_IN_PROGRESS", "IGNORE", "RECALL_BATCH", "RECALL_SET", "Batch", "BatchSource", "DeviceBatches", "RunState",
    "SequenceBatches", "StackedTraining", "TrainJob", "TrainSettings", "WindowBatches", "build_job",
    "early_stop_reached", "eval_rows", "evaluate", "fixed_batches", "fixed_windows", "job_fingerprint",
    "load_checkpoint", "load_model", "lr_at", "make_optimizer", "model_context", "model_file", "recall",
    "recall_reached", "save_checkpoint", "save_model", "step_budget", "summed_nll", "to_lm_batch", "train_stacked",
]
