"""Command line: ``python -m assocmem <stage> --params JSON [paths]``. The Snakemake rule ``x_y`` runs the
subcommand ``x-y``, which calls :func:`assocmem.stages.x_y` with its params and paths in the order listed below.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from assocmem import stages, stamps
from assocmem.codehash import code_digest
from assocmem.errors import AssocmemError
from assocmem.progress import Heartbeat, set_job, status_line
from assocmem.runtime.cpu_time import CpuSnapshot, cpu_split

log = logging.getLogger("assocmem")
INTERRUPTED = 130  # the exit status of a process ended by SIGINT, as the shell reports it

# subcommand -> (stage function, its path arguments in call order, help); "?" marks an optional path
STAGES: dict[str, tuple[Callable[..., Any], tuple[str, ...], str]] = {
    "generate-data": (stages.generate_data, ("out-dir",), "generate or download the question-formation splits"),
    "data-audit": (stages.data_audit, ("raw-dir", "floor", "compare"),
                   "exact entropy floor + divergence from the real dev split"),
    "generate-fresh": (stages.generate_fresh, ("out-dir",), "a fresh sample from the generator, for evaluate"),
    "generate-facts": (stages.generate_facts, ("out-dir",), "random key -> value facts for the memorisation test, "
                       "and their exact information content"),
    "tokenize": (stages.tokenize, ("out-dir", "raw-dir?"), "normalise the data into the token store"),
    "subsets": (stages.subsets, ("store-dir", "out-dir"), "first X%% of the training split, as a view store"),
    "train": (stages.train, ("store-dir", "run-dir"), "train one model on one subset"),
    "activations": (stages.activations, ("model", "store-dir", "out-dir"), "dump hidden states at chunk ends"),
    "pretrained-activations": (stages.pretrained_activations, ("store-dir", "out-dir"),
                               "Fig. 2 protocol on a pretrained HF causal LM"),
    "neighbours": (stages.neighbours, ("act-dir", "out-dir"), "exact k-NN distances (faiss)"),
    "evaluate": (stages.evaluate, ("model", "store-dir", "out-dir"),
                 "a model's CE with and without <eos> (without --params: on a file or a store split, see "
                 "`evaluate --help`)"),
    "sweep": (stages.sweep, ("results-dir", "out-dir"), "a scaling sweep's analyses (boundary exponent, power)"),
    "memorisation": (stages.memorisation, ("results-dir", "out-dir"),
                     "a memorisation grid's analyses (storage boundary, power, bits per parameter)"),
    "report": (stages.report, ("results-dir", "out-dir"), "build the bound-verification report"),
}
# commands for a trained model: assocmem.use.cli parses and runs them, imported for them only (no stage runs it);
# `evaluate` is one of them when it has no --params
USER_COMMANDS = {"sample": "generate sequences from a trained model (see `sample --help`)",
                 "tensorboard": "write the training curves as TensorBoard event files (see `tensorboard --help`)"}


def is_user_command(argv: list[str]) -> bool:
    if argv[:1] == ["evaluate"]:
        return not any(arg == "--params" or arg.startswith("--params=") for arg in argv)
    return bool(argv) and argv[0] in USER_COMMANDS


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="assocmem", description=__doc__)
    sub = parser.add_subparsers(dest="stage", required=True)
    p = sub.add_parser("validate-config", help="validate a config file and print it with defaults")
    p.add_argument("config", type=Path)
    p.add_argument("--schema", type=Path, help="a config schema to validate against (default: the one shipped with "
                                               "the package, which workflow/schemas/config.schema.yaml links to)")
    p = sub.add_parser("record-results", help="record a measured run (checks.json, timings, stage lines) as JSON "
                                              "for docs/results/ (assocmem.report.record)")
    p.add_argument("--checks", type=Path, required=True, help="the run's results/report/checks.json")
    p.add_argument("--time-log", type=Path, required=True, help="output of `/usr/bin/time -v snakemake ...`")
    p.add_argument("--snakemake-log", type=Path, required=True, help="snakemake's terminal output (stage lines)")
    p.add_argument("--sweep-analysis", type=Path, help="a scaling sweep's results/<exp>/sweep/analysis.json")
    p.add_argument("--memorisation-analysis", type=Path,
                   help="a memorisation grid's results/<exp>/memorisation/analysis.json")
    p.add_argument("--commit", help="the run's commit (default: the one its report.md names, which --commit must "
                                    "match where given)")
    p.add_argument("--date", required=True)
    p.add_argument("--command", required=True, help="the command that was timed")
    p.add_argument("--out", type=Path, required=True)
    p = sub.add_parser("verify", help="check that every finished job's outputs are the files it wrote (its "
                                      "provenance stamp: sha256, settings, code)")
    p.add_argument("results_dir", type=Path, nargs="?", default=Path("results"))
    p = sub.add_parser("run", help="check config files (file and line on errors), then run snakemake with the "
                                   "same arguments, e.g. `python -m assocmem run --cores all --configfile X`; "
                                   "`--set a.b.c=VALUE` (repeatable) overrides any config key, validated")
    p.add_argument("snakemake_args", nargs=argparse.REMAINDER)
    for name, text in USER_COMMANDS.items():  # listed here for --help only
        sub.add_parser(name, help=text)
    for name, (_, paths, text) in STAGES.items():
        p = sub.add_parser(name, help=text)
        p.add_argument("--params", required=True, help="JSON of the config keys this stage depends on")
        p.add_argument("--threads", type=int, default=1, help="CPU threads for torch/faiss (Snakemake's {threads})")
        for arg in paths:
            p.add_argument(f"--{arg.rstrip('?')}", type=Path, required=not arg.endswith("?"))
        add_provenance_args(p)
    return parser


def add_provenance_args(parser: argparse.ArgumentParser) -> None:
    """The job's provenance (assocmem.stamps): the stamps it reads, checked first, and the one it writes last."""
    parser.add_argument("--upstream", help="JSON: upstream stamp -> what it must record (checked before the stage)")
    parser.add_argument("--stamp", type=Path, help="where to write this job's stamp when the stage succeeds")
    parser.add_argument("--outputs", type=Path, nargs="*", default=[], help="the job's output files, for its stamp")


