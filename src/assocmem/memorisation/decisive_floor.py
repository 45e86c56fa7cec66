"""How fast the decisive memorisation column (config/memorisation_decisive.yaml) could possibly train on one GPU,
issue 41's goal being 10 minutes: its training FLOPs at the matrix-product rate measured on the device, a floor no
trainer can beat, for each precision.

The FLOPs count only the products with the dense weights, which every step must do: each Linear of each block and
the tied unembedding over the real 37 symbols, 2 FLOPs a weight a token forward and 4 backward (the input's and the
weight's gradients); not attention's scores, the normalisations, the loss or the optimizer, nor the unembedding's
padding rows. So the floor sits below any real step's cost (``torch.utils.flop_counter`` counts exactly these
products in a real step: tests/unit/memorisation/test_decisive_floor.py). A run's steps are those of the column's
cost model (:func:`assocmem.memorisation.decisive.column_steps`, per overhead truth); a step is a batch of 64 facts
of 9 input tokens (<sos>, 5 key symbols, <sep>, 2 value symbols; the last of 10 is only a target).

The column trains in fp32 (the config's ``train.precision``), and on CUDA the trainer leaves TF32 off, so its
products run at the fp32 rate; bf16 (and TF32, not yet measured there: ``--measure`` does) is the rate a different
experiment would get (the design's power was simulated from fp32 runs; ``precision_check`` measures bf16's
storage against fp32's at the recorded grid's scale). A serial bound sits beside it: a run below
the boundary takes its whole budget, up to 256,000 steps one after another, whatever runs beside it. A few seconds:

    python -m assocmem.memorisation.decisive_floor            # docs/results/memorisation_decisive_gpu_floor.json
    python -m assocmem.memorisation.decisive_floor --measure  # the same at the rates measured on this machine now
"""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from assocmem.checkout import record_commit
from assocmem.facts.tokenize import sequence_text, vocabulary
from assocmem.gemm import measure_peak_flops
from assocmem.io import write_json
from assocmem.memorisation import decisive
from assocmem.memorisation import power_alternatives as pa
from assocmem.model import DecoderLM, ModelConfig

RECORD = decisive.ROOT / "docs" / "results" / "memorisation_decisive_gpu_floor.json"
GOAL_S = 600.0  # issue 41: "the decisive memorisation column in ≤ 10 minutes on one GPU"
# Matrix-product rates measured on one NVIDIA H200 (torch 2.11.0+cu130), the device the goal names.
MEASURED_FLOPS = {
    "fp32": (51.111386e12, "fp32 8192^3 products, TF32 off, 2026-11-26 (the GPU baseline: ../shared/gpu/knn.jsonl, "
                           "fp32_gemm_peak)"),
    "bf16": (798.881380e12, "the highest of the 2026-11-27 run's measure_peak_flops, bf16 4096^3 products "
                            "(benchmarks/records/gpu-check-2026-11-27-h200/call1_results.jsonl)"),
}
# The fastest whole optimizer step measured there: the default's L4 model (4 layers, d 64, batch 32) in one CUDA
# graph, 0.87 ms (benchmarks/README.md, the second gpu_check.sh run). A context for the serial bound, not a floor.
FASTEST_STEP_S = 0.87e-3


def dense_macs_per_token(n_layer: int, d_model: int, d_ff: int, vocab: int) -> int:
    """Multiply-adds a token of the forward pass spends on dense weights: per block the attention's qkv (3 d²) and
    output (d²) projections and the MLP's two (2 d d_ff); then the unembedding (vocab d)."""
    return n_layer * (4 * d_model * d_model + 2 * d_model * d_ff) + vocab * d_model


def _column_spec(config: Path) -> dict[str, Any]:
    return next(iter(yaml.safe_load(config.read_text())["experiments"].values()))


def facts_shape(config: Path = decisive.CONFIG) -> tuple[int, int]:
    """(vocabulary, input tokens a fact) of the column's facts, by the store's vocabulary and sequence layout: a
    fact's inputs are its sequence but the final <eos>, which is only a target."""
    facts = _column_spec(config)["dataset"]["facts"]
    tokens = len(sequence_text(["k"] * facts["key_length"], ["v"] * facts["value_length"]).split())
    return len(vocabulary(facts["key_vocab"], facts["value_vocab"])), tokens


