"""Choices made by measurement on the host: ``train.gemm: auto`` (:mod:`.gemm`) and ``neighbours.cpu_engine: auto``
(:func:`assocmem.knn.engines.choose_cpu_engine`) time both libraries at the job's own shapes, and keep the answer
per host and shape (:mod:`.measure`)."""

from assocmem.autotune.measure import (
    CACHE_ENV,
    Choice,
    choose,
    default_cache_file,
    fastest,
    host_key,
    time_candidates,
)

__all__ = ["CACHE_ENV", "Choice", "choose", "default_cache_file", "fastest", "host_key", "time_candidates"]
