"""Exact (and IVF approximate) L2 nearest-neighbour search over activation matrices with faiss.

Arrays in, arrays or DataFrames out; nothing here touches the file system. Distances returned by
every public function are Euclidean (not squared) and float32; ids are int64 row numbers.

One concern a module: :mod:`.exact` (exact search, verified against float32 rounding), :mod:`.engine` (the job's
engine, chosen once), :mod:`.engines` (its float32 candidate search on CPU, faiss or oneDNN, and faiss on GPU),
:mod:`.select` (a block's k smallest scores through column groups, for the oneDNN engine), :mod:`.duplicates` (exact
duplicate rows searched once), :mod:`.ivf` (approximate search and its measured recall), :mod:`.protocols`
(self-search in nested subsamples, held-out search), :mod:`.radius` (the radius test's searches among distinct
prefixes and gain-free vectors) and :mod:`.stage` (the neighbours stage and its summary).
"""

from assocmem.knn.duplicates import Groups, duplicate_groups, row_hashes
from assocmem.knn.engine import GPU_MAX_K, KINDS, Engine, resolve_engine
from assocmem.knn.engines import (
    CPU_ENGINES,
    GemmBlocks,
    choose_cpu_engine,
    gemm_knn,
    resolve_cpu_engine,
)
from assocmem.knn.exact import DEFAULT_MAX_POOL, DEFAULT_QUERY_BATCH, knn
from assocmem.knn.ivf import IvfResult, ivf_heldout_search, ivf_search, ivf_self_search, ivf_with_recall, recall_at_k
from assocmem.knn.protocols import heldout_search, nested_subsample_rows, self_search
from assocmem.knn.stage import (
    SUMMARY_COLUMNS,
    job_engine,
    search_activations,
    search_layer,
    search_radius,
    summarise,
)

__all__ = [
    "CPU_ENGINES",
    "DEFAULT_MAX_POOL",
    "DEFAULT_QUERY_BATCH",
    "GPU_MAX_K",
    "KINDS",
    "Engine",
    "GemmBlocks",
    "Groups",
    "IvfResult",
    "SUMMARY_COLUMNS",
    "choose_cpu_engine",
    "duplicate_groups",
    "gemm_knn",
    "heldout_search",
    "ivf_heldout_search",
    "ivf_search",
    "ivf_self_search",
    "ivf_with_recall",
    "job_engine",
    "knn",
    "nested_subsample_rows",
    "recall_at_k",
    "resolve_cpu_engine",
    "resolve_engine",
    "row_hashes",
    "search_activations",
    "search_layer",
    "search_radius",
    "self_search",
    "summarise",
]
