"""Sweep cells per hour with each training lever on and off: the project's trainer (assocmem.train.build_job, as the
train rule runs it) on the token store of a shipped config, at that config's shapes.

Levers are of two kinds. Train keys (``train.gemm``) are set per arm over the config's. Code levers are switched
off in an arm by restoring the code path they replaced (``before`` turns every one off: the trainer as it was):
- ``fused_adamw``: AdamW fused on a CPU (before: the per-tensor loop);
- ``fast_seed``: the per-step seed of the step's device only (before: ``torch.manual_seed``, every backend);
- ``gathered_batches``: a padded batch in one gather from the split in memory (before: a Python loop over rows).
Probes apply a lever the product does not ship: ``length-groups-G`` cuts each step's batch into G micro-batches of
similar length, each padded only to its own longest sequence (the same gradient to fp32 rounding).

A cell is one model trained for ``--steps`` steps, evaluating as its config does (the default: the whole dev split
every 250 steps; memorisation: its recall of every fact every 200). Every (arm, round) runs all cells in a fresh
process; arms are interleaved round by round in a rotating order. Prints each arm's seconds per cell, the per-round
ratios of cells/hour to the ``today`` arm (min / median / max), the final losses of every arm (a faithful lever
leaves them equal to fp32 rounding), and the host's CPU model and ISA flags. Asserts nothing; writes only under a
temporary directory.

    python benchmarks/bench_sweep.py --quick                 # seconds: a smoke test
    python benchmarks/bench_sweep.py --rounds 3              # the default's L2 and L4, 300 steps each
    python benchmarks/bench_sweep.py --arms today,native,onednn
    python benchmarks/bench_sweep.py --arms today,bf16,length-groups-2,length-groups-4   # levers not shipped
    python benchmarks/bench_sweep.py --experiment memorisation --arms today,before --steps 2000 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LEVERS = ("fused_adamw", "fast_seed", "gathered_batches")
ARMS = {  # (train keys each arm sets over the config's, code levers it switches off)
    "today": ({}, ()),
    "native": ({"gemm": "native"}, ()),
    "onednn": ({"gemm": "onednn"}, ()),
    "bf16": ({"precision": "bf16"}, ()),  # bf16 autocast on the CPU (train.precision)
    "compile": ({"compile": True}, ()),  # torch.compile (train.compile; Inductor's kernels cached across rounds)
    "before": ({}, LEVERS),
    **{f"no-{lever.replace('_', '-')}": ({}, (lever,)) for lever in LEVERS},
    # today's code from initial weights moved by 1e-7 (relative): the fp32 noise floor of the final losses, the
    # yardstick of a faithful lever's loss differences (training amplifies any rounding difference)
    "today-nudged": ({}, ("nudge",)),
    # probes of levers not in the product: each step's batch cut into G micro-batches of similar length, each
    # padded only to its own longest sequence (same sequences, same summed loss: the padded product's gradient
    # to fp32 rounding, with dropout 0)
    **{f"length-groups-{g}": ({}, (f"length_groups:{g}",)) for g in (2, 4)},
}
EXPERIMENTS = {"qf": ("config.yaml", "L2,L4"), "memorisation": ("memorisation.yaml", "M0,M3,M7")}
ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")


def host() -> str:
    """The CPU model (name, family/model) and the ISA flags that change the products' speed."""
    info: dict[str, str] = {}
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        key, _, value = line.partition(":")
        info.setdefault(key.strip(), value.strip())
    flags = [flag for flag in ISA_FLAGS if flag in info.get("flags", "").split()]
    return (f"{info.get('model name', 'unknown CPU')} (family {info.get('cpu family', '?')}, model "
            f"{info.get('model', '?')}), flags: {' '.join(flags) or 'none of ' + ' '.join(ISA_FLAGS)}")


