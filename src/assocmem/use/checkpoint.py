"""Load a trained model from a model file or a run directory, its weights checked (``assocmem.provenance``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from assocmem import layout, train
from assocmem.errors import AssocmemError
from assocmem.model import DecoderLM
from assocmem.use.trust import check_model_run

RUN_DIR_MODEL = "best.pt"  # what a run directory stands for: the weights at the lowest validation CE
MODEL_ARTIFACTS = ("model", "best_model")  # the layout's names of model.pt and best.pt


def model_file(path: str | os.PathLike[str]) -> Path:
    """The model file ``path`` names: the file itself, or a run directory's ``best.pt``."""
    path = Path(path)
    if path.is_dir():
        if not (path / RUN_DIR_MODEL).is_file():
            raise AssocmemError(f"{path} holds no {RUN_DIR_MODEL}: pass a model file (model.pt, best.pt) or the "
                                "directory of a finished training run (results/<exp>/train/<model>/<subset>)")
        return path / RUN_DIR_MODEL
    if not path.is_file():
        raise AssocmemError(f"model not found: {path} (pass a model file, e.g. "
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


def load_model(path: str | os.PathLike[str], device: str | torch.device = "cpu") -> DecoderLM:
    """The trained model at ``path`` (a ``model.pt`` / ``best.pt`` file, or a run directory: its ``best.pt``), in
    eval mode on ``device``.

    The file is read with ``torch.load(weights_only=True)`` and refused, naming it, when its weights changed after
    training wrote them (sha256) or, inside a results directory, when another job or run wrote it (a copied or
    swapped file), made by other code, or built from data that changed since (``assocmem.use.trust``). Raises
    :class:`assocmem.errors.AssocmemError` with a one-line message.

    Example::

        import assocmem, torch
        model = assocmem.load_model("results/qf/train/L4/pct100")  # the run's best.pt
        logits = model(torch.tensor([[2, 40, 17]]))  # next-token logits, shape (batch, positions, vocabulary)

    The token ids are the token store's (``results/<exp>/data/tokens/meta.json``); ``assocmem.use.vocabulary``
    rebuilds its tokenizer, and ``python -m assocmem sample`` / ``evaluate`` use both.
    """
    file = model_file(path)
    check_model_run(file)
    return train.load_model(file, device, expect=expectation(file))
