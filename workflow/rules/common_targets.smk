# The default target, the benchmark names the report reads, and the checks of command-line targets and of
# `snakemake --report` (included by common.smk; called from the Snakefile).


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


def report_params(w=None):
    """The report's settings: its own keys, the whole config (its header and the claims read it) and the timings it
    shows (its stamp records them; assocmem.stamps)."""
    return as_json(
        {
            "report": config["report"],
            "config": config,
            "benchmarks": report_benchmarks(),
        }
    )


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
