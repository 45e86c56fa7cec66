"""Sweep cells per hour with each training lever on and off (today: the GEMM library, ``train.gemm``; a lever joins
as one more arm of train keys): the project's trainer (assocmem.train.build_job, as the
train rule runs it) on a Question-Formation token store at the default config's shapes.

A cell is one model trained for ``--steps`` steps (evaluating the whole dev split every ``eval_interval`` steps, as
the default does). Every (arm, round) runs all cells in a fresh process; arms are interleaved round by round in a
rotating order. Prints each arm's seconds per cell, the per-round ratios of cells/hour to the ``today`` arm
(min / median / max), the final losses of every arm (a faithful lever leaves them equal to fp32 rounding), and the
host's CPU model and ISA flags. Asserts nothing; writes only under a temporary directory.

    python benchmarks/bench_sweep.py --quick                 # seconds: a smoke test
    python benchmarks/bench_sweep.py --rounds 3              # the default's L2 and L4, 300 steps each
    python benchmarks/bench_sweep.py --arms today,native,onednn
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ARMS = {  # train keys each arm sets over the default config's
    "today": {},
    "native": {"gemm": "native"},
    "onednn": {"gemm": "onednn"},
}
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


def make_store(work: Path, n_train: int) -> Path:
    from assocmem.qf.generate import generate_qf
    from assocmem.qf.tokenize import tokenize_qf_dir

    raw, store = work / "raw", work / "tokens"
    generate_qf(raw, n_train=n_train, n_dev=1000, n_test=1000, n_gen=1000, seed=1234)
    tokenize_qf_dir(raw, store)
    return store


def default_experiment() -> dict:
    from assocmem.config import load_config, load_schema
    from assocmem.schemas import config_schema_path

    return load_config(REPO / "config" / "config.yaml", load_schema(config_schema_path()))["experiments"]["qf"]


def run_child(args: argparse.Namespace) -> None:
    """One arm: every cell trained in this process; prints {cell: {seconds, final train loss, final val CE}}."""
    from assocmem.config import run_settings
    from assocmem.runtime import set_threads
    from assocmem.train import build_job

    set_threads(args.threads)
    exp, result = default_experiment(), {}
    for cell in args.cells.split(","):
        model, train = run_settings(exp, cell)
        train = {**train, **ARMS[args.arm], "max_steps": args.steps, "early_stopping_patience": None,
                 "checkpoint_interval": args.steps + 1}
        with tempfile.TemporaryDirectory() as run_dir:
            start = time.perf_counter()
            summary = build_job(train, model, 1234, Path(args.store), Path(run_dir)).run()
            result[cell] = {"seconds": time.perf_counter() - start, "train": summary["final"]["train_loss"],
                            "val": summary["final"]["val_ce"]}
    print(json.dumps(result))


def run_arm(args: argparse.Namespace, arm: str, store: Path) -> dict:
    cmd = [sys.executable, __file__, "--child", "--arm", arm, "--store", str(store), "--cells", args.cells,
           "--steps", str(args.steps), "--threads", str(args.threads)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
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
    print("\nfinal losses (train / val), round 1:")
    for arm in arms:
        losses = (f"{cell} {v['train']:.6f} / {v['val']:.6f}" for cell, v in rounds[0][arm].items())
        print(f"  {arm:<22}" + "  ".join(losses))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arms", default="today,native,onednn")
    parser.add_argument("--cells", default="L2,L4")
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
    arms = args.arms.split(",")
    if "today" not in arms:
        arms.insert(0, "today")
    with tempfile.TemporaryDirectory() as work:
        store = make_store(Path(work), args.n_train)
        rounds = []
        for r in range(args.rounds):
            order = arms[r % len(arms):] + arms[:r % len(arms)]
            rounds.append({arm: run_arm(args, arm, store) for arm in order})
            print(f"round {r + 1}: " + ", ".join(f"{arm} {sum(c['seconds'] for c in rounds[-1][arm].values()):.1f} s"
                                                 for arm in arms), flush=True)
    report(arms, rounds)


if __name__ == "__main__":
    main()
