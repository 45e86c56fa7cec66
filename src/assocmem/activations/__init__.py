"""Hidden-state dumps at each chunk's last position, for a train split and a held-out split.

* :mod:`~assocmem.activations.decoder` dumps the project's own :class:`~assocmem.model.DecoderLM`:
  ``dump_decoder_activations``;
* :mod:`~assocmem.activations.hf` dumps Hugging Face causal LMs, resumably: ``dump_hf_activations`` (train and
  held-out splits of a store), ``dump_hf_chunk_activations`` (given chunks, one ``.npy``);
  :mod:`~assocmem.activations.hf_models` loads them (``load_causal_lm``) and records their states
  (``LastPositionRecorder``);
* :mod:`~assocmem.activations.splits` is the train/held-out loop both dumpers run (``plan_splits``,
  ``dump_splits``: stores, seeds, ``meta.json``);
* :mod:`~assocmem.activations.final_norm` records the final norm's parameters in ``meta.json``
  (``final_norm_record``) and reads them back (``final_norm_affine``).

The dumpers are imported from their modules, not from here: a stage's code digest (:mod:`assocmem.codehash`)
follows this package's imports, so re-exporting them would tie the project's activations stage to the Hugging
Face code and the pretrained stage to :mod:`assocmem.model`, rerunning each when the other's code changes.
"""

from assocmem.activations.final_norm import FINAL_NORM_LAYER, final_norm_affine, final_norm_record

__all__ = ["FINAL_NORM_LAYER", "final_norm_affine", "final_norm_record"]
