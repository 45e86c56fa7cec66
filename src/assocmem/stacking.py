"""Which runs of an experiment the workflow trains as one stacked job (``train.stack_replicas``, issue 41).

A sweep trains ``sweep.seeds`` replicas of every (model, subset) cell; they share their shape, data and settings and
differ only in seed, so one process can train them as a stack (:mod:`assocmem.train.stacked`). ``stack_replicas``:

- ``false``: one job per run (the workflow as before);
- ``true``: one job per (model, subset) cell of a sweep with at least 2 seeds;
- ``auto``: as ``true`` where the measurement in benchmarks/README.md (``bench_stacked.py``) says stacking pays on
  the device that runs the job, else one job per run.

The measurement (CPU, commit 058141a): K stacked replicas against K single trainer steps, at the memorisation grid's
shapes M0, M3 and M7 (batch 64, 9-token facts). The median speed-up was 0.88-1.01x at K = 1 and 1.12-3.16x at every
shape for K = 3, 4, 12, 16 (timed on a shared, loaded 2-core host); K = 2 was not measured. Nothing larger than M7
and no longer sequences or larger batches were measured, so ``auto`` stacks on the CPU only within what was
measured: K >= 3, at most M7's non-embedding parameters and at most its tokens per micro-batch (64 x 9). On CUDA
(``train.device: cuda``) small models are launch-bound (issue 41: 16 concurrent single processes gave 5.0x one
process), so ``auto`` stacks every cell with K >= 2. ``train.device: auto`` is decided as the CPU: the planning
host need not be the one that runs the job, and a plan that changed with the host would rerun trained runs (another
rule writing their files trips Snakemake's code trigger).

This module imports no torch: the workflow calls it while it plans the DAG.
"""

from __future__ import annotations

from typing import Any

from assocmem.config import run_settings
from assocmem.errors import AssocmemError

CPU_MIN_REPLICAS = 3  # the smallest K measured to pay on the CPU (K = 2 not measured, K = 1: 0.88-1.01x)
CUDA_MIN_REPLICAS = 2
# M7 of config/memorisation.yaml, the largest measured shape: 56,640 non-embedding parameters, micro-batch 64 x 9
CPU_MAX_BODY_PARAMETERS = 56_640
CPU_MAX_MICRO_BATCH_TOKENS = 64 * 9


def body_parameters(spec: dict[str, Any]) -> int:
    """Parameters of a model spec other than its token and position tables (those depend on the data's vocabulary,
    unknown while the DAG is planned); ``model.DecoderLM``'s layers."""
    d, bias = spec["d_model"], spec.get("bias", True)
    d_ff = spec.get("d_ff") or 4 * d
    linear = 4 * d * d + 2 * d * d_ff + (4 * d + d_ff + d if bias else 0)  # qkv, proj, ff up and down
    norms = 2 * d * (2 if bias else 1)
    return spec["n_layer"] * (linear + norms) + d * (2 if bias else 1)


def micro_batch_tokens(spec: dict[str, Any], train: dict[str, Any]) -> int:
    """The most tokens a micro-batch can hold: sequences x the longest a sequence can be."""
    length = min(spec.get("max_len", 64), train.get("block_size", 256))
    return (train.get("micro_batch_size") or train["batch_size"]) * length


def replicas(exp: dict[str, Any]) -> int:
    """Seeds per (model, subset) cell: a sweep's ``seeds``, else 1."""
    return exp["sweep"]["seeds"] if exp.get("sweep") is not None else 1


def why_unstackable(spec: dict[str, Any], train: dict[str, Any]) -> str | None:
    """What keeps a model's runs from one stack (assocmem.train.stacked refuses them), or None."""
    if spec.get("dropout", 0.0) > 0:
        return "dropout > 0"
    if train.get("gpus", 0) > 1:
        return "train.gpus > 1 (DDP)"
    if train.get("gemm") == "onednn" and train.get("device") != "cuda":
        return "train.gemm onednn"
    return None


def pays(spec: dict[str, Any], train: dict[str, Any], k: int) -> bool:
    """Whether the measurement says K stacked replicas of this model beat K single runs on its device."""
    if train.get("device") == "cuda":
        return k >= CUDA_MIN_REPLICAS
    return (k >= CPU_MIN_REPLICAS and body_parameters(spec) <= CPU_MAX_BODY_PARAMETERS
            and micro_batch_tokens(spec, train) <= CPU_MAX_MICRO_BATCH_TOKENS)


def stacked_models(exp: dict[str, Any], name: str = "") -> list[str]:
    """The models of a validated experiment whose seeds train as one stacked job per subset (none: one job per run).
    ``stack_replicas: true`` on a model that cannot stack is refused in one line naming the key."""
    setting = exp["train"].get("stack_replicas", False)
    k = replicas(exp)
    if setting is False or k < 2:
        return []
    chosen = []
    for model in exp["models"]:
        spec, train = run_settings(exp, model)
        problem = why_unstackable(spec, train)
        if problem and setting is True:
            raise AssocmemError(f"experiments.{name}.train.stack_replicas: true, but model {model} cannot be "
                                f"stacked ({problem}); use auto or false")
        if not problem and (setting is True or pays(spec, train, k)):
            chosen.append(model)
    return chosen
