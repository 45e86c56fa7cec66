"""``python -m assocmem sample | evaluate | tensorboard``: a trained model at the command line.

``assocmem.cli`` hands these commands here; ``evaluate`` with ``--params`` is the pipeline's stage instead
(workflow/rules/evaluate.smk). Errors print one line and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import math
import secrets
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from assocmem.errors import AssocmemError
from assocmem.model import DecoderLM
from assocmem.runtime import resolve_device
from assocmem.use.checkpoint import load_model, model_file
from assocmem.use.curves import export_curves
from assocmem.use.evaluate import evaluate_file, evaluate_split
from assocmem.use.sample import sample_texts
from assocmem.use.vocabulary import Vocabulary, default_store, load_vocabulary

EPILOG = "MODEL is a model file (model.pt, best.pt) or a training run's directory (its best.pt)."


def count(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value
    return parse


def non_negative(text: str) -> float:
    value = float(text)
    if not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a finite number, 0 or more, got {text}")
    return value


def add_model_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", type=Path, required=True, metavar="MODEL", help="the model (see below)")
    parser.add_argument("--store", type=Path, metavar="DIR",
                        help="the token store it was trained on, which holds its vocabulary (default: "
                             "<results>/<exp>/data/tokens beside a model in a results directory)")
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda or auto")


def add_sample(sub: Any) -> None:
    p = sub.add_parser("sample", help="generate sequences from a trained model, one per line", epilog=EPILOG,
                       description="Generate sequences from a trained model, one per line (prompt included; a text "
                                   "sample's newlines are printed as \\n). Each ends at <eos> (end-of-text) or "
                                   "after --max-new tokens.")
    add_model_args(p)
    p.add_argument("--prompt", default="", help="what every sample continues (Question-Formation: words of the "
                                                "vocabulary, e.g. \"the newt does swim . quest\"); default: nothing")
    p.add_argument("--n", type=count(1), default=5, help="number of samples (default: %(default)s)")
    p.add_argument("--max-new", type=count(1), default=40, help="at most this many new tokens (default: %(default)s)")
    p.add_argument("--temperature", type=non_negative, default=1.0,
                   help="softmax temperature; 0 takes the most likely token (default: %(default)s)")
    p.add_argument("--top-k", type=count(1), metavar="K", help="draw from the K most likely tokens only")
    p.add_argument("--seed", type=int, help="the same seed gives the same samples (default: a fresh seed, printed "
                                            "to stderr)")


def add_evaluate(sub: Any) -> None:
    p = sub.add_parser("evaluate", help="a model's CE on a file or a token-store split (with --params: the "
                                        "pipeline's evaluate stage)", epilog=EPILOG,
                       description="A trained model's cross-entropy (nats/token) with its standard error (rows as "
                                   "clusters), with and without <eos> for a Question-Formation model. With --params "
                                   "this command is the pipeline's evaluate stage (workflow/rules/evaluate.smk).")
    add_model_args(p)
    data = p.add_mutually_exclusive_group()
    data.add_argument("--file", type=Path, help="a McCoy-format file (e.g. question.dev) for a Question-Formation "
                                                "model; plain text for a corpus model")
    data.add_argument("--split", help="a split of the token store (default: its validation split)")
    p.add_argument("--limit", type=count(2), metavar="N", help="only the split's first N sequences (windows)")
    p.add_argument("--json", action="store_true", help="print the numbers as one JSON object")


def add_tensorboard(sub: Any) -> None:
    p = sub.add_parser("tensorboard", help="write every run's training curves as TensorBoard event files",
                       description="Write each training run's curves (metrics.csv) as TensorBoard event files, one "
                                   "TensorBoard run per training run; needs tensorboardX or tensorboard installed.")
    p.add_argument("root", type=Path, nargs="?", default=Path("results"),
                   help="a results directory or one run directory (default: %(default)s)")
    p.add_argument("--logdir", type=Path, default=Path("runs"), help="where to write (default: %(default)s)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m assocmem", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (add_sample, add_evaluate, add_tensorboard):
        add(sub)
    return parser


def model_and_vocabulary(args: argparse.Namespace) -> tuple[Path, DecoderLM, Vocabulary]:
    file = model_file(args.model)
    model = load_model(file, resolve_device(args.device, key="--device"))
    return file, model, load_vocabulary(args.store or default_store(file), model, file)


def run_sample(args: argparse.Namespace) -> None:
    _, model, vocabulary = model_and_vocabulary(args)
    seed = secrets.randbelow(2**31) if args.seed is None else args.seed
    for line in sample_texts(model, vocabulary, args.prompt, n=args.n, max_new=args.max_new,
                             temperature=args.temperature, top_k=args.top_k, seed=seed):
        print(line)
    if args.seed is None:
        print(f"assocmem sample: seed {seed} (--seed {seed} gives these samples again)", file=sys.stderr)


def run_evaluate(args: argparse.Namespace) -> None:
    if args.file is not None and args.limit is not None:
        raise AssocmemError("--limit applies to a store split, not to --file")
    file, model, vocabulary = model_and_vocabulary(args)
    if args.file is not None:
        result = evaluate_file(model, vocabulary, args.file)
    else:
        result = evaluate_split(model, vocabulary, args.split, args.limit)
    result = {"model": str(file), "store": str(vocabulary.store_dir), **result}
    print(json.dumps(result) if args.json else "\n".join(evaluation_lines(result)))


def evaluation_lines(result: dict[str, Any]) -> list[str]:
    """The result as the terminal shows it: model, data, then the CE with and (where it applies) without <eos>."""
    data = result["file"] if "file" in result else f"split {result['split']} of {result['store']}"
    unknown = f", {result['unknown_words']} unknown words" if "unknown_words" in result else ""
    lines = [f"model  {result['model']}",
             f"data   {data}: {result['rows']} {result['unit']}, {result['tokens']} tokens{unknown}"]
    if "ce_no_eos" not in result:
        return [*lines, f"CE     {result['ce']:.4f} +- {result['se']:.4f} nats/token"]
    return [*lines, f"CE     {result['ce']:.4f} +- {result['se']:.4f} nats/token with <eos>",
            f"CE     {result['ce_no_eos']:.4f} +- {result['se_no_eos']:.4f} nats/token without <eos> "
            f"({result['tokens'] - result['rows']} tokens)"]


def run_tensorboard(args: argparse.Namespace) -> None:
    for run_dir in export_curves(args.root, args.logdir):
        print(run_dir)
    print(f"assocmem tensorboard: view with `tensorboard --logdir {args.logdir}`", file=sys.stderr)


COMMANDS: dict[str, Callable[[argparse.Namespace], None]] = {
    "sample": run_sample, "evaluate": run_evaluate, "tensorboard": run_tensorboard}


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        COMMANDS[args.command](args)
    except AssocmemError as err:
        print(f"assocmem {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"assocmem {args.command}: interrupted (Ctrl-C)", file=sys.stderr)
        return 130
    return 0
