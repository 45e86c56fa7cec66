# Stacked replicas (train.stack_replicas, assocmem.stacking), included by common.smk: which runs train as one stacked
# job, and that job's outputs and group file. With no experiment stacking, nothing here changes the DAG.
from types import SimpleNamespace

from assocmem import stacking
from assocmem.errors import AssocmemError

try:
    STACKED = {exp: stacking.stacked_models(EXPS[exp], exp) for exp in EXPS}
except AssocmemError as err:
    raise WorkflowError(str(err)) from None
# The key decides how runs are scheduled, not what they compute (stacking changes only the order of float sums, as
# threads_per_job does): it leaves the config the jobs' params record, so setting it changes no job's params.
for _exp in EXPS.values():
    _exp["train"].pop("stack_replicas", None)


def stacked_experiments():
    return [exp for exp in EXPS if STACKED[exp]]


def is_stacked(exp, model):
    """Whether the run <model> (a replicate label) of exp is trained by its cell's stacked job."""
    return layout.parse_replicate(model)[0] in STACKED[exp]


def stacked_outputs(exp):
    """The run files of every replica of one (model, subset) cell of exp, replica by replica in RUN_ARTIFACTS order;
    model and subset left as wildcards (model: the cell's model, its replicas' labels derived from it).
    """
    return [
        P(name).replace("{model}", layout.replicate_label("{model}", k))
        for k in range(stacking.replicas(EXPS[exp]))
        for name in layout.RUN_ARTIFACTS
    ]


def stacked_model_constraint(exp):
    return "|".join(STACKED[exp])


def stacked_resource(key):
    """A train job's memory or runtime times the replicas: the stack holds them all, and at worst takes as long."""
    return lambda w: kind(w.exp).resources["train"][key] * stacking.replicas(
        EXPS[w.exp]
    )


def replica_params(w):
    """Each replica's train params (train_params of its run), in replica order."""
    runs = [
        SimpleNamespace(
            exp=w.exp, model=layout.replicate_label(w.model, k), subset=w.subset
        )
        for k in range(stacking.replicas(EXPS[w.exp]))
    ]
    return [json.loads(train_params(run)) for run in runs]


def stacked_specs(w):
    """params: every replica's settings. Snakemake records only params not derived from input or output (the
    group file is), so this one reruns the group when any replica's settings change."""
    return as_json(replica_params(w))


def stacked_group(w, input, output):
    """params: the group file of assocmem.train.stacked_cli, each replica as the train rule passes one run."""
    width = len(layout.RUN_ARTIFACTS)
    replicas = []
    for k, params in enumerate(replica_params(w)):
        files = dict(zip(layout.RUN_ARTIFACTS, output[k * width : (k + 1) * width]))
        replicas.append(
            {
                "params": params,
                "store_dir": str(Path(input.subset).parent),
                "run_dir": str(Path(files["model"]).parent),
                "stamp": str(files["run_stamp"]),
                "outputs": [str(f) for f in files.values()],
            }
        )
    return as_json({"upstream": upstream_expectations(input), "replicas": replicas})


def train_benchmark(exp, model, subset):
    """The benchmark name (below exp/) of the job that trains a run: its own, or its cell's stacked job's."""
    if is_stacked(exp, model):
        return f"train_stacked_{layout.parse_replicate(model)[0]}_{subset}"
    return f"train_{model}_{subset}"
