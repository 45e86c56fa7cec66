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


# ------------------------------------------------------------------ params: exactly the keys that change an output


def generate_params(w):
    from assocmem.io import sha256_file
    from assocmem.qf.weights import fitted_path

    dataset = EXPS[w.exp]["dataset"]
    spec = {
        "name": dataset["name"],
        "source": dataset["source"],
        "sizes": dataset["sizes"],
    }
    if (
        dataset["source"] == "download"
    ):  # where to download from matters only when downloading
        spec["download"] = dataset["download"]
    else:  # which weights, and for the fitted ones which fit, matter only when generating
        spec["grammar_weights"] = dataset["grammar_weights"]
        if (
            dataset["grammar_weights"] == "fitted"
        ):  # a refit of the shipped grammar changes the data
            spec["fitted_grammar_sha256"] = sha256_file(fitted_path())
    return as_json({"dataset": spec, "seed": config["seed"]})


def audit_params(w):
    from assocmem.io import sha256_file
    from assocmem.qf.weights import fitted_path

    dataset = EXPS[w.exp]["dataset"]
    # The fitted grammar supplies the floors (fitted weights, or any downloaded data) and the shipped fidelity
    # numbers, so its hash is a param; the reference file itself is an input (audit_inputs).
    return as_json(
        {
            "sizes": dataset["sizes"],
            "source": dataset["source"],
            "grammar_weights": dataset["grammar_weights"],
            "fitted_grammar_sha256": sha256_file(fitted_path()),
            "reference_dev": dataset["reference_dev"],
            "variant": dataset["variant"],
        }
    )


def fresh_params(w):
    dataset = EXPS[w.exp]["dataset"]
    spec = {key: dataset[key] for key in ("sizes", "grammar_weights")}
    spec["fresh_sequences"] = fresh_sequences(dataset)
    if dataset["grammar_weights"] == "fitted":
        from assocmem.io import sha256_file
        from assocmem.qf.weights import fitted_path

        spec["fitted_grammar_sha256"] = sha256_file(fitted_path())
    return as_json({"dataset": spec, "seed": config["seed"]})


def facts_params(w):
    """The facts' settings, with their seed resolved (null: the global seed, so changing it reruns the facts)."""
    facts = dict(EXPS[w.exp]["dataset"]["facts"])
    facts["seed"] = config["seed"] if facts["seed"] is None else facts["seed"]
    return as_json({"facts": facts})


def evaluation_files(exp):
    """Evaluation set name -> the file it reads (config.evaluation_sets: a layout artifact or a config path)."""
    files = {}
    for name, source in evaluation_sets(EXPS[exp]).items():
        artifact, _, split = source.partition(":")
        if artifact in ("fresh_file", "raw_file"):
            files[name] = at(artifact, exp=exp, split=split)
        else:
            files[name] = source
    return files


def evaluation_inputs(w):
    return evaluation_files(w.exp)


def train_job(w):
    """The name of the training job of these wildcards, as model files record it (assocmem.provenance)."""
    return layout.train_job(w.exp, w.model, w.subset)


def model_expectation(w):
    """What a model file must have been written by: the training job of these wildcards, for the configured model."""
    return {
        "job": train_job(w),
        "spec": run_settings(EXPS[w.exp], w.model)[0],
    }


def evaluation_params(w):
    return as_json(
        {
            "files": evaluation_files(w.exp),
            "seed": config["seed"],
            "expect": model_expectation(w),
            "device": EXPS[w.exp]["activations"]["device"],
        }
    )


def tokenize_params(w):
    dataset = EXPS[w.exp]["dataset"]
    return as_json(
        {"dataset": kind(w.exp).store_params(dataset), "seed": config["seed"]}
    )


def subset_params(w):
    return as_json(
        {"fraction": subsets_of(w.exp)[w.subset], "by": EXPS[w.exp]["subsets"]["by"]}
    )


def train_params(w):
    exp = EXPS[w.exp]
    spec, train = run_settings(exp, w.model)
    return as_json(
        {
            "model": spec,
            "train": train,
            "seed": layout.replicate_seed(
                config["seed"], layout.parse_replicate(w.model)[1]
            ),
            "job": train_job(w),
        }
    )


def activation_params(w):
    return as_json(
        {
            "activations": EXPS[w.exp]["activations"],
            "seed": config["seed"],
            "label": f"{w.model}/{w.subset}",
            "expect": model_expectation(w),
        }
    )


