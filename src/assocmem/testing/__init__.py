"""Oracles and probes for tests and benchmarks, never used by the pipeline: plain reference implementations that the
project's code must agree with (:mod:`.reference_train`: a nanoGPT-style training loop) and :mod:`.step_ops`, which
counts what a compiled training step runs outside its graph."""
