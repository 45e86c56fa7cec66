# Config validation and every input, param and path function the rules use; the rule files stay declarative.
import functools
import json
import os
import shlex
import sys

# this checkout's package, whatever else is installed: the DAG, the code digests and the jobs use one source
sys.path.insert(0, str(Path(workflow.basedir) / "src"))

from assocmem import layout, rerun, runhooks, runlock, targets
from assocmem.codehash import code_digest
from assocmem.config import (
    ConfigError,
    evaluated_runs,
    evaluation_sets,
    fresh_sequences,
    load_schema,
    read_config_file,
    run_settings,
    validate_config,
)
from assocmem.dataset_kinds import FACTS, QUESTION_FORMATION, kind_of
from assocmem.errors import AssocmemError
from assocmem.io import sha256_file
from snakemake.exceptions import WorkflowError

try:
    # every config file read again strictly: duplicate keys, a non-mapping top level and YTE templates are refused,
    # naming the file (Snakemake's own loader keeps the last duplicate and has already evaluated a YTE template)
    for _config_file in workflow.config_settings.configfiles or [
        Path(workflow.basedir) / "config" / "config.yaml"
    ]:
        read_config_file(_config_file)
    _validated = validate_config(
        config,
        load_schema(
            Path(workflow.basedir) / "workflow" / "schemas" / "config.schema.yaml"
        ),
    )
except ConfigError as err:
    raise WorkflowError(str(err)) from None
config.clear()
config.update(_validated)
try:
    # a live run of another checkout writing this results_dir is refused (Snakemake's lock cannot see it, it
    # lives in the working directory: assocmem.runlock); this checkout's own jobs parse the workflow again here,
    # from the same working directory, and pass
    runlock.check_results_dir(config["results_dir"], workflow.basedir)
    runlock.check_claim(config["results_dir"], workflow.basedir)
except AssocmemError as err:
    raise WorkflowError(f"assocmem: {err}") from None

R = config["results_dir"]
# what every hint tells the user to rerun: the command they typed, --configfile and --set included (assocmem.rerun)
RERUN = os.environ.get(rerun.ENVIRONMENT, "").strip() or rerun.snakemake_command(
    sys.argv
)
os.environ[rerun.ENVIRONMENT] = RERUN
# the main process's Ctrl-C handler, its job-error printing and its end-of-run words (assocmem.runhooks)
INTERRUPTS = runhooks.Interrupts(RERUN)
if workflow.is_main_process:
    INTERRUPTS.install()
    runhooks.print_job_command_once()
    runhooks.whole_lines()


def claim_results_dir():
    """onstart: hold the results directory for this run (assocmem.runlock), or stop with one line saying why not."""
    try:
        runlock.claim(R, workflow.basedir)
    except AssocmemError as err:
        raise WorkflowError(f"assocmem: {err}") from None


EXPS = config["experiments"]
THREADS = config["threads_per_job"]
PRETRAINED = layout.PRETRAINED_SUBSET


def _shell_path(path):
    """A path for the shell prefix: shell-quoted, its braces escaped from Snakemake's formatting."""
    return shlex.quote(str(path)).replace("{", "{{").replace("}", "}}")