def column_models(config: Path = decisive.CONFIG) -> dict[int, int]:
    """Parameters -> dense multiply-adds a token, for each model of the column's config (sizes as in its record)."""
    vocab, _ = facts_shape(config)
    macs = {}
    for model in _column_spec(config)["models"].values():
        cfg = ModelConfig.from_dict(model, vocab)
        with torch.device("meta"):  # shapes only
            n_params = DecoderLM(cfg).num_parameters()
        macs[n_params] = dense_macs_per_token(cfg.n_layer, cfg.d_model, cfg.d_ff, vocab)
    if sorted(macs) != sorted(decisive.N_PARAMS):
        raise ValueError(f"{config}: models of {sorted(macs)} parameters, the column's record has "
                         f"{list(decisive.N_PARAMS)}")
    return macs


def floor(rates: dict[str, float]) -> list[dict[str, Any]]:
    """Per overhead truth: the column's steps and dense training FLOPs, and the time they take at each rate."""
    recorded = decisive.recorded_runs()
    macs, (_, tokens) = column_models(), facts_shape()
    rows = []
    for truth, column, _, below, steps in decisive.column_steps(recorded, pa.truths(recorded)):
        per_step = 6.0 * decisive.BATCH * tokens * np.array([macs[n] for n in column["n_params"]], float)
        flops = float((steps * per_step).sum())
        longest = float(steps.max())
        rows.append({"law": truth["law"], "b": truth["b"], "runs": len(column), "runs_below_boundary": int(below.sum()),
                     "steps": float(steps.sum()), "dense_flops": flops, "longest_run_steps": longest,
                     "largest_model_share": float((steps * per_step)[column["n_params"] == max(macs)].sum() / flops),
                     "floor_s": {p: flops / rate for p, rate in rates.items()},
                     "share_of_rate_for_goal": {p: flops / rate / GOAL_S for p, rate in rates.items()},
                     "longest_run_step_budget_s": GOAL_S / longest,
                     "longest_run_at_fastest_step_s": longest * FASTEST_STEP_S})
    return rows


def measured_rates() -> dict[str, tuple[float, str]]:
    """fp32 (TF32 off), TF32 and bf16 matrix-product rates on this machine's first CUDA device, now."""
    device = torch.device("cuda")
    name = torch.cuda.get_device_name(device)
    return {"fp32": (measure_peak_flops(device, 1.0, torch.float32), f"fp32 4096^3 products, TF32 off, {name}, now"),
            "tf32": (measure_peak_flops(device, 1.0, torch.float32, tf32=True), f"TF32 4096^3 products, {name}, now"),
            "bf16": (measure_peak_flops(device, 1.0, torch.bfloat16), f"bf16 4096^3 products, {name}, now")}


def record(rates: dict[str, tuple[float, str]]) -> dict[str, Any]:
    """The floor at ``rates`` (precision -> (FLOP/s, where it was measured)). ``fits_at_rate``: whether the floor is
    within the goal under any truth; false means no trainer could meet the goal at that rate, whatever the truth."""
    rows = floor({p: rate for p, (rate, _) in rates.items()})
    fits = {p: any(row["floor_s"][p] <= GOAL_S for row in rows) for p in rates}
    return {"commit": record_commit(), "date": datetime.date.today().isoformat(),
            "config": str(decisive.CONFIG.relative_to(decisive.ROOT)), "goal_s": GOAL_S,
            "rates_flops": {p: rate for p, (rate, _) in rates.items()},
            "rates_source": {p: source for p, (_, source) in rates.items()},
            "tokens_per_step": decisive.BATCH * facts_shape()[1], "fastest_step_s": FASTEST_STEP_S,
            "fits_at_rate": fits, "by_truth": rows}


def summary(rec: dict[str, Any]) -> str:
    lines = []
    for p, rate in rec["rates_flops"].items():
        low, high = (f(row["floor_s"][p] for row in rec["by_truth"]) for f in (min, max))
        verdict = "can fit" if rec["fits_at_rate"][p] else "cannot fit"
        lines.append(f"decisive column at {p}, {rate / 1e12:.1f} TFLOP/s: floor {low / 60:.1f}-{high / 60:.1f} min "
                     f"({verdict} in {rec['goal_s'] / 60:.0f} min)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m assocmem.memorisation.decisive_floor",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--measure", action="store_true",
                        help="the rates of this machine's CUDA device, measured now; prints, writes no record")
    args = parser.parse_args(argv)
    if args.measure and not torch.cuda.is_available():
        parser.error("--measure: torch sees no CUDA device here")
    rec = record(measured_rates() if args.measure else MEASURED_FLOPS)
    if not args.measure:
        write_json(RECORD, rec)
    print(summary(rec) + ("" if args.measure else f"\nrecord: {RECORD.relative_to(decisive.ROOT)}"))
    return rec


if __name__ == "__main__":
    main()
