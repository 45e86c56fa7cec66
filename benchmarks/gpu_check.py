"""The GPU check's measurements (issue 41), one arm per process, and its table; benchmarks/gpu_check.sh runs them.

Arms (each appends one JSON line to ``--out``):

* ``gpt2-project-eager`` / ``gpt2-project-compile``: GPT-2 small (12 layers, d 768, 12 heads, 1,024 tokens,
  vocabulary 50,257, no biases, as nanoGPT's GPT-2 config), micro-batch 12, bf16, through the project's
  ``TrainJob`` (``train.compile`` off / on).
* ``gpt2-nanogpt-eager`` / ``gpt2-nanogpt-compile``: the same model from karpathy/nanoGPT's own ``model.py``
  (``--nanogpt DIR``, a checkout the caller names; nothing is vendored), stepped as its ``train.py`` steps: bf16
  autocast, fused AdamW from its ``configure_optimizers``, clip 1.0, batches copied from pinned memory.
* ``l4-eager`` / ``l4-compile`` / ``l4-graphs``: the default config's L4 model (4 layers, d 64, batch 32, 36 tokens,
  vocabulary 72) through ``TrainJob``: eager, ``train.compile``, ``train.cuda_graphs``; fp32, as the default trains
  it (the first GPU check, 2026-11-26, ran them in bf16 autocast: 11.45 / 9.78 / 4.35 ms a step on an H200).

Throughput is read over the steps after the warm-up, between two host syncs (the trainer reads its loss at an
evaluation), so it is GPU time, not launch time. MFU = tokens/s x (6N + 12 L d T) / the bf16 matmul peak measured
on the same device (``assocmem.gemm.measure_peak_flops``).

    python benchmarks/gpu_check.py arm gpt2-project-eager --out results.jsonl
    python benchmarks/gpu_check.py arm gpt2-nanogpt-compile --nanogpt ~/nanoGPT --out results.jsonl
    python benchmarks/gpu_check.py table results.jsonl
    python benchmarks/gpu_check.py arm l4-graphs --out results.jsonl --dry-run   # CPU, tiny shapes, seconds
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

GPT2 = {"n_layer": 12, "d_model": 768, "n_head": 12, "block": 1024, "batch": 12, "vocab": 50257, "bias": False}
L4 = {"n_layer": 4, "d_model": 64, "n_head": 4, "block": 36, "batch": 32, "vocab": 72, "bias": True}
TINY = {"n_layer": 2, "d_model": 32, "n_head": 2, "block": 16, "batch": 4, "vocab": 97, "bias": False}
STEPS = {"gpt2": (8, 24), "l4": (100, 1000)}  # (warm-up, timed): timed a multiple of warm-up (evaluations)
DRY_STEPS = (2, 4)
HYPER = {"lr": 6e-4, "min_lr_ratio": 0.1, "warmup_steps": 10, "weight_decay": 0.1, "beta1": 0.9, "beta2": 0.95,
         "grad_clip": 1.0}
ARMS = ("gpt2-project-eager", "gpt2-project-compile", "gpt2-nanogpt-eager", "gpt2-nanogpt-compile",
        "l4-eager", "l4-compile", "l4-graphs")


def shape_of(arm: str, dry_run: bool) -> dict:
    return TINY if dry_run else (GPT2 if arm.startswith("gpt2") else L4)


def precision_of(arm: str, device: str) -> str:
    """GPT-2 small in bf16 autocast on CUDA, as nanoGPT trains it; the L4 model in fp32, as the default config trains
    it (autocast's casts would add kernels to a launch-bound step)."""
    return "bf16" if device == "cuda" and arm.startswith("gpt2") else "fp32"


def model_config(cfg: dict):
    """The project's ``ModelConfig`` at shape ``cfg`` (a feed-forward 4 d wide, as GPT-2's)."""
    from assocmem.model import ModelConfig

    return ModelConfig(vocab_size=cfg["vocab"], n_layer=cfg["n_layer"], d_model=cfg["d_model"],
                       n_head=cfg["n_head"], d_ff=4 * cfg["d_model"], max_len=cfg["block"], bias=cfg["bias"])


def mfu_of(tokens_per_s: float, cfg: dict, n_params: int, peak: float) -> float:
    """Model FLOPs utilisation: tokens/s x (6N + 12 L d T) over the measured peak."""
    from assocmem.model import flops_per_token

    return tokens_per_s * flops_per_token(model_config(cfg), cfg["block"], n_params) / peak


def project_job(arm: str, cfg: dict, device: str, max_steps: int, eval_interval: int, tmp: str):
    """The project's ``TrainJob`` for ``arm`` at shape ``cfg``, its run directory under ``tmp``."""
    from assocmem.testing.reference_train import RandomTokens
    from assocmem.train import TrainJob, TrainSettings, WindowBatches, fixed_windows

    store = RandomTokens(cfg["vocab"], 2_000_000, seed=0)
    settings = TrainSettings(batch_size=cfg["batch"], micro_batch_size=None, max_steps=max_steps,
                             eval_interval=eval_interval, eval_batches=1,
                             checkpoint_interval=10**9, device=device, precision=precision_of(arm, device),
                             compile=arm.endswith("compile"), cuda_graphs=arm.endswith("graphs"), gemm="native",
                             **HYPER)
    return TrainJob(run_dir=Path(tmp) / "run", model_config=model_config(cfg), settings=settings,
                    train_batches=WindowBatches(store, cfg["batch"], cfg["block"], seed=1),
                    eval_sets={"val": fixed_windows(store, 1, cfg["batch"], cfg["block"], seed=1)}, seed=0,
                    tokens_per_sequence=float(cfg["block"]), job="gpu-check")


def run_project(arm: str, cfg: dict, device: str, warm: int, timed: int, on_step=None) -> dict:
    """The project's TrainJob, evaluating every ``warm`` steps: the timing rows after the first hold the timed steps
    alone (each row ends at the host sync of an evaluation and leaves the evaluation out). ``on_step``: called with
    each step's number after it (from 1), as ``TrainJob.run`` calls it."""
    import pandas as pd

    with tempfile.TemporaryDirectory() as tmp:
        summary = project_job(arm, cfg, device, warm + timed, warm, tmp).run(on_step=on_step)
        timing = pd.read_csv(Path(tmp) / "run" / "timing.csv")
        graphs = json.loads((Path(tmp) / "run" / "timing.json").read_text()).get("cuda_graphs")
    seconds = float(timing["seconds"].iloc[1:].sum())
    steps = int(timing["step"].iloc[-1] - timing["step"].iloc[0])
    return {"tokens_per_s": steps * cfg["batch"] * cfg["block"] / seconds, "ms_per_step": 1000 * seconds / steps,
            "n_params": summary["n_params"], "loss": summary["final"]["train_loss"], "cuda_graphs": graphs}


class NanoGPTLoop:
    """nanoGPT's model and optimizer, stepped as its train.py steps (one micro-batch per step), ``run(n)`` steps at a
    time over a schedule of ``total`` steps."""

    def __init__(self, arm: str, cfg: dict, device: str, total: int, directory: str) -> None:
        import numpy as np
        import torch
        sys.path.insert(0, str(Path(__file__).parent))
        from bench_train import load_nanogpt

        from assocmem.testing.reference_train import RandomTokens

        nanogpt = load_nanogpt(directory)
        torch.manual_seed(0)
        self.cfg, self.device, self.total, self.step = cfg, device, total, 0
        self.vocab = -(-cfg["vocab"] // 64) * 64  # nanoGPT's GPT-2 vocabulary: 50,304
        self.model = nanogpt.GPT(nanogpt.GPTConfig(block_size=cfg["block"], vocab_size=self.vocab,
                                                   n_layer=cfg["n_layer"], n_head=cfg["n_head"],
                                                   n_embd=cfg["d_model"], dropout=0.0, bias=cfg["bias"])).to(device)
        self.optimizer = self.model.configure_optimizers(HYPER["weight_decay"], HYPER["lr"],
                                                         (HYPER["beta1"], HYPER["beta2"]), device)
        self.step_model = torch.compile(self.model) if arm.endswith("compile") else self.model
        self.store, self.rng = RandomTokens(cfg["vocab"], 2_000_000, seed=0), np.random.default_rng(1)
        self.autocast = torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda")
        self.x, self.y = self._batch()
        self.loss = None

    def _batch(self) -> tuple:
        import torch

        x, y = (torch.from_numpy(a) for a in self.store.sample_windows(self.rng, self.cfg["batch"], self.cfg["block"]))
        if self.device == "cuda":
            return x.pin_memory().to(self.device, non_blocking=True), y.pin_memory().to(self.device, non_blocking=True)
        return x, y

    def sync(self) -> None:
        import torch

        if self.device == "cuda":
            torch.cuda.synchronize()

    def run(self, steps: int, on_step=None) -> None:
        import torch

        from assocmem.testing.reference_train import cosine_lr

        for _ in range(steps):
            for group in self.optimizer.param_groups:
                group["lr"] = cosine_lr(self.step, self.total, HYPER)
            with self.autocast:
                _, self.loss = self.step_model(self.x, self.y)
            self.x, self.y = self._batch()  # nanoGPT fetches the next batch while the GPU runs this one
            self.loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), HYPER["grad_clip"])
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.step += 1
            if on_step is not None:
                on_step(self.step)

    def n_params(self) -> int:
        """The parameters of the real vocabulary (nanoGPT pads it)."""
        return (sum(p.numel() for p in self.model.parameters())
                - (self.vocab - self.cfg["vocab"]) * self.cfg["d_model"])