# Paths reach the shell quoted (shlex.quote here, `:q` in the rules): a results_dir or checkout path with spaces,
# quotes, `;` or `$( )` is a path, never a command.
_SRC = _shell_path(Path(workflow.basedir) / "src")
_INDUCTOR_CACHE = _shell_path(Path(R).resolve() / ".cache" / "torchinductor")
_CHOICE_CACHE = _shell_path(Path(R).resolve() / ".cache")
# fingerprinted now, when the run starts and reads them: the report names the text the run used, not the file as
# it is when the report job runs
_CONFIG_FILES = _shell_path(
    json.dumps(
        [
            {"path": str(path), "sha256": sha256_file(path)}
            for path in workflow.config_settings.configfiles
            or [Path(workflow.basedir) / "config" / "config.yaml"]
        ]
    )
)
# The package is run from this checkout, so rules work in any environment that has the dependencies
# (the installed one, or workflow/envs/assocmem.yaml under --use-conda).
shell.prefix(
    f'export PYTHONPATH={_SRC}"${{{{PYTHONPATH:+:$PYTHONPATH}}}}"; '
    # fd 3 keeps the terminal (snakemake's stderr) after a rule sends stdout and stderr to its log file, so
    # every stage prints one line with its key number there when it finishes
    "exec 3>&2; export ASSOCMEM_STATUS_FD=3; "
    # glibc malloc keeps freed tensor memory instead of unmapping and re-faulting it every training step
    # (benchmarks/README.md); glibc reads this at process start, so it is set here. A user's value wins.
    f"export GLIBC_TUNABLES=${{{{GLIBC_TUNABLES:-glibc.malloc.mmap_threshold=33554432:"
    f"glibc.malloc.trim_threshold=1073741824:glibc.malloc.mmap_max=0}}}}; "
    # the report's run header names the run's config files; a variable, not a param, so that the same config read
    # from another path (a moved checkout) reruns nothing
    f"export ASSOCMEM_CONFIG_FILES={_CONFIG_FILES}; "
    # every "delete X and rerun ..." hint a job prints names the command the user typed (assocmem.rerun)
    f"export {rerun.ENVIRONMENT}={_shell_path(RERUN)}; "
    # torch.compile (train.compile) caches its kernels under the results directory
    f'if [ -z "${{{{TORCHINDUCTOR_CACHE_DIR:-}}}}" ]; then export TORCHINDUCTOR_CACHE_DIR={_INDUCTOR_CACHE}; fi; '
    # train.gemm and neighbours.cpu_engine `auto` keep their timed choices there too (assocmem.autotune), so every
    # job of the run, and every later run on this results directory, uses the library the first timing chose
    f'if [ -z "${{{{ASSOCMEM_CACHE_DIR:-}}}}" ]; then export ASSOCMEM_CACHE_DIR={_CHOICE_CACHE}; fi; '
)


@functools.cache
def stage_code(rule):
    """params: digest of the code behind a rule's stage (assocmem.codehash), so a code change reruns the job
    (computed once per rule: a run's code does not change while Snakemake plans it)."""
    return code_digest(rule, root=Path(workflow.basedir) / "src" / "assocmem")


def P(name):
    """The layout template of an artifact, wildcards left in."""
    return layout.pattern(R, name)


def at(name, **fields):
    """The concrete path of an artifact."""
    return str(layout.path(R, name, **fields))


def parent_dir(name):
    """params: the directory of the named input or output (stages take directories)."""
    return lambda w, input=None, output=None: Path(
        (output if name.startswith("out.") else input)[name.split(".", 1)[1]]
    ).parent


def log_path(name):
    return layout.pattern(R, "log").format(name=name)


def bench_path(name):
    return layout.pattern(R, "benchmark").format(name=name)


def as_json(obj):
    return json.dumps(obj, sort_keys=True)


def kind(exp):
    """The experiment's dataset kind (assocmem.dataset_kinds): its data stages and resources."""
    return kind_of(EXPS[exp]["dataset"])


def subsets_of(exp):
    return {layout.subset_name(f): f for f in EXPS[exp]["subsets"]["fractions"]}


def is_sweep(exp):
    return EXPS[exp].get("sweep") is not None


def run_labels(exp):
    """Trained run names of an experiment: each model, and for a sweep each replicate seed k >= 1 as <model>.s<k>."""
    seeds = EXPS[exp]["sweep"]["seeds"] if is_sweep(exp) else 1
    return [
        layout.replicate_label(m, k) for m in EXPS[exp]["models"] for k in range(seeds)
    ]


def runs():
    """Every (experiment, model, subset) the config asks for; pretrained models have subset 'pretrained'."""
    trained = [(e, m, s) for e in EXPS for m in run_labels(e) for s in subsets_of(e)]
    return trained + [(e, m, PRETRAINED) for e in EXPS for m in EXPS[e]["pretrained"]]


# threads, priorities and GPUs of the jobs: how Snakemake places them (no job output depends on it)
include: "common_scheduling.smk"
# each rule's params: exactly the keys that change an output
include: "common_params.smk"
# each rule's inputs, and an experiment's and a run's files
include: "common_inputs.smk"
# the default target, the report's benchmark names, the checks of command-line and report targets
include: "common_targets.smk"
# stacked replicas (train.stack_replicas): which runs train as one stacked job, its outputs and group file
include: "common_stacking.smk"
# provenance stamps: what each job expects of its inputs' stamps (assocmem.stamps)
include: "common_provenance.smk"
