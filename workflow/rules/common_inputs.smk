# Each rule's inputs, and the files of an experiment and of a run (included by common.smk).


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