def make_store(work: Path, n_train: int, experiment: str) -> Path:
    """The experiment's token store: Question-Formation sampled from the grammar (``n_train`` sequences), or the
    memorisation config's facts (all D of them)."""
    raw, store = work / "raw", work / "tokens"
    if experiment == "memorisation":
        from assocmem.facts.generate import FactsSpec, write_facts
        from assocmem.facts.tokenize import tokenize_facts_dir

        spec = FactsSpec.from_config(load_experiment(experiment)["dataset"]["facts"], seed=2024)
        write_facts(spec, raw)
        tokenize_facts_dir(raw, spec, store)
        return store
    from assocmem.qf.generate import generate_qf
    from assocmem.qf.tokenize import tokenize_qf_dir

    generate_qf(raw, n_train=n_train, n_dev=1000, n_test=1000, n_gen=1000, seed=1234)
    tokenize_qf_dir(raw, store)
    return store


def load_experiment(experiment: str) -> dict:
    from assocmem.config import load_config, load_schema
    from assocmem.schemas import config_schema_path

    config = load_config(REPO / "config" / EXPERIMENTS[experiment][0], load_schema(config_schema_path()))
    return config["experiments"]["qf" if experiment == "qf" else experiment]


def switch_off(levers: tuple[str, ...]) -> None:
    """Restore the code paths the named levers replaced, or apply a probe (in this child process only)."""
    import torch

    from assocmem import tokenstore
    from assocmem.train import loop as train  # the loop looks these names up in its own module

    if "fused_adamw" in levers:
        from bench_train import project_optimizer

        train.make_optimizer = project_optimizer("loop")
    if "fast_seed" in levers:
        train.seed_device = lambda seed, device: torch.manual_seed(seed)
    if "gathered_batches" in levers:
        tokenstore.FLAT_BATCH_TOKENS = -1
    if "nudge" in levers:
        class Nudged(train.DecoderLM):
            def __init__(self, config) -> None:
                super().__init__(config)
                noise = torch.Generator().manual_seed(1)
                with torch.no_grad():
                    for param in self.parameters():
                        param.mul_(1 + 1e-7 * torch.randn(param.shape, generator=noise))

        train.DecoderLM = Nudged
    for probe in levers:
        if probe.startswith("length_groups:"):
            train.TrainJob._micro_batches = length_grouped(int(probe.partition(":")[2]))