def pretrained_params(w):
    exp = EXPS[w.exp]
    return as_json(
        {
            "pretrained": exp["pretrained"][w.model],
            "activations": exp["activations"],
            "seed": layout.replicate_seed(
                config["seed"], exp["pretrained"][w.model].get("replicate", 0)
            ),
        }
    )


def neighbour_params(w):
    return as_json({"neighbours": EXPS[w.exp]["neighbours"], "seed": config["seed"]})


# ------------------------------------------------------------------ inputs


def tokenize_inputs(w):
    """The raw split files of a kind with a data stage (QF, facts); a local text corpus: its files (so editing one
    reruns tokenization)."""
    data = kind(w.exp)
    if data.raw_splits:
        return {"raw": [at(data.raw_file, exp=w.exp, split=s) for s in data.raw_splits]}
    dataset = EXPS[w.exp]["dataset"]
    if dataset["source"] == "hf":
        return {}
    from assocmem.corpus.load import resolve_paths

    return {"corpus": [str(p) for p in resolve_paths(dataset["paths"])]}


def audit_inputs(w):
    """McCoy's real dev file, when configured, so that editing it reruns the comparison."""
    reference = EXPS[w.exp]["dataset"]["reference_dev"]
    return {"reference": reference} if reference else {}


def activation_model(w):
    """The weights whose states are dumped: best.pt (lowest validation CE) or model.pt (final), by
    activations.checkpoint."""
    name = (
        "best_model" if EXPS[w.exp]["activations"]["checkpoint"] == "best" else "model"
    )
    return at(name, exp=w.exp, model=w.model, subset=w.subset)


def raw_dir_arg(w, input):
    """The tokenize stage's optional `--raw-dir <dir>` argument, shell-quoted (the rule inserts it as it is)."""
    if "raw" not in input.keys():
        return ""
    return f"--raw-dir {shlex.quote(str(Path(input.raw[0]).parent))}"


def data_files(exp):
    """Every data artifact of an experiment."""
    files = [
        at(name, exp=exp) for name in ("tokens_meta", "tokens_source", "tokens_stamp")
    ]
    files += [
        at(name, exp=exp, subset=s)
        for s in subsets_of(exp)
        for name in ("subset_meta", "subset_stamp")
    ]
    data = kind(exp)
    files += [at(data.raw_file, exp=exp, split=s) for s in data.raw_splits]
    if data.raw_splits:
        files += [at(name, exp=exp) for name in (data.raw_record, data.raw_stamp)]
    if kind(exp).audited:
        files += [at(name, exp=exp) for name in ("floor", "compare", "audit_stamp")]
    if "fresh" in evaluation_sets(EXPS[exp]):
        files += [
            at(name, exp=exp)
            for name in ("fresh_file", "fresh_manifest", "fresh_stamp")
        ]
    return files


def run_files(exp, model, subset):
    names = (
        []
        if is_sweep(exp)
        else list(layout.ACTIVATION_ARTIFACTS + layout.NEIGHBOUR_ARTIFACTS)
    )
    if subset != PRETRAINED:
        names += layout.RUN_ARTIFACTS
    return [at(name, exp=exp, model=model, subset=subset) for name in names]


def grid_analysis(exp):
    """Which analysis an experiment's grid gets, `sweep` (a scaling sweep) or `memorisation` (a sweep of facts),
    from its dataset kind (assocmem.dataset_kinds); None without a grid."""
    return kind(exp).grid_analysis if is_sweep(exp) else None


def grid_runs(exp):
    """The train artifacts of every run of a grid (each model x seed x subset)."""
    names = ("metrics", "summary", "eval_rows")
    return [
        at(name, exp=exp, model=model, subset=subset)
        for model in run_labels(exp)
        for subset in subsets_of(exp)
        for name in names
    ]


def sweep_inputs(w):
    return grid_runs(w.exp)


def memorisation_inputs(w):
    """The grid's runs, the first seed's models (their stored patterns' NN distances against r*,
    assocmem.memorisation) and the facts' information content."""
    models = [
        at("model", exp=w.exp, model=model, subset=subset)
        for model in EXPS[w.exp]["models"]
        for subset in subsets_of(w.exp)
    ]
    return grid_runs(w.exp) + models + [at("facts_information", exp=w.exp)]


def grid_params(w):
    return as_json({"experiment": w.exp, "config": EXPS[w.exp], "seed": config["seed"]})


def grid_outputs(exp):
    analysis = grid_analysis(exp)
    names = (f"{analysis}_analysis", f"{analysis}_stamp")
    return [at(name, exp=exp) for name in names] if analysis else []


