"""Picking up a trained model outside the pipeline: load it (:mod:`.checkpoint`, exported as
``assocmem.load_model``), rebuild its tokenizer from its token store (:mod:`.vocabulary`), sample from it
(:mod:`.sample`), measure its CE on a file or a store split (:mod:`.evaluate`) and export training curves for
TensorBoard (:mod:`.curves`). ``python -m assocmem sample | evaluate | tensorboard`` (:mod:`.cli`).

No pipeline stage runs this code: the stages import the modules they use directly.
"""