def length_grouped(groups: int):
    """A ``TrainJob._micro_batches`` that sorts the batch's sequences by scored length and cuts them into ``groups``
    micro-batches, each trimmed to its own last scored column (causal attention: the trimmed columns never reach
    the kept ones)."""
    import torch

    from assocmem.stopping import IGNORE

    def micro_batches(self, batch):
        inputs, targets = batch
        scored = targets != IGNORE
        last = torch.where(scored.any(1), scored.shape[1] - scored.flip(1).int().argmax(1), 1)
        order, size = torch.argsort(last, stable=True), -(-inputs.shape[0] // groups)
        for i in range(0, inputs.shape[0], size):
            rows = order[i:i + size]
            width = int(last[rows].max())
            yield inputs[rows, :width], targets[rows, :width]

    return micro_batches


def run_child(args: argparse.Namespace) -> None:
    """One arm: every cell trained in this process; prints {cell: {seconds, steps, final train loss, val CE}}."""
    from assocmem.config import run_settings
    from assocmem.runtime import set_threads
    from assocmem.train import build_job

    set_threads(args.threads)
    keys, levers = ARMS[args.arm]
    switch_off(levers)
    exp, result = load_experiment(args.experiment), {}
    for cell in args.cells.split(","):
        model, train = run_settings(exp, cell)
        train = {**train, **keys, "max_steps": args.steps, "max_epochs": None, "early_stopping_patience": None,
                 "checkpoint_interval": args.steps + 1}
        if train.get("stop_at_recall") is not None:
            train["stop_at_recall"] = 1.0  # recall measured at every evaluation as the grid does; no early end
        with tempfile.TemporaryDirectory() as run_dir:
            start = time.perf_counter()
            summary = build_job(train, model, 1234, Path(args.store), Path(run_dir)).run()
            result[cell] = {"seconds": time.perf_counter() - start, "steps": summary["steps"],
                            "train": summary["final"]["train_loss"], "val": summary["final"]["val_ce"]}
    print(json.dumps(result))


def run_arm(args: argparse.Namespace, arm: str, store: Path) -> dict:
    """One arm in a fresh process. Every arm shares one choices cache (``ASSOCMEM_CACHE_DIR``), warmed before the
    first round, so no arm pays the GEMM library's timing for the others."""
    cmd = [sys.executable, __file__, "--child", "--arm", arm, "--store", str(store), "--cells", args.cells,
           "--steps", str(args.steps), "--threads", str(args.threads), "--experiment", args.experiment]
    env = {**os.environ, "ASSOCMEM_CACHE_DIR": str(store.parent / "cache")}
    done = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
    return json.loads(done.stdout.strip().splitlines()[-1])


def report(arms: list[str], rounds: list[dict[str, dict]]) -> None:
    cells = list(rounds[0][arms[0]])
    print(f"\nhost: {host()}")
    print(f"{'arm':<22}" + "".join(f"{cell + ' s/cell':>16}" for cell in cells) + f"{'cells/h vs today':>30}")
    for arm in arms:
        total = {r: sum(c["seconds"] for c in run[arm].values()) for r, run in enumerate(rounds)}
        ratios = [sum(c["seconds"] for c in run["today"].values()) / total[r] for r, run in enumerate(rounds)]
        per_cell = "".join(f"{statistics.median(run[arm][cell]['seconds'] for run in rounds):>16.2f}" for cell in cells)
        print(f"{arm:<22}{per_cell}{min(ratios):>12.2f} / {statistics.median(ratios):.2f} / {max(ratios):.2f}")
    if "before" in arms:
        gains = [sum(c["seconds"] for c in run["before"].values()) / sum(c["seconds"] for c in run["today"].values())
                 for run in rounds]
        print(f"today's cells/hour against before the code levers (per round): {min(gains):.2f} / "
              f"{statistics.median(gains):.2f} / {max(gains):.2f} (min / median / max)")
    steps = {arm: {cell: c["steps"] for cell, c in rounds[0][arm].items()} for arm in arms}
    print(f"steps per cell: {steps['today']}" + ("" if all(v == steps["today"] for v in steps.values())
                                                 else f" (differs between arms: {steps})"))
    print("\nfinal losses (train / val), round 1:")
    for arm in arms:
        losses = (f"{cell} {v['train']:.6f} / {v['val']:.6f}" for cell, v in rounds[0][arm].items())
        print(f"  {arm:<22}" + "  ".join(losses))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arms", default="today,native,onednn", help=f"comma-separated, from: {', '.join(ARMS)}")
    parser.add_argument("--experiment", choices=sorted(EXPERIMENTS), default="qf",
                        help="qf: config/config.yaml (the default); memorisation: config/memorisation.yaml")
    parser.add_argument("--cells", help="models of the experiment (default: L2,L4 or M0,M3,M7)")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per cell (the default's threads_per_job)")
    parser.add_argument("--n-train", type=int, default=20000)
    parser.add_argument("--quick", action="store_true", help="20 steps, one round, 2,000 training sequences")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--arm", help=argparse.SUPPRESS)
    parser.add_argument("--store", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return run_child(args)
    if args.quick:
        args.steps, args.rounds, args.n_train = 20, 1, 2000
    args.cells = args.cells or EXPERIMENTS[args.experiment][1]
    arms = args.arms.split(",")
    unknown = [arm for arm in arms if arm not in ARMS]
    if unknown:
        raise SystemExit(f"unknown arms {unknown}; known: {', '.join(ARMS)}")
    if "today" not in arms:
        arms.insert(0, "today")
    with tempfile.TemporaryDirectory() as work:
        store = make_store(Path(work), args.n_train, args.experiment)
        print(f"{args.experiment}: cells {args.cells}, {args.steps} steps each, {args.rounds} rounds; host: {host()}",
              flush=True)
        run_arm(argparse.Namespace(**{**vars(args), "steps": 2}), "today", store)  # warms the choices cache
        rounds = []
        for r in range(args.rounds):
            order = arms[r % len(arms):] + arms[:r % len(arms)]
            rounds.append({arm: run_arm(args, arm, store) for arm in order})
            print(f"round {r + 1}: " + ", ".join(f"{arm} {sum(c['seconds'] for c in rounds[-1][arm].values()):.1f} s"
                                                 for arm in arms), flush=True)
    report(arms, rounds)


if __name__ == "__main__":
    main()