def run_nanogpt(arm: str, cfg: dict, device: str, warm: int, timed: int, directory: str, on_step=None) -> dict:
    """nanoGPT's model and optimizer, stepped as its train.py steps (one micro-batch per step); ``on_step`` as for
    :func:`run_project`."""
    loop = NanoGPTLoop(arm, cfg, device, warm + timed, directory)
    loop.run(warm, on_step)
    loop.sync()
    start = time.perf_counter()
    loop.run(timed, on_step)
    loop.sync()
    seconds = time.perf_counter() - start
    return {"tokens_per_s": timed * cfg["batch"] * cfg["block"] / seconds, "ms_per_step": 1000 * seconds / timed,
            "n_params": loop.n_params(), "loss": float(loop.loss.detach())}


def run_arm(arm: str, nanogpt: str | None, dry_run: bool) -> dict:
    import torch  # here: the table needs no torch

    from assocmem.gemm import measure_peak_flops

    device = "cpu" if dry_run else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"{arm}: no CUDA device here (--dry-run runs the arms on the CPU, tiny)")
    cfg = shape_of(arm, dry_run)
    warm, timed = DRY_STEPS if dry_run else STEPS[arm.split("-")[0]]
    torch.backends.cuda.matmul.allow_tf32 = True  # as nanoGPT's train.py; the bf16 products are unaffected
    start = time.perf_counter()
    if "nanogpt" in arm:
        result = run_nanogpt(arm, cfg, device, warm, timed, nanogpt)
    else:
        result = run_project(arm, cfg, device, warm, timed)
    peak = measure_peak_flops(torch.device(device))
    result["mfu"] = mfu_of(result["tokens_per_s"], cfg, result["n_params"], peak)
    device_name = torch.cuda.get_device_name(0) if device == "cuda" else "cpu (dry run)"
    return {"arm": arm, **result, "peak_flops": peak, "device": device_name, "torch": torch.__version__,
            "wall_s": time.perf_counter() - start}


