"""Training throughput: the project's trainer (assocmem.train.TrainJob) against real nanoGPT.

The baseline is karpathy/nanoGPT itself, from a checkout the user names (``--nanogpt DIR``; nothing is vendored):
its model.py and configure_optimizers, stepped as its train.py steps on a CPU in fp32. Both sides draw the same
random windows of a synthetic token stream from the same seed and start from the same weights (the project's model
creates its modules in nanoGPT's order), so their losses agree where the bias setting does. The from-scratch
reference loop (assocmem.testing.reference_train) stays the tests' oracle of the trainer's losses, but is no longer
a baseline: on the 2-core AMD EPYC Zen 5 host it ran 0.92-0.99x real nanoGPT at the small config, outside the
5% this benchmark requires of a stand-in (benchmarks/README.md).

Every (arm, round) runs in a fresh process, so environment levers (GLIBC_TUNABLES) and allocator state are per
run; arms are interleaved round by round in a rotating order, warm-up steps are dropped, and the fp32 GEMM peak
is measured in its own process in every round (the MFU denominator). Prints tokens/s, ratios to nanoGPT
(min and max over rounds), MFU and the loss agreement; asserts nothing and writes no files outside a temporary
directory.

    python benchmarks/bench_train.py --quick                                      # seconds: a smoke test
    python benchmarks/bench_train.py --config small --nanogpt ~/nanoGPT           # 4L/4H/d128/T64/B12/V4096
    python benchmarks/bench_train.py --config large --rounds 3 --nanogpt ~/nanoGPT  # 6L/8H/d512/T64/B8/V4096
    python benchmarks/bench_train.py --config small --nanogpt ~/nanoGPT --arms nanogpt,project-nobias+malloc+loop
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from assocmem.autotune.measure import rotated
from assocmem.testing.reference_train import (
    HYPER,
    RandomTokens,
    reference_train,
    route_linears_to_onednn,
    window_batches,
)

REPO = Path(__file__).resolve().parents[1]
CONFIGS = {
    "small": {"n_layer": 4, "n_head": 4, "d_model": 128, "block": 64, "batch": 12, "vocab": 4096},
    "large": {"n_layer": 6, "n_head": 8, "d_model": 512, "block": 64, "batch": 8, "vocab": 4096},
    "vocab50k": {"n_layer": 4, "n_head": 4, "d_model": 128, "block": 64, "batch": 12, "vocab": 50257},
    "quick": {"n_layer": 2, "n_head": 2, "d_model": 32, "block": 16, "batch": 4, "vocab": 256},
}
N_TOKENS = 1_000_000


@dataclass(frozen=True)
class Arm:
    kind: str  # "project" or "nanogpt" (karpathy/nanoGPT's own model.py, from --nanogpt DIR)
    bias: bool
    malloc: bool  # run under the rule environment's GLIBC_TUNABLES
    compile: bool = False
    optimizer: str = "default"  # "default" (the product's: fused), "foreach", "fused" or "loop" (per tensor)
    gemm: str = "native"  # fp32 GEMM library of the Linear layers: "native" (F.linear: MKL) or "onednn"


ARMS = {
    # real nanoGPT: its model.py and configure_optimizers, the step of its train.py (needs --nanogpt DIR): the
    # baseline of every ratio
    "nanogpt": Arm("nanogpt", bias=False, malloc=False),
    "nanogpt+malloc": Arm("nanogpt", bias=False, malloc=True),
    # nanoGPT with only its Linear products moved to oneDNN: the GEMM library's share of a gain
    "nanogpt+malloc+onednn": Arm("nanogpt", bias=False, malloc=True, gemm="onednn"),
    "project": Arm("project", bias=True, malloc=False),  # the trainer's step with the config's defaults
    "project+malloc": Arm("project", bias=True, malloc=True),
    "project-nobias": Arm("project", bias=False, malloc=False),
    "project-nobias+malloc": Arm("project", bias=False, malloc=True),
    "project-nobias+malloc+compile": Arm("project", bias=False, malloc=True, compile=True),
    "project-nobias+malloc+foreach": Arm("project", bias=False, malloc=True, optimizer="foreach"),
    "project-nobias+malloc+loop": Arm("project", bias=False, malloc=True, optimizer="loop"),
    # train.gemm: auto times both libraries on the host (assocmem.autotune.gemm); these arms pin oneDNN
    "project+malloc+onednn": Arm("project", bias=True, malloc=True, gemm="onednn"),
    "project-nobias+malloc+onednn": Arm("project", bias=False, malloc=True, gemm="onednn"),
}
DEFAULT_ARMS = "nanogpt,project,project+malloc+onednn,nanogpt+malloc+onednn"


# --------------------------------------------------------------------------- workers (one process per run)


def load_nanogpt(directory: str):
    """karpathy/nanoGPT's model.py from a checkout (imported from there, never vendored)."""
    import importlib.util

    path = Path(directory) / "model.py"
    if not path.is_file():
        raise SystemExit(f"--nanogpt {directory}: no model.py there (expected a checkout of karpathy/nanoGPT)")
    spec = importlib.util.spec_from_file_location("nanogpt_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_nanogpt(cfg: dict, arm: Arm, steps: int, seed: int, directory: str) -> dict:
    """nanoGPT's training step as its train.py runs it on a CPU in fp32 (no autocast, GradScaler disabled, no
    gradient accumulation): forward with targets, backward, clip, step, zero_grad(set_to_none=True), its warmup +
    cosine learning rate; batches and hyper-parameters as the other arms."""
    nanogpt = load_nanogpt(directory)
    store = RandomTokens(cfg["vocab"], N_TOKENS, seed)
    torch.manual_seed(seed)
    model = nanogpt.GPT(nanogpt.GPTConfig(block_size=cfg["block"], vocab_size=cfg["vocab"], n_layer=cfg["n_layer"],
                                          n_head=cfg["n_head"], n_embd=cfg["d_model"], dropout=0.0, bias=arm.bias))
    if arm.gemm == "onednn":
        route_linears_to_onednn(model)
    optimizer = model.configure_optimizers(HYPER["weight_decay"], HYPER["lr"], (HYPER["beta1"], HYPER["beta2"]),
                                           "cpu")
    stamps: list[tuple[float, float, float]] = []
    losses = reference_train(model, window_batches(store, cfg["batch"], cfg["block"], seed), steps, HYPER,
                             on_step=lambda _: stamps.append(clocks()), optimizer=optimizer,
                             loss_of=lambda m, x, y: m(x, y)[1])
    return {"stamps": stamps, "mean_loss": float(np.mean(losses)),
            "n_params": sum(p.numel() for p in model.parameters())}


def project_optimizer(kind: str):
    """The product's make_optimizer (fused on a CPU), or a variant of it: foreach, fused, or the per-tensor loop
    the product ran before (``loop``)."""
    from assocmem import train

    product = train.make_optimizer  # captured: the caller installs the variant in its place
    if kind == "default":
        return product

    def variant(model, settings, device):
        # fresh groups: the product's groups carry their own foreach/fused entries, which win over the keyword
        groups = [{"params": g["params"], "weight_decay": g["weight_decay"]}
                  for g in product(model, settings, device).param_groups]
        flags = {"foreach": False, "fused": False} if kind == "loop" else {kind: True}
        return torch.optim.AdamW(groups, lr=settings.lr, betas=(settings.beta1, settings.beta2), **flags)

    return variant


def run_project(cfg: dict, arm: Arm, steps: int, seed: int, workdir: Path) -> dict:
    import pandas as pd

    from assocmem import train
    from assocmem.model import ModelConfig

    store = RandomTokens(cfg["vocab"], N_TOKENS, seed)
    settings = train.TrainSettings(batch_size=cfg["batch"], micro_batch_size=None, max_steps=steps,
                                   eval_interval=steps, eval_batches=1, checkpoint_interval=10 * steps, device="cpu",
                                   compile=arm.compile, gemm=arm.gemm, **HYPER)
    model_config = ModelConfig(vocab_size=cfg["vocab"], n_layer=cfg["n_layer"], d_model=cfg["d_model"],
                               n_head=cfg["n_head"], d_ff=4 * cfg["d_model"], max_len=cfg["block"], bias=arm.bias)
    train.loop.make_optimizer = project_optimizer(arm.optimizer)  # the name the loop calls
    job = train.TrainJob(run_dir=workdir / "run", model_config=model_config, settings=settings,
                         train_batches=train.WindowBatches(store, cfg["batch"], cfg["block"], seed),
                         eval_sets={"val": train.fixed_windows(store, 1, cfg["batch"], cfg["block"], seed)},
                         seed=seed, tokens_per_sequence=float(cfg["block"]))
    stamps: list[tuple[float, float, float]] = []
    summary = job.run(on_step=lambda _: stamps.append(clocks()))
    metrics = pd.read_csv(workdir / "run" / "metrics.csv")
    return {"stamps": stamps, "mean_loss": float(metrics["train_loss"].iloc[-1]), "n_params": summary["n_params"]}


def clocks() -> tuple[float, float, float]:
    """(wall, CPU time, minor page faults) of this process. CPU time and page faults are less sensitive than
    wall time to other jobs on a shared machine."""
    return time.perf_counter(), time.process_time(), float(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)


def run_peak(seconds: float = 1.0, size: int = 2048) -> dict:
    """Best fp32 GEMM rate (FLOP/s) of short bursts through MKL (``@``) and through oneDNN; the faster one is
    the machine's fp32 peak, the denominator of MFU."""
    from assocmem.gemm import onednn_available, onednn_linear

    a, b = torch.randn(size, size), torch.randn(size, size)
    rates = {"mkl": best_rate(lambda: a @ b, 2.0 * size**3, seconds / 2)}
    if onednn_available():
        rates["onednn"] = best_rate(lambda: onednn_linear(a, b), 2.0 * size**3, seconds / 2)
    return {"peak_flops": max(rates.values()), "rates": rates}


def best_rate(product, flops: float, seconds: float) -> float:
    product()
    best, start = 0.0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        product()
        best = max(best, flops / (time.perf_counter() - t0))
    return best


def step_gemms(cfg: dict) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Operand shapes of every matrix product in one fp32 training step of the bias-free model: per layer the
    qkv, attention-output and two feed-forward projections and the two attention products (batched over
    batch x heads), plus the tied output head; each forward product y = a @ b costs two more in the backward
    pass (dy @ b^T and a^T @ dy)."""
    tokens, d, vocab = cfg["batch"] * cfg["block"], cfg["d_model"], cfg["vocab"]
    heads, block = cfg["batch"] * cfg["n_head"], cfg["block"]
    hd = d // cfg["n_head"]
    layer = [((tokens, d), (d, 3 * d)), ((tokens, d), (d, d)), ((tokens, d), (d, 4 * d)), ((tokens, 4 * d), (4 * d, d)),
             ((heads, block, hd), (heads, hd, block)), ((heads, block, block), (heads, block, hd))]
    forward = layer * cfg["n_layer"] + [((tokens, d), (d, vocab))]
    shapes = []
    for a, b in forward:
        *batch, m, k = a
        n = b[-1]
        shapes += [(a, b), ((*batch, m, n), (*batch, n, k)), ((*batch, k, m), (*batch, m, n))]
    return shapes


def run_gemm_floor(cfg: dict, library: str = "mkl", repeats: int = 20) -> dict:
    """Seconds per step spent in the step's matrix products alone (best of ``repeats``): no implementation that
    performs the same fp32 products through the same library can take less, so tokens_per_step / this is the
    ceiling of any trainer. ``library``: "mkl" (torch.matmul) or "onednn" (the 2-D products through
    assocmem.gemm.onednn_linear, as train.gemm=onednn runs them; the batched attention products stay on matmul)."""
    from assocmem.gemm import onednn_linear

    operands = [(torch.randn(a), torch.randn(b)) for a, b in step_gemms(cfg)]

    def one_step() -> None:
        for a, b in operands:
            if library == "onednn" and a.dim() == 2:
                onednn_linear(a, b.t())
            else:
                torch.matmul(a, b)

    one_step()
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        one_step()
        best = min(best, time.perf_counter() - start)
    flops = sum(2.0 * math.prod(a) * b[-1] for a, b in step_gemms(cfg))
    return {"gemm_s_per_step": best, "gemm_flops_per_step": flops}


def worker(spec: dict) -> None:
    torch.set_num_threads(spec["threads"])
    os.environ["OMP_NUM_THREADS"] = str(spec["threads"])
    if spec["arm"] == "peak":
        result = run_peak()
    elif spec["arm"] == "gemm":
        result = run_gemm_floor(CONFIGS[spec["config"]], spec.get("library", "mkl"))
    else:
        arm, cfg = ARMS[spec["arm"]], CONFIGS[spec["config"]]
        start = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            if arm.kind == "nanogpt":
                result = run_nanogpt(cfg, arm, spec["steps"], spec["seed"], spec["nanogpt"])
            else:
                result = run_project(cfg, arm, spec["steps"], spec["seed"], Path(tmp))
        result["first_step_s"] = result["stamps"][0][0] - start
    print("RESULT " + json.dumps(result))


# --------------------------------------------------------------------------- the driver


def product_malloc_tunables() -> str:
    """GLIBC_TUNABLES as the rules set it (the shell.prefix statement of workflow/rules/common.smk)."""
    text = (REPO / "workflow" / "rules" / "common.smk").read_text()
    prefix = text[text.index("shell.prefix("):]
    tunables = re.findall(r"glibc\.malloc\.\w+=\d+", prefix[:prefix.index("\n)")])
    if not tunables:
        raise SystemExit("workflow/rules/common.smk sets no GLIBC_TUNABLES in its shell.prefix")
    return ":".join(tunables)


def launch(spec: dict, malloc: str | None, cache_dir: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    env.update({"TORCHINDUCTOR_CACHE_DIR": cache_dir, "PYTHONPATH": str(REPO / "src")})
    if malloc:
        env["GLIBC_TUNABLES"] = malloc
    run = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)], env=env, capture_output=True,
                         text=True, check=False)
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    if run.returncode or not lines:
        raise SystemExit(f"worker {spec} failed:\n{run.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def tokens_per_s(stamps: list[list[float]], warmup: int, tokens_per_step: int, clock: int = 0) -> float:
    """Over steps warmup+1 .. last-1 (the last one also evaluates, checkpoints and saves), per second of wall
    time (clock 0) or of the process's CPU time (clock 1)."""
    timed = stamps[warmup:-1]
    return tokens_per_step * (len(timed) - 1) / (timed[-1][clock] - timed[0][clock])


@dataclass
class ArmRuns:
    wall: list[float]  # tokens/s per round, wall clock
    cpu: list[float]  # tokens/s per round, per CPU-second of the process
    faults: list[float]  # minor page faults per step
    loss: list[float]
    first_step: list[float]
    n_params: int = 0


def baseline(arms: list[str]) -> str:
    """The arm every ratio is taken against: real nanoGPT where it runs, else the first arm."""
    return "nanogpt" if "nanogpt" in arms else arms[0]


def bench(config: str, arms: list[str], rounds: int, steps: int, warmup: int, threads: int, seed: int,
          malloc: str, nanogpt: str | None = None) -> None:
    cfg = CONFIGS[config]
    tokens_per_step = cfg["batch"] * cfg["block"]
    runs = {arm: ArmRuns([], [], [], [], []) for arm in arms}
    peaks, loads = [], []
    rates: dict[str, list[float]] = {}
    ceilings: dict[str, list[float]] = {"mkl": [], "onednn": []}
    with tempfile.TemporaryDirectory() as cache_dir:  # torch.compile cache: cold in round 1, warm after
        for round_ in range(rounds):
            peak = launch({"arm": "peak", "threads": threads}, None, cache_dir)
            peaks.append(peak["peak_flops"])
            for library, rate in peak["rates"].items():
                rates.setdefault(library, []).append(rate)
            for library in ceilings if "onednn" in peak["rates"] else ["mkl"]:
                gemm = launch({"arm": "gemm", "config": config, "threads": threads, "library": library}, None,
                              cache_dir)
                ceilings[library].append(tokens_per_step / gemm["gemm_s_per_step"])
            for arm in rotated(arms, round_):
                spec = {"arm": arm, "config": config, "steps": steps, "seed": seed, "threads": threads,
                        "nanogpt": nanogpt}
                result = launch(spec, malloc if ARMS[arm].malloc else None, cache_dir)
                runs[arm].wall.append(tokens_per_s(result["stamps"], warmup, tokens_per_step, clock=0))
                runs[arm].cpu.append(tokens_per_s(result["stamps"], warmup, tokens_per_step, clock=1))
                timed = result["stamps"][warmup:-1]
                runs[arm].faults.append((timed[-1][2] - timed[0][2]) / (len(timed) - 1))
                runs[arm].loss.append(result["mean_loss"])
                runs[arm].first_step.append(result["first_step_s"])
                runs[arm].n_params = result["n_params"]
            loads.append(os.getloadavg()[0])
            print(f"  round {round_ + 1}/{rounds} done (1-min load average {loads[-1]:.2f})", flush=True)
    report(cfg, config, arms, runs, peaks, malloc, loads)
    print("   fp32 GEMM rate at 2048^3 by library: " + "; ".join(
        f"{lib} {min(r) / 1e9:.0f}-{max(r) / 1e9:.0f} GFLOP/s" for lib, r in rates.items()))
    for library, per_round in ceilings.items():
        if per_round:
            report_ceiling(arms, runs, per_round, library)


def report_ceiling(arms: list[str], runs: dict[str, ArmRuns], ceilings: list[float], library: str) -> None:
    """The step's matrix products alone, timed once per round: the most any fp32 trainer using ``library``
    for them can reach."""
    base = baseline(arms)
    ratio = [c / b for c, b in zip(ceilings, runs[base].wall, strict=True)]
    print(f"   GEMM-only ceiling, {library} (the step's matrix products alone, bias-free shapes): {min(ceilings):.0f}-"
          f"{max(ceilings):.0f} tokens/s = {min(ratio):.2f}-{max(ratio):.2f}x {base} (per round; best/best "
          f"{max(ceilings) / max(runs[base].wall):.2f}x): no trainer doing the same fp32 products can beat it")


def report(cfg: dict, config: str, arms: list[str], runs: dict[str, ArmRuns], peaks: list[float], malloc: str,
           loads: list[float]) -> None:
    from assocmem.model import ModelConfig, flops_per_token

    print(f"\n== {config}: {cfg['n_layer']}L/{cfg['n_head']}H/d{cfg['d_model']}/T{cfg['block']}/B{cfg['batch']}/"
          f"V{cfg['vocab']}, fp32; GEMM peak {min(peaks) / 1e9:.1f}-{max(peaks) / 1e9:.1f} GFLOP/s (2048^3, "
          f"faster library, once per round); load average after each round {', '.join(f'{x:.2f}' for x in loads)}")
    print(f"   +malloc arms run with GLIBC_TUNABLES={malloc}")
    base = baseline(arms)
    print(f"{'arm':31s} {'tokens/s (wall)':>16s} {'x ' + base:>11s} {'best/best':>9s} {'x (CPU time)':>12s} "
          f"{'MFU':>10s} {'1st step':>8s} {'faults/step':>11s} {'mean loss':>10s}")
    for arm in arms:
        r, b = runs[arm], runs[base]
        spec = ModelConfig(vocab_size=cfg["vocab"], n_layer=cfg["n_layer"], d_model=cfg["d_model"],
                           n_head=cfg["n_head"], d_ff=4 * cfg["d_model"], max_len=cfg["block"], bias=ARMS[arm].bias)
        flops = flops_per_token(spec, cfg["block"], r.n_params)
        wall = [x / y for x, y in zip(r.wall, b.wall, strict=True)]
        cpu = [x / y for x, y in zip(r.cpu, b.cpu, strict=True)]
        mfu = [x * flops / p for x, p in zip(r.wall, peaks, strict=True)]
        print(f"{arm:31s} {min(r.wall):7.0f}-{max(r.wall):<8.0f} {min(wall):5.2f}-{max(wall):<5.2f} "
              f"{max(r.wall) / max(b.wall):9.2f} {min(cpu):6.2f}-{max(cpu):<5.2f} {min(mfu):4.2f}-{max(mfu):<5.2f} "
              f"{np.median(r.first_step):7.1f}s {np.median(r.faults):11.0f} {np.mean(r.loss):10.5f}")
    print("   (min-max over rounds of the per-round ratio; best/best: ratio of the best rounds; MFU: 6N + 12LdT "
          "FLOPs per token over the GEMM peak of the same round; 1st step: process start to the end of step 1)")
    for arm in arms:
        twin = next((a for a in (base, *arms) if ARMS[a].kind != ARMS[arm].kind and ARMS[a].bias == ARMS[arm].bias),
                    None)
        if ARMS[arm].kind != ARMS[base].kind and twin is not None:
            gap = max(abs(x - y) for x, y in zip(runs[arm].loss, runs[twin].loss, strict=True))
            print(f"   mean-loss gap {arm} vs {twin}: {gap:.2e} (same seed, batches and initial weights)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--config", choices=sorted(CONFIGS), default="small")
    parser.add_argument("--arms", default=DEFAULT_ARMS, help=f"comma-separated, from: {', '.join(ARMS)}")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60, help="steps per run, warm-up included")
    parser.add_argument("--warmup", type=int, default=15, help="steps dropped from the timing")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--malloc", help="GLIBC_TUNABLES of the +malloc arms (default: the rules' value)")
    parser.add_argument("--quick", action="store_true", help="tiny model, 1 round, 2 arms")
    parser.add_argument("--nanogpt", metavar="DIR", help="a checkout of karpathy/nanoGPT: adds its training step as "
                        "the arm 'nanogpt' (the baseline of every ratio)")
    args = parser.parse_args(argv)
    if args.worker:
        worker(json.loads(args.worker))
        return
    if args.quick:
        args.config, args.rounds, args.steps, args.warmup = "quick", 1, 20, 5
        args.arms = "nanogpt,project-nobias" if args.nanogpt else "project-nobias,project-nobias+malloc"
    arms = args.arms.split(",")
    if args.nanogpt and "nanogpt" not in arms:
        arms.insert(0, "nanogpt")
    if any(ARMS[a].kind == "nanogpt" for a in arms if a in ARMS) and not args.nanogpt:
        raise SystemExit("the nanogpt arms need --nanogpt DIR (a checkout of karpathy/nanoGPT)")
    if args.nanogpt:
        load_nanogpt(args.nanogpt)  # fail before any round
    unknown = [a for a in arms if a not in ARMS]
    if unknown or args.steps < args.warmup + 3:
        raise SystemExit(f"unknown arms {unknown}, or --steps not above --warmup + 2")
    print(f"torch {torch.__version__}, {args.threads} threads, {args.rounds} rounds x {len(arms)} arms, "
          f"{args.steps} steps ({args.warmup} warm-up dropped), load average {os.getloadavg()}")
    malloc = args.malloc or product_malloc_tunables()
    bench(args.config, arms, args.rounds, args.steps, args.warmup, args.threads, args.seed, malloc, args.nanogpt)


if __name__ == "__main__":
    main()
