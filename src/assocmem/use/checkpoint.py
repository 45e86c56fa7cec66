"""Load a trained model from a model file or a run directory, its weights checked (``assocmem.provenance``).

The names live in :mod:`assocmem.train.files` (one reader of model files for the stages and for users); this
module is where the user-facing commands take them from."""

from __future__ import annotations

from assocmem.train.files import MODEL_ARTIFACTS, RUN_DIR_MODEL, expectation, load_model, model_file, run_fields

__all__ = ["MODEL_ARTIFACTS", "RUN_DIR_MODEL", "expectation", "load_model", "model_file", "run_fields"]
