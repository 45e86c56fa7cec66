"""What a compiled training step runs outside its graph: the project's trainer against nanoGPT's loop (issue 41).

At GPT-2 small the compiled project step ran at 0.998-0.999x nanoGPT's on an H200 (2026-11-27): a gap of some
tens of microseconds in a 26 ms step, the size of a few small kernels. Every ATen op a step calls outside the
compiled graph is at least one kernel launch on a GPU, so this script counts them, per step and by name, for both
loops on the same model (``benchmarks/gpu_check.py``'s GPT-2 arms, ``gpt2-project-compile`` and
``gpt2-nanogpt-compile``, at its tiny shape: the same ops at any size), profiling 3 steps after 4 warm-up steps.
On CUDA it also counts the device's events a step (kernels, copies, sets). The counts do not depend on the host;
what they cost does, and only the GPU check's GPT-2 arms time it.

    python benchmarks/bench_step_ops.py --nanogpt ~/nanoGPT            # the CPU: ops only
    python benchmarks/bench_step_ops.py --nanogpt ~/nanoGPT --device cuda --out ops.json
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

import torch
from gpu_check import TINY, run_nanogpt, run_project

from assocmem.testing.step_ops import StepProfiler

WARM, PROFILED = 4, 3  # evaluations at steps 4 and 8; steps 5-7 are profiled


def count(arm: str, device: str, nanogpt: str | None) -> dict:
    import torch._inductor.config as inductor
    from torch._inductor import metrics

    profiler = StepProfiler(first=WARM, steps=PROFILED)
    torch.backends.cuda.matmul.allow_tf32 = True  # as gpu_check.py's arms
    graphs: list[Counter] = []  # each compiled graph's ops after Inductor's graph passes, before fusion
    inductor.post_grad_custom_post_pass = lambda graph: graphs.append(
        Counter(str(node.target) for node in graph.nodes if node.op == "call_function"))
    inductor.force_disable_caches = True  # a cached graph generates no kernels, so none would be counted
    metrics.reset()
    if "nanogpt" in arm:
        run_nanogpt(arm, TINY, device, WARM, WARM, nanogpt, on_step=profiler)
    else:
        run_project(arm, TINY, device, WARM, WARM, on_step=profiler)
    inductor.post_grad_custom_post_pass = None
    ops, optimizer = profiler.eager_ops(), profiler.eager_ops(optimizer=True)
    return {"arm": arm, "device": device, "torch": torch.__version__, "eager_ops": ops, "optimizer_ops": optimizer,
            "eager_ops_per_step": sum(ops.values()), "optimizer_ops_per_step": sum(optimizer.values()),
            "device_events_per_step": profiler.device_events(), "kernels_generated": metrics.generated_kernel_count,
            "graph_ops": [dict(graph) for graph in graphs]}


def table(rows: list[dict]) -> str:
    lines = [" | ".join(["ops outside the compiled graph, per step", *(row["arm"] for row in rows)])]
    for key, title in (("eager_ops", "the step but its optimizer"), ("optimizer_ops", "optimizer.step()")):
        lines.append(f"{title}:")
        for name in sorted({name for row in rows for name in row[key]}):
            lines.append(f"  {name:28s} " + " | ".join(f"{row[key].get(name, 0):g}" for row in rows))
        lines.append(f"  {'total':28s} " + " | ".join(f"{row[key + '_per_step']:g}" for row in rows))
    lines.append(f"{'kernels Inductor generated':30s} " + " | ".join(f"{row['kernels_generated']}" for row in rows))
    lines.append(f"{'ops in the compiled graphs':30s} " + " | ".join(
        " + ".join(str(sum(graph.values())) for graph in row["graph_ops"]) for row in rows))
    if any(row["device_events_per_step"] is not None for row in rows):
        lines.append(f"{'device events a step (CUDA)':30s} " + " | ".join(f"{row['device_events_per_step']}"
                                                                           for row in rows))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nanogpt", metavar="DIR", help="a checkout of karpathy/nanoGPT (without: the project only)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=("cpu", "cuda"))
    parser.add_argument("--out", type=Path, help="write the counts as JSON")
    args = parser.parse_args(argv)
    arms = ["gpt2-project-compile", *(["gpt2-nanogpt-compile"] if args.nanogpt else [])]
    rows = [count(arm, args.device, args.nanogpt) for arm in arms]
    print(table(rows))
    if len(rows) == 2:
        extra = rows[0]["eager_ops_per_step"] - rows[1]["eager_ops_per_step"]
        print(f"outside the graph and the optimizer, the project's step calls {extra:+g} ops a step against nanoGPT's")
        project, theirs = (sum((Counter(graph) for graph in row["graph_ops"]), Counter()) for row in rows)
        differ = sorted(name for name in project | theirs if project[name] != theirs[name])
        print("inside the compiled graphs, ops counted differently (project / nanoGPT): "
              + (", ".join(f"{name} {project[name]} / {theirs[name]}" for name in differ) or "none"))
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