def parse_params(text: str, option: str = "--params") -> dict[str, Any]:
    try:
        params = json.loads(text)
    except json.JSONDecodeError as err:
        raise AssocmemError(f"{option} is not valid JSON: {err}") from err
    if not isinstance(params, dict):
        raise AssocmemError(f"{option} must be a JSON object")
    return params


# stages that run once per model and subset: their status line names the job, e.g. "train L4/pct100"
PER_RUN_DIR = {"train": "run_dir", "activations": "out_dir", "pretrained_activations": "out_dir",
               "neighbours": "out_dir", "evaluate": "out_dir"}


def run_stage(args: argparse.Namespace) -> str:
    """Run one stage; return its one-line result (the key number), named after the job."""
    func, paths, _ = STAGES[args.stage]
    settings = parse_params(args.params)
    upstream = parse_params(args.upstream, "--upstream") if args.upstream else {}
    stamps.verify_all(upstream)
    code = code_digest(func.__name__)  # the digest the rule's params carry (its stamp records it; train keys on it)
    run_dir = PER_RUN_DIR.get(func.__name__)
    job = args.stage if run_dir is None else f"{args.stage} {'/'.join(getattr(args, run_dir).parts[-2:])}"
    set_job(job)
    start = CpuSnapshot.now(with_age=True)
    with Heartbeat(job) if stamps.is_rank_zero() else contextlib.nullcontext():
        result = func({**settings, "threads": args.threads, "code": code},
                      *(getattr(args, arg.rstrip("?").replace("-", "_")) for arg in paths))
    log.info("%s: %s", job, cpu_split(start, CpuSnapshot.now()))  # the job's log only: what its CPU time was
    if args.stamp is not None and stamps.is_rank_zero():
        stamps.write_stamp(args.stamp, func.__name__, settings, code, args.outputs, upstream)
    return f"{job}: {result}" if result else job


def announce(line: str) -> None:
    """Log ``line`` and, when the rule environment opened a status descriptor (ASSOCMEM_STATUS_FD, the
    terminal's stderr before the rule sent stdout and stderr to its log file), print it there too."""
    log.info("%s", line)
    status_line(line)


