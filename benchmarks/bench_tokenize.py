"""Throughput and peak memory of assocmem.tokenwriter.tokenize_corpus for num_proc=1 vs 2.

Generates a synthetic corpus (Zipf-distributed pseudo-words, documents of 50-1500 words) in a temporary
directory, trains a byte-level BPE on its first MB (or uses tiktoken gpt2 when its files are cached), then
tokenizes it once per num_proc, each run in a fresh subprocess so that its peak RSS is its own. Prints
tokens/s, the speed ratio against num_proc=1 and the peak RSS of the tokenizing process and of its largest
worker; asserts nothing and leaves no files behind.

    python benchmarks/bench_tokenize.py --quick        # 4 MB corpus (a few seconds)
    python benchmarks/bench_tokenize.py                # 32 MB corpus, best of 2
    python benchmarks/bench_tokenize.py --mb 64 --procs 1 2 4 --tokenizer tiktoken
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np


def write_corpus(path: Path, megabytes: float, seed: int = 0) -> int:
    """One document per line; returns the number of documents."""
    rng = np.random.default_rng(seed)
    syllables = ["ka", "to", "ri", "men", "sa", "lo", "ne", "dar", "vi", "qu", "e", "a", "stra", "pol", "in"]
    vocabulary = ["".join(rng.choice(syllables, size=rng.integers(1, 4))) for _ in range(20_000)]
    ranks = np.arange(1, len(vocabulary) + 1)
    zipf = (1 / ranks) / np.sum(1 / ranks)
    n_docs = size = 0
    with open(path, "w", encoding="utf-8") as handle:
        while size < megabytes * 1e6:
            words = rng.choice(len(vocabulary), size=int(rng.integers(50, 1500)), p=zipf)
            line = " ".join(vocabulary[word] for word in words) + ".\n"
            handle.write(line)
            size += len(line)
            n_docs += 1
    return n_docs


def peak_rss_kb() -> int:
    """This process's own peak RSS (VmHWM; ru_maxrss survives exec on Linux and may be the launcher's)."""
    status = Path("/proc/self/status")
    if status.exists():
        return int(re.search(r"VmHWM:\s+(\d+) kB", status.read_text()).group(1))
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def child(corpus: str, tokenizer_spec: str, out: str, num_proc: int, batch_docs: int) -> None:
    from assocmem.corpus.bpe import get_tokenizer
    from assocmem.tokenwriter import tokenize_corpus

    def documents():
        with open(corpus, encoding="utf-8") as handle:
            for line in handle:
                yield line.rstrip("\n")

    tokenizer = get_tokenizer(json.loads(tokenizer_spec))
    meta = tokenize_corpus(documents(), tokenizer, out, num_proc=num_proc, batch_docs=batch_docs,
                           shard_tokens=10_000_000, resume=False, progress=False)
    print(json.dumps({
        "tokens_per_s": meta["run"]["tokens_per_s"], "elapsed_s": meta["run"]["elapsed_s"],
        "n_tokens": meta["n_tokens"], "n_docs": meta["n_docs"], "peak_rss_kb": peak_rss_kb(),
        "worker_peak_rss_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
        "order_sha256": meta["order_sha256"],
    }))


def tokenizer_spec(kind: str, corpus: Path, workdir: Path, vocab_size: int) -> dict:
    if kind == "tiktoken":
        return {"kind": "tiktoken", "encoding": "gpt2"}
    from assocmem.corpus.bpe import train_bytelevel_bpe

    def sample():
        with open(corpus, encoding="utf-8") as handle:
            size = 0
            for line in handle:
                size += len(line)
                if size > 1e6:
                    return
                yield line

    path = train_bytelevel_bpe(sample(), workdir / "bpe.json", vocab_size=vocab_size)
    return {"kind": "bytelevel_bpe", "path": str(path)}


def run_once(corpus: Path, spec: dict, out: Path, num_proc: int, batch_docs: int) -> dict:
    command = [sys.executable, __file__, "--child", str(corpus), json.dumps(spec), str(out), str(num_proc),
               str(batch_docs)]
    result = subprocess.run(command, check=True, capture_output=True, text=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mb", type=float, default=32.0, help="corpus size in MB")
    parser.add_argument("--quick", action="store_true", help="4 MB corpus, one repeat")
    parser.add_argument("--procs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=2, help="best of this many runs per num_proc")
    parser.add_argument("--batch-docs", type=int, default=256)
    parser.add_argument("--tokenizer", choices=["bytelevel", "tiktoken"], default="bytelevel")
    parser.add_argument("--vocab-size", type=int, default=16_384)
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        corpus, spec, out, num_proc, batch_docs = args.child
        child(corpus, spec, out, int(num_proc), int(batch_docs))
        return
    megabytes, repeats = (4.0, 1) if args.quick else (args.mb, args.repeats)
    with tempfile.TemporaryDirectory(prefix="bench_tokenize_") as tmp:
        workdir = Path(tmp)
        n_docs = write_corpus(workdir / "corpus.txt", megabytes)
        spec = tokenizer_spec(args.tokenizer, workdir / "corpus.txt", workdir, args.vocab_size)
        print(f"corpus: {megabytes:.0f} MB, {n_docs} documents; tokenizer: {spec['kind']}; "
              f"batch_docs={args.batch_docs}; best of {repeats}")
        results = {}
        for num_proc in args.procs:
            out = workdir / f"out{num_proc}"
            runs = [run_once(workdir / "corpus.txt", spec, out, num_proc, args.batch_docs)
                    for _ in range(repeats)]
            results[num_proc] = max(runs, key=lambda run: run["tokens_per_s"])
        print_table(results, baseline=results[args.procs[0]])


def print_table(results: dict[int, dict], baseline: dict) -> None:
    print(f"{'num_proc':>8} {'tokens':>11} {'tokens/s':>11} {'ratio':>6} {'peak RSS':>9} {'worker peak':>11}")
    for num_proc, run in results.items():
        ratio = run["tokens_per_s"] / baseline["tokens_per_s"]
        worker = f"{run['worker_peak_rss_kb'] / 1024:7.0f} MiB" if num_proc > 1 else f"{'-':>11}"
        print(f"{num_proc:>8} {run['n_tokens']:>11} {run['tokens_per_s']:>11.0f} {ratio:>5.2f}x "
              f"{run['peak_rss_kb'] / 1024:>5.0f} MiB {worker}")
    identical = len({run["order_sha256"] for run in results.values()}) == 1
    print(f"same document-order hash for every num_proc: {identical}")


if __name__ == "__main__":
    main()
