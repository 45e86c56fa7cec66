# Each rule's params: exactly the config keys that change its outputs, as JSON (included by common.smk).


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
