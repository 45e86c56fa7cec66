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
    "report": report_params,
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


@functools.cache
def foreign_results():
    """Stamp -> whether the job's stamp says it was made with other settings or code than this config and checkout
    imply (assocmem.runhooks.foreign_jobs), for every stamped job of the config; found once per process, when the
    DAG is built. The main process writes the jobs' markers (runhooks.mark_foreign), which they read as one more
    input, and names the foreign jobs; `--report` refuses such results instead (check_report_config).
    """
    expectations = upstream_expectations(all_targets(None))
    foreign = runhooks.foreign_jobs(expectations)
    if workflow.is_main_process and not runhooks.is_report_command(sys.argv):
        runhooks.mark_foreign(R, expectations, foreign)
        if foreign:
            print(runhooks.foreign_message(foreign), file=sys.stderr)
    return {stamp: stamp in foreign for stamp in expectations}


def _foreign_markers(stamps):
    stamps = [str(s) for s in stamps]
    known = foreign_results()  # the markers of the config's jobs are written
    # a job no default target reaches (one only a named target needs) is not foreign: its marker dates from 1970
    runhooks.mark_foreign(R, [s for s in stamps if s not in known], {})
    return [runhooks.foreign_marker(R, s) for s in stamps]


def foreign_input(rule, **fixed):
    """input: the marker of the rule's job (dated now when its results are foreign: foreign_results); ``fixed``:
    fields of its stamp's path that are no wildcards of the rule."""
    return lambda w: _foreign_markers(
        [layout.path(R, layout.STAMPS[rule], **fixed, **dict(w.items()))]
    )


def foreign_stacked_input(w):
    """input of a stacked training job: the marker of each of its replicas."""
    return _foreign_markers(
        layout.path(
            R,
            "run_stamp",
            exp=w.exp,
            model=layout.replicate_label(w.model, k),
            subset=w.subset,
        )
        for k in range(stacking.replicas(EXPS[w.exp]))
    )