def format_duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes} m {secs:02d} s" if minutes else f"{seconds:.1f} s"


def _print_config(path: Path, schema: Path | None) -> None:
    import yaml

    from assocmem.config import load_config, load_schema
    from assocmem.schemas import config_schema_path

    print(yaml.safe_dump(load_config(path, load_schema(schema or config_schema_path())), sort_keys=False))


def _record_results(args: argparse.Namespace) -> None:
    from assocmem.io import write_json
    from assocmem.report.record import record

    write_json(args.out, record(args.checks, args.time_log, args.snakemake_log, commit=args.commit, date=args.date,
                                command=args.command, sweep_file=args.sweep_analysis,
                                memorisation_file=args.memorisation_analysis))


def config_files(snakemake_args: list[str]) -> list[Path]:
    """The values of ``--configfile`` (``--configfile A B`` or ``--configfile=A``) in snakemake's arguments."""
    files, taking = [], False
    for arg in snakemake_args:
        if arg.startswith("--configfile="):
            files.append(Path(arg.split("=", 1)[1]))
            taking = False
        elif arg == "--configfile":
            taking = True
        elif taking and not arg.startswith("-"):
            files.append(Path(arg))
        else:
            taking = False
    return files


CONFIG_SUFFIXES = (".yaml", ".yml", ".json")


def targets_out_of_configfile(snakemake_args: list[str]) -> list[str]:
    """Snakemake's ``--configfile`` takes every argument after it, so a target written after it is read as a config
    file (``UnicodeDecodeError`` on a model file). Here a value that is not a config file (.yaml/.yml/.json) is a
    target: it moves before the option, with a note."""
    moved, kept, taking = [], [], False
    for arg in snakemake_args:
        if arg in ("--configfile", "--configfiles"):
            taking = True
        elif arg.startswith("-"):
            taking = False
        elif taking and not arg.endswith(CONFIG_SUFFIXES):
            print(f"assocmem run: '{arg}' follows --configfile but is not a config file ({'/'.join(CONFIG_SUFFIXES)}): "
                  "taken as a target", file=sys.stderr)
            moved.append(arg)
            continue
        kept.append(arg)
    return moved + kept


def workflow_schema(snakefile: Path) -> Path:
    """The schema the workflow of ``snakefile`` validates against, else the one shipped with the package."""
    from assocmem.schemas import config_schema_path

    beside = snakefile.parent / "workflow" / "schemas" / "config.schema.yaml"
    return beside if beside.is_file() else config_schema_path()


def snakemake_argv(snakemake_args: list[str]) -> tuple[list[str], list[dict[str, Any]]]:
    """Snakemake's arguments for ``assocmem run`` and the run's configs. Every config file is validated (errors
    name file, line and key); ``--set`` overrides become the merged config's file, passed as the last
    ``--configfile`` (``assocmem.overrides``)."""
    from assocmem import overrides
    from assocmem.config import load_config, load_schema, read_config_file
    from assocmem.runlock import work_directory

    args, sets = overrides.split_set_args(targets_out_of_configfile(snakemake_args))
    if "-s" not in args and "--snakefile" not in args:
        args = ["-s", str(Path("Snakefile").resolve()), *args]
    snakefile = Path(args[args.index("-s" if "-s" in args else "--snakefile") + 1])
    schema = load_schema(workflow_schema(snakefile))
    files = config_files(args) or [snakefile.parent / "config" / "config.yaml"]
    configs = [load_config(path, schema) for path in files]
    if sets:
        merged = overrides.overridden_config([read_config_file(path) for path in files], sets, schema)
        args += ["--configfile", str(overrides.write_overrides(merged, work_directory(args), files, sets))]
        configs.append(merged)
    return args, configs


def run_snakemake(snakemake_args: list[str]) -> None:
    """Validate every config file with errors that name file, line and key, then hand over to snakemake."""
    from assocmem import rerun

    args, configs = snakemake_argv(snakemake_args)
    _refuse_changed_outputs(results_directory(args, configs))
    _clear_stale_lock(args)
    # the hints of the workflow and its jobs name this command, not the snakemake line it becomes (assocmem.rerun)
    os.environ[rerun.ENVIRONMENT] = rerun.typed_command("python -m assocmem run", snakemake_args)
    os.execvp(sys.executable, [sys.executable, "-m", "snakemake", *args])


