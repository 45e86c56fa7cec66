# Included by common.smk, last: provenance stamps (assocmem.stamps).

PARAMS_OF = {
    "generate_data": generate_params,
    "data_audit": audit_params,
    "generate_fresh": fresh_params,
    "generate_facts": facts_params,
    "tokenize": tokenize_params,
    "subsets": subset_params,
    "train": train_params,
    "activations": activation_params,
    "pretrained_activations": pretrained_params,
    "neighbours": neighbour_params,
    "evaluate": evaluation_params,
    "sweep": grid_params,
    "memorisation": grid_params,
}


def upstream_expectations(input, skip=()):
    """What the stamp of each job this one reads must record, as this config and checkout imply: its job, the
    digests of its settings and code, and the files read from it (artifact names in ``skip`` are not read).
    """
    from types import SimpleNamespace

    from assocmem import stamps

    read = {}
    for path in input:
        if not str(path).startswith(
            f"{R}/"
        ):  # a file of the user's, not a job's output
            continue
        found = layout.match(path)
        job = None if found is None or found[0] in skip else layout.stamp_for(*found)
        if job is None:
            continue
        producer, stamp = job
        files = read.setdefault(str(stamp), (producer, found[1], []))[2]
        if found[0] not in layout.STAMPS.values():
            files.append(Path(path).name)
    return {
        stamp: stamps.expectation(
            stamp,
            producer,
            json.loads(PARAMS_OF[producer](SimpleNamespace(**fields))),
            stage_code(producer),
            files,
        )
        for stamp, (producer, fields, files) in read.items()
    }


def _provenance_args(input, output, skip=()):
    args = []
    if "stamp" in output.keys():
        args += ["--stamp", output.stamp, "--outputs", *output]
    upstream = upstream_expectations(input, skip)
    if upstream:
        args += ["--upstream", json.dumps(upstream, sort_keys=True)]
    return " ".join(shlex.quote(str(arg)) for arg in args)


def provenance_args(w, input, output):
    """params: the stage's --upstream (the stamps it reads, checked first) and --stamp/--outputs (its own)."""
    return _provenance_args(input, output)


def report_provenance_args(w, input, output):
    """The report checks every stamp, but not the model weights it never reads."""
    return _provenance_args(input, output, skip=("model", "best_model"))