def base_of(arm: str) -> str | None:
    """The arm an arm's ratio is taken against: nanoGPT in the same mode for the project's GPT-2 arms, the eager
    step for the L4 arms; nanoGPT's own arms have none."""
    if arm.startswith("gpt2-project"):
        return arm.replace("project", "nanogpt")
    return "l4-eager" if arm.startswith("l4-") else None


def table(rows: list[dict]) -> str:
    """One line per arm; the ratios compare the project to nanoGPT in the same mode, and the L4 arms to eager."""
    by_arm = {row["arm"]: row for row in rows if "arm" in row}
    lines = [f"{'arm':<24} {'tokens/s':>12} {'ms/step':>9} {'MFU':>6} {'ratio':>6}  note"]
    for arm in [*ARMS, *sorted(set(by_arm) - set(ARMS))]:
        row = by_arm.get(arm)
        if row is None:
            continue
        if "skipped" in row:
            lines.append(f"{arm:<24} {'-':>12} {'-':>9} {'-':>6} {'-':>6}  skipped: {row['skipped']}")
            continue
        base = by_arm.get(base_of(arm) or "")
        ratio = row["tokens_per_s"] / base["tokens_per_s"] if base and "tokens_per_s" in base else float("nan")
        note = f"{row['device']}, loss {row['loss']:.3f}" + (", CUDA graphs" if row.get("cuda_graphs") else "")
        lines.append(f"{arm:<24} {row['tokens_per_s']:>12,.0f} {row['ms_per_step']:>9.2f} {row['mfu']:>6.1%} "
                     f"{ratio:>6.2f}  {note}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    from main_run_logs import job_cpu, job_timeline, job_times

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    arm = commands.add_parser("arm", help="run arms in this process, append a JSON line each to --out")
    arm.add_argument("names", nargs="+", choices=ARMS)
    arm.add_argument("--out", type=Path, required=True)
    arm.add_argument("--nanogpt", metavar="DIR", help="a checkout of karpathy/nanoGPT (the gpt2-nanogpt-* arms)")
    arm.add_argument("--dry-run", action="store_true", help="on the CPU, tiny shapes, a few steps (seconds)")
    show = commands.add_parser("table", help="print the table of a results file")
    show.add_argument("results", type=Path)
    jobs = commands.add_parser("jobs", help="print the main run's per-job times (Snakemake benchmark files)")
    jobs.add_argument("results", type=Path, help="the run's results/ folder")
    cpu = commands.add_parser("cpu", help="print the main run's per-job start-up and CPU split (the jobs' logs)")
    cpu.add_argument("results", type=Path, help="the run's results/ folder")
    timeline = commands.add_parser("timeline", help="print the main run's jobs by start (Snakemake's log)")
    timeline.add_argument("log", type=Path, help="the run's .snakemake/log/<date>.snakemake.log")
    args = parser.parse_args(argv)
    if args.command == "jobs":
        print(job_times(args.results))
        return
    if args.command == "cpu":
        print(job_cpu(args.results))
        return
    if args.command == "timeline":
        print(job_timeline(args.log))
        return
    if args.command == "table":
        rows = [json.loads(line) for line in args.results.read_text().splitlines() if line.strip()]
        print(table(rows))
        return
    for name in args.names:
        if "nanogpt" in name and not args.nanogpt:
            row = {"arm": name, "skipped": "no --nanogpt DIR given"}
        else:
            row = run_arm(name, args.nanogpt, args.dry_run)
        with args.out.open("a") as out:
            out.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