def results_directory(snakemake_args: list[str], configs: list[dict[str, Any]]) -> Path:
    """The run's results directory: the last config's ``results_dir`` (or a ``--config results_dir=...``
    override), under the directory snakemake works in."""
    from assocmem.runlock import work_directory

    results = next((config["results_dir"] for config in reversed(configs) if "results_dir" in config), "results")
    for arg in snakemake_args:
        if arg.startswith("results_dir="):
            results = arg.split("=", 1)[1]
    return work_directory(snakemake_args) / results


def _refuse_changed_outputs(results_dir: Path) -> None:
    """Refuse to start while a finished job's output is not the file the job wrote (swapped, copied, edited or
    cut: Snakemake would keep it, since its time did not move, or rebuild only its dependants from it)."""
    problems = stamps.scan(results_dir)
    if problems:
        shown = "\n  ".join(problems[:20]) + (f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else "")
        raise AssocmemError(f"{len(problems)} output(s) under {results_dir} are not what their jobs wrote "
                            f"(`python -m assocmem verify {results_dir}` lists them):\n  {shown}")


def _verify(results_dir: Path) -> int:
    from assocmem.trust import audit

    if not results_dir.is_dir():
        raise AssocmemError(f"results directory not found: {results_dir}")
    problems = audit(results_dir)
    for problem in problems:
        print(problem)
    count = sum(1 for _ in stamps.find_stamps(results_dir))
    print(f"assocmem verify: {count} job(s) under {results_dir}, {len(problems)} problem(s)", file=sys.stderr)
    return 1 if problems else 0


def _clear_stale_lock(snakemake_args: list[str]) -> None:
    """After a killed run, unlock its directory so that no manual step is needed (``assocmem.runlock``)."""
    from assocmem.runlock import stale_lock, work_directory

    workdir = work_directory(snakemake_args)
    if "--unlock" in snakemake_args or not stale_lock(workdir):
        return
    result = subprocess.run([sys.executable, "-m", "snakemake", *snakemake_args, "--unlock"], capture_output=True,
                            text=True, check=False)
    if result.returncode != 0:
        raise AssocmemError(f"could not remove the lock a killed run left in {workdir}: "
                            f"{(result.stdout + result.stderr).strip()[-2000:]}")
    print(f"assocmem run: removed the lock a killed run left in {workdir} (no snakemake process works there)",
          file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # faiss's loader logs each optional SIMD build it probes for and does not find as an INFO traceback
    logging.getLogger("faiss.loader").setLevel(logging.WARNING)
    argv = sys.argv[1:] if argv is None else argv
    if is_user_command(argv):
        from assocmem.use.cli import main as use_main

        return use_main(argv)
    # `run` passes everything after it to snakemake untouched (argparse would try to read its options)
    args = argparse.Namespace(stage="run") if argv[:1] == ["run"] else build_parser().parse_args(argv)
    start = time.perf_counter()
    try:
        if args.stage == "validate-config":
            _print_config(args.config, args.schema)
            return 0
        if args.stage == "verify":
            return _verify(args.results_dir)
        if args.stage == "run":
            run_snakemake(argv[1:])
        if args.stage == "record-results":
            _record_results(args)
            return 0
        line = run_stage(args)
    except AssocmemError as err:
        print(f"assocmem {args.stage}: error: {err}", file=sys.stderr)
        status_line(f"{args.stage}: error: {err}")  # on the terminal too, whatever Snakemake prints
        return 2
    except KeyboardInterrupt:
        line = f"{args.stage}: interrupted (Ctrl-C); nothing half-written is kept, and a rerun resumes"
        print(f"assocmem {line}", file=sys.stderr)
        status_line(line)
        return INTERRUPTED
    except Exception as err:
        status_line(f"{args.stage}: failed: {type(err).__name__}: {err} (the traceback is in the job's log)")
        raise
    announce(f"{line} in {format_duration(time.perf_counter() - start)}")
    return 0
