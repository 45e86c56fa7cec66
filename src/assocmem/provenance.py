"""Where a model file came from, checked when it is read: a cached model is valid only for the job, the
configuration and the run that made it (issue 28).

``model.pt`` and ``best.pt`` carry ``provenance``: the training job (``<exp>/<model>/<subset>``), the job's
fingerprint (model, settings, seed, data, code; ``assocmem.train.job_fingerprint``) and a sha256 of the weights.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import torch

from assocmem.errors import AssocmemError
from assocmem.io import read_json, rebuild_hint

# what a model file must match in the configured model spec (max_len follows the data, so it is left out)
ARCHITECTURE_KEYS = ("n_layer", "d_model", "n_head", "d_ff", "tie_embeddings", "bias")


def weights_digest(state_dict: dict[str, torch.Tensor]) -> str:
    """sha256 of a state dict's names and raw tensor bytes (a flipped byte inside a tensor changes it)."""
    digest = hashlib.sha256()
    for name in sorted(state_dict):
        tensor = state_dict[name].detach().cpu().contiguous()
        digest.update(name.encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def stamp(job: str, fingerprint: str, model: torch.nn.Module) -> dict[str, str]:
    """The provenance a model file carries."""
    return {"job": job, "fingerprint": fingerprint, "weights_sha256": weights_digest(model.state_dict())}


def check_provenance(path: Path, payload: dict[str, Any], expect: dict[str, Any] | None) -> None:
    """Refuse changed weights (always) and, given ``expect`` (``job`` and the configured model ``spec``), a model
    file that another job wrote (a copy or a swap), one whose architecture is not the configured one (a foreign
    model), or one whose fingerprint differs from the run's own summary.json (a stale file)."""
    check_weights(path, payload)
    if expect is None:
        return
    job, spec = expect["job"], expect["spec"]
    provenance = payload.get("provenance") or {}
    if provenance.get("job") != job:
        raise AssocmemError(f"{path} was written by training job {provenance.get('job')!r}, not by {job!r} (a copied "
                            f"or swapped model file?); {rebuild_hint(path)}")
    config = payload.get("config") or {}
    differing = sorted(key for key in ARCHITECTURE_KEYS
                       if spec.get(key) is not None and key in config and config[key] != spec[key])
    if differing:
        found = ", ".join(f"{key} = {config[key]!r} (config: {spec[key]!r})" for key in differing)
        raise AssocmemError(f"{path} is not the configured model {job}: {found}; {rebuild_hint(path)}")
    summary = path.parent / "summary.json"
    if summary.is_file():
        recorded = read_json(summary).get("fingerprint")
        if recorded != provenance.get("fingerprint"):
            raise AssocmemError(f"{path} does not come from the run recorded in {summary} (fingerprint "
                                f"{str(provenance.get('fingerprint'))[:12]} vs {str(recorded)[:12]}); "
                                f"{rebuild_hint(path)}")


def check_weights(path: Path, payload: dict[str, Any]) -> None:
    """Refuse weights that changed after they were written (a flipped byte inside a tensor loads silently)."""
    recorded = (payload.get("provenance") or {}).get("weights_sha256")
    if recorded is not None and recorded != weights_digest(payload.get("model") or {}):
        raise AssocmemError(f"{path} fails its sha256 check: its weights changed after they were written; "
                            f"{rebuild_hint(path)}")
