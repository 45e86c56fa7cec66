"""Model files and checkpoints: the run state a killed job resumes from, the model files (``model.pt``,
``best.pt``) and the one reader of them, :func:`load_model`, and the per-row validation losses of a saved model."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import torch
from torch.nn import functional as F

from assocmem import layout
from assocmem.errors import AssocmemError
from assocmem.io import load_torch, rebuild_hint, save_torch
from assocmem.model import DecoderLM, ModelConfig
from assocmem.provenance import check_provenance, stamp
from assocmem.stopping import IGNORE
from assocmem.train.batches import Batch
from assocmem.trust import check_model_run

# The weights at the lowest validation CE so far. Not a workflow output until the run completes, so it survives the
# deletion of a killed job's outputs, like checkpoint.pt, and a resumed run ends with the same best.pt.
BEST_IN_PROGRESS = "best.inprogress.pt"
RUN_DIR_MODEL = "best.pt"  # what a run directory stands for: the weights at the lowest validation CE
MODEL_ARTIFACTS = ("model", "best_model")  # the layout's names of model.pt and best.pt
log = logging.getLogger(__name__)

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
    payload = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), **state_fields(state),
               "fingerprint": fingerprint}
    save_torch(path, payload)


def state_fields(state: RunState) -> dict[str, Any]:
    """A run state as a checkpoint holds it (plain types: ``torch.load(weights_only=True)`` reads them back)."""
    return {"step": state.step, "metrics": pd.DataFrame(state.metrics).to_dict(orient="list"),
            "timing": pd.DataFrame(state.timing).to_dict(orient="list"), "running_loss": state.running_loss,
            "running_tokens": state.running_tokens, "gemm": state.gemm}


def run_state(fields: dict[str, Any]) -> RunState:
    """The run state :func:`state_fields` wrote."""
    return RunState(int(fields["step"]), pd.DataFrame(fields["metrics"]).to_dict(orient="records"),
                    float(fields["running_loss"]), int(fields["running_tokens"]),
                    pd.DataFrame(fields["timing"]).to_dict(orient="records"), fields.get("gemm"))


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
    return run_state(payload)



def save_model(path: Path, model: DecoderLM, step: int, job: str, fingerprint: str) -> None:
    """The weights, config and provenance as :func:`load_model` reads them."""
    save_torch(path, {"model": model.state_dict(), "config": model.cfg.to_dict(), "step": step,
                      "provenance": stamp(job, fingerprint, model)})


def model_file(path: str | os.PathLike[str]) -> Path:
    """The model file ``path`` names: the file itself, or a run directory's ``best.pt``."""
    path = Path(path)
    if path.is_dir():
        if not (path / RUN_DIR_MODEL).is_file():
            raise AssocmemError(f"{path} holds no {RUN_DIR_MODEL}: pass a model file (model.pt, best.pt) or the "
                                "directory of a finished training run (results/<exp>/train/<model>/<subset>)")
        return path / RUN_DIR_MODEL
    if not path.is_file():
        raise AssocmemError(f"model file not found: {path} (pass a model file, e.g. "
                            "results/<exp>/train/<model>/<subset>/best.pt, or its run directory)")
    return path


def run_fields(file: Path) -> tuple[dict[str, str], Path] | None:
    """The wildcards (exp, model, subset) and the results directory of a model file placed in a results
    directory's layout; None for a file elsewhere."""
    found = layout.match(file)
    if found is None or found[0] not in MODEL_ARTIFACTS:
        return None
    return found[1], found[2]


def expectation(file: Path) -> dict[str, Any] | None:
    """What a model file inside a results directory must match (``assocmem.provenance.check_provenance``): the
    training job its place names (``layout.train_job``) and, through the run's
    summary.json, that run. A file elsewhere has only its weights checked (None)."""
    found = run_fields(file)
    if found is None:
        return None
    fields = found[0]
    return {"job": layout.train_job(fields["exp"], fields["model"], fields["subset"]), "spec": {}}


def load_model(path: str | os.PathLike[str], device: str | torch.device = "cpu",
               expect: dict[str, Any] | None | Literal["place"] = "place") -> DecoderLM:
    """The trained model at ``path`` (a ``model.pt`` / ``best.pt`` file, or a run directory: its ``best.pt``), in
    eval mode on ``device``.

    The file is read with ``torch.load(weights_only=True)`` and refused, naming it, when its weights changed after
    training wrote them (sha256) or when it does not match ``expect`` (``assocmem.provenance.check_provenance``):
    by default (``"place"``) the job and run its place in a results directory names (a copied or swapped file;
    a file elsewhere has its weights checked only) and, as the pipeline checks them, that run's stamp and the jobs
    it was built from: made by this checkout's code, from the upstream that is there now (``assocmem.trust``);
    ``None`` checks the weights only. Raises
    :class:`assocmem.errors.AssocmemError` with a one-line message.

    Example::

        import torch
        from assocmem.train import load_model  # also the package's lazy export
        model = load_model("results/qf/train/L4/pct100")  # the run's best.pt
        logits = model(torch.tensor([[2, 40, 17]]))  # next-token logits, shape (batch, positions, vocabulary)

    The token ids are the token store's (``results/<exp>/data/tokens/meta.json``); ``assocmem.use.vocabulary``
    rebuilds its tokenizer, and ``python -m assocmem sample`` / ``evaluate`` use both.
    """
    file = model_file(path)
    if expect == "place":
        check_model_run(file)
    payload = load_torch(file, what="model")
    check_provenance(file, payload, expectation(file) if expect == "place" else expect)
    try:
        model = DecoderLM(ModelConfig(**payload["config"]))
        model.load_state_dict(payload["model"])
    except (KeyError, TypeError, RuntimeError) as err:
        raise AssocmemError(f"{file} is not a model saved by `assocmem train` ({err}); {rebuild_hint(file)}") from err
    return model.to(device).eval()


@torch.no_grad()
def eval_rows(model_path: Path, batches: list[Batch]) -> pd.DataFrame:
    """Summed NLL (nats) and predicted-token count of every row of the fixed evaluation batches, for the model
    saved at ``model_path`` as a fresh process loads it (CPU, plain products): the evaluation noise of the final
    validation CE (the report's convergence tolerance) comes from these rows."""
    model = load_model(model_path, expect=None)
    sums, counts = [], []
    for inputs, targets in batches:
        logits = model(inputs)
        nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1),
                              ignore_index=IGNORE, reduction="none").reshape(targets.shape)
        sums.append(nll.sum(dim=1).double().numpy())
        counts.append((targets != IGNORE).sum(dim=1).numpy())
    nll_sums, tokens = np.concatenate(sums), np.concatenate(counts).astype(np.int64)
    return pd.DataFrame({"row": np.arange(len(tokens), dtype=np.int64), "nll": nll_sums, "tokens": tokens})