def evaluation_outputs(exp):
    return [
        at(name, exp=exp, model=model, subset=layout.subset_name(fraction))
        for model, fraction in evaluated_runs(EXPS[exp])
        for name in ("evaluation", "eval_stamp")
    ]


def report_inputs(w):
    """Every output of every other job: the report reruns when any changes, and deleting any reruns its job."""
    files = [
        f
        for exp in EXPS
        for f in data_files(exp) + evaluation_outputs(exp) + grid_outputs(exp)
    ]
    return files + [f for run in runs() for f in run_files(*run)]


def data_benchmarks(exp):
    """Benchmark names of an experiment's jobs behind data_files, evaluation_outputs and grid_outputs, as each
    rule's `benchmark:` line names them."""
    jobs = {
        **({kind(exp).raw_stage: True} if kind(exp).raw_stage else {}),
        "data_audit": kind(exp).audited,
        "generate_fresh": "fresh" in evaluation_sets(EXPS[exp]),
        "tokenize": True,
        "sweep": grid_analysis(exp) == "sweep",
        "memorisation": grid_analysis(exp) == "memorisation",
    }
    names = [rule for rule, wanted in jobs.items() if wanted]
    names += [f"subsets_{subset}" for subset in subsets_of(exp)]
    names += [
        f"evaluate_{model}_{layout.subset_name(fraction)}"
        for model, fraction in evaluated_runs(EXPS[exp])
    ]
    return [f"{exp}/{name}" for name in names]


def run_benchmarks(exp, model, subset):
    """Benchmark names of one run's jobs (those behind run_files)."""
    trained = subset != PRETRAINED
    names = [train_benchmark(exp, model, subset)] if trained else []
    if not is_sweep(exp):
        dump = (
            f"activations_{model}_{subset}"
            if trained
            else f"pretrained_activations_{model}"
        )
        names += [dump, f"neighbours_{model}_{subset}"]
    return [f"{exp}/{name}" for name in names]


def report_benchmarks():
    """The benchmark names of every job of the current config but the report, whose own timing is not known while
    it runs: the report reads only these, never a dropped job's timing."""
    names = [name for exp in EXPS for name in data_benchmarks(exp)]
    names += [name for run in runs() for name in run_benchmarks(*run)]
    return list(dict.fromkeys(names))  # a stacked job's one name, once


REPORT_FILES = [
    at(name)
    for name in ("report_html", "report_md", "report_checks", "report_verdicts")
]


def all_targets(w):
    """The default target: the report and every artifact behind it. Snakemake does not remake a deleted
    intermediate file whose consumers are up to date, so each artifact is a target of its own: deleting one
    reruns its job, and the newer file then reruns its dependants."""
    return REPORT_FILES + report_inputs(w)


def check_command_line_targets():
    """A target naming an experiment, model or subset this config lacks stops the run here with one line listing the
    valid names (assocmem.targets), instead of a KeyError from an input function."""
    named = targets.snakemake_cli_targets(sys.argv)
    experiments = {
        exp: targets.Experiment(
            models=tuple(run_labels(exp)),
            subsets=tuple(subsets_of(exp)),
            pretrained=tuple(EXPS[exp]["pretrained"]),
        )
        for exp in EXPS
    }
    problems = targets.check_targets(
        named,
        results_dir=R,
        outputs=all_targets(None) + [at("report_figures")],
        experiments=experiments,
        rules=[rule.name for rule in workflow.rules],
    )
    if problems:
        files = (
            ", ".join(map(str, workflow.config_settings.configfiles))
            or "config/config.yaml"
        )
        print(
            "\n".join(f"assocmem: {p} (config: {files})" for p in problems),
            file=sys.stderr,
        )
        sys.exit(1)


def check_report_config():
    """`snakemake --report`: refuse to pack results made with other settings or code than this config and checkout
    (an earlier run's, with other `--set`s), which Snakemake would pack without a word.
    """
    if not workflow.is_main_process or not runhooks.is_report_command(sys.argv):
        return
    expectations = upstream_expectations(
        report_inputs(None), skip=("model", "best_model")
    )
    refusal = runhooks.refuse_foreign_report(runhooks.report_mismatches(expectations))
    if refusal:
        print(refusal, file=sys.stderr)
        sys.exit(1)


# stacked replicas (train.stack_replicas): which runs train as one stacked job, its outputs and group file
include: "common_stacking.smk"
# provenance stamps: what each job expects of its inputs' stamps (assocmem.stamps)
include: "common_provenance.smk"
