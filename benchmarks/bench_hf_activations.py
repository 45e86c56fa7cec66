"""Throughput of assocmem.activations.hf.dump_hf_chunk_activations against a plain unbatched loop.

CPU: a small GPT-2 shape. GPU (when CUDA is available): the gpt2-medium shape in bfloat16. Weights are random
(no download); throughput does not depend on their values. The arms are interleaved over --rounds rounds in a
rotating order (timed one after the other, the ratio swung from 3.1x to 4.8x under load). Prints chunks/s and
ratios (min-max over rounds); asserts nothing.

    python benchmarks/bench_hf_activations.py [--quick]
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from assocmem.activations.hf import dump_hf_chunk_activations
from assocmem.activations.hf_models import load_causal_lm
from assocmem.autotune.measure import rotated

SMALL_CPU = {"n_layer": 4, "n_embd": 256, "n_head": 4, "vocab_size": 50257, "n_positions": 256}
GPT2_MEDIUM = {"n_layer": 24, "n_embd": 1024, "n_head": 16, "vocab_size": 50257, "n_positions": 1024}


def plain_loop_chunks_per_s(model: torch.nn.Module, tokens: np.ndarray, device: torch.device) -> float:
    """The naive baseline: one chunk at a time through the full LM, hidden_states[-1] at the last position."""
    started = time.perf_counter()
    with torch.no_grad():
        for row in tqdm(tokens, desc="plain loop", leave=False):
            out = model(torch.from_numpy(row)[None].to(device), output_hidden_states=True)
            out.hidden_states[-1][0, -1].float().cpu()
    return len(tokens) / (time.perf_counter() - started)


def dump_chunks_per_s(model: torch.nn.Module, tokens: np.ndarray, batch_size: int, workdir: Path) -> float:
    result = dump_hf_chunk_activations(model, tokens, workdir / f"acts_b{batch_size}.npy", batch_size=batch_size,
                                       resume=False, progress=False)
    return result["chunks_per_s"]


def bench(label: str, spec: dict, n_chunks: int, n_baseline: int, chunk_len: int, batch_size: int,
          rounds: int) -> None:
    """The three arms interleaved round by round in a rotating order; ratios are per round (min-max)."""
    model, info = load_causal_lm(spec)
    device = torch.device(info["device"])
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, info["vocab_size"], size=(n_chunks, chunk_len), dtype=np.int64)
    rates: dict[str, list[float]] = {"plain": [], "batch1": [], "batched": []}
    with tempfile.TemporaryDirectory() as tmp:
        arms = {
            "plain": lambda: plain_loop_chunks_per_s(model, tokens[:n_baseline], device),
            "batch1": lambda: dump_chunks_per_s(model, tokens[:n_baseline], 1, Path(tmp)),
            "batched": lambda: dump_chunks_per_s(model, tokens, batch_size, Path(tmp)),
        }
        dump_chunks_per_s(model, tokens[: min(2 * batch_size, n_chunks)], batch_size, Path(tmp))  # warm-up
        names = list(arms)
        for round_ in range(rounds):
            for name in rotated(names, round_):
                rates[name].append(arms[name]())
    print(f"\n== {label}: {info['n_params'] / 1e6:.1f}M params, {info['dtype']} on {device}, "
          f"{chunk_len}-token chunks, {rounds} interleaved rounds (min-max)")
    rows = (("plain", f"plain unbatched loop (full LM, {n_baseline} chunks)"),
            ("batch1", f"dump_hf_chunk_activations batch_size=1 ({n_baseline} chunks)"),
            ("batched", f"dump_hf_chunk_activations batch_size={batch_size} ({n_chunks} chunks)"))
    for name, text in rows:
        ratio = [a / b for a, b in zip(rates[name], rates["plain"], strict=True)]
        print(f"{text:52s} {min(rates[name]):8.2f}-{max(rates[name]):<8.2f} chunks/s  "
              f"vs plain {min(ratio):5.2f}-{max(ratio):.2f}x")
    print(f"tokens/s (batched, best round): {max(rates['batched']) * chunk_len:,.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few-second run")
    parser.add_argument("--chunk-len", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    n_chunks, n_baseline = (32, 16) if args.quick else (256, 64)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads")
    bench("CPU small shape", {"config": SMALL_CPU, "seed": 0, "device": "cpu"},
          n_chunks, n_baseline, min(args.chunk_len, SMALL_CPU["n_positions"]), args.batch_size, args.rounds)
    if torch.cuda.is_available():
        n_gpu, n_gpu_baseline = (512, 64) if args.quick else (8192, 256)
        gpu_spec = {"config": GPT2_MEDIUM, "seed": 0, "device": "cuda", "dtype": "bfloat16"}
        bench("GPU gpt2-medium shape", gpu_spec, n_gpu, n_gpu_baseline, args.chunk_len, 64, args.rounds)
    else:
        print("\n(no CUDA device: GPU gpt2-medium bf16 benchmark skipped)")
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\npeak RSS: {peak_mib:.0f} MiB")


if __name__ == "__main__":
    main()
