# Config validation and every input, param and path function the rules use; the rule files stay declarative.
import json

from assocmem import layout
from assocmem.config import ConfigError, load_schema, validate_config
from assocmem.qf.generate import SPLITS as QF_SPLITS
from snakemake.exceptions import WorkflowError

try:
    _validated = validate_config(
        config, load_schema(Path(workflow.basedir) / "workflow" / "schemas" / "config.schema.yaml")
    )
except ConfigError as err:
    raise WorkflowError(str(err)) from None
config.clear()
config.update(_validated)

R = config["results_dir"]
EXPS = config["experiments"]
THREADS = config["threads_per_job"]
PRETRAINED = layout.PRETRAINED_SUBSET
# The package is run from this checkout, so rules work in any environment that has the dependencies
# (the installed one, or workflow/envs/assocmem.yaml under --use-conda).
shell.prefix(f"export PYTHONPATH={Path(workflow.basedir) / 'src'}${{{{PYTHONPATH:+:$PYTHONPATH}}}}; ")


wildcard_constraints:
    exp="[A-Za-z0-9_]+",
    model="[A-Za-z0-9_]+",
    subset=r"pct[0-9.]+|pretrained",


def P(name):
    """The layout template of an artifact, wildcards left in."""
    return layout.pattern(R, name)


def at(name, **fields):
    """The concrete path of an artifact."""
    return str(layout.path(R, name, **fields))


def parent_dir(name):
    """params: the directory of the named input or output (stages take directories)."""
    return lambda w, input=None, output=None: Path((output if name.startswith("out.") else input)[
        name.split(".", 1)[1]]).parent


def log_path(name):
    return layout.pattern(R, "log").format(name=name)


def bench_path(name):
    return layout.pattern(R, "benchmark").format(name=name)


def as_json(obj):
    return json.dumps(obj, sort_keys=True)


def is_qf(exp):
    return EXPS[exp]["dataset"]["name"] == "question_formation"


def subsets_of(exp):
    return {layout.subset_name(f): f for f in EXPS[exp]["subsets"]["fractions"]}


def runs():
    """Every (experiment, model, subset) the config asks for; pretrained models have subset 'pretrained'."""
    trained = [(e, m, s) for e in EXPS for m in EXPS[e]["models"] for s in subsets_of(e)]
    return trained + [(e, m, PRETRAINED) for e in EXPS for m in EXPS[e]["pretrained"]]


# ------------------------------------------------------------------ params: exactly the keys that change an output


def generate_params(w):
    dataset = EXPS[w.exp]["dataset"]
    spec = {"name": dataset["name"], "source": dataset["source"], "sizes": dataset["sizes"]}
    if dataset["source"] == "download":  # where to download from matters only when downloading
        spec["download"] = dataset["download"]
    return as_json({"dataset": spec, "seed": config["seed"]})


def audit_params(w):
    dataset = EXPS[w.exp]["dataset"]
    return as_json({"sizes": dataset["sizes"], "reference_dev": dataset["reference_dev"]})


def tokenize_params(w):
    dataset = EXPS[w.exp]["dataset"]
    if is_qf(w.exp):  # the raw files are inputs; nothing else changes the store
        return as_json({"dataset": {"name": dataset["name"]}, "seed": config["seed"]})
    ignored = ("num_proc", "sizes", "download", "reference_dev")  # num_proc: byte-identical output
    return as_json({"dataset": {k: v for k, v in dataset.items() if k not in ignored}, "seed": config["seed"]})


def subset_params(w):
    return as_json({"fraction": subsets_of(w.exp)[w.subset], "by": EXPS[w.exp]["subsets"]["by"]})


def train_params(w):
    exp = EXPS[w.exp]
    return as_json({"model": exp["models"][w.model], "train": exp["train"], "seed": config["seed"]})


def activation_params(w):
    return as_json({"activations": EXPS[w.exp]["activations"], "seed": config["seed"],
                    "label": f"{w.model}/{w.subset}"})


def pretrained_params(w):
    exp = EXPS[w.exp]
    return as_json({"pretrained": exp["pretrained"][w.model], "activations": exp["activations"],
                    "seed": config["seed"]})


def neighbour_params(w):
    return as_json({"neighbours": EXPS[w.exp]["neighbours"], "seed": config["seed"]})


# ------------------------------------------------------------------ inputs


def tokenize_inputs(w):
    """QF: the raw split files; a local text corpus: its files (so editing one reruns tokenization)."""
    if is_qf(w.exp):
        return {"raw": [at("raw_file", exp=w.exp, split=s) for s in QF_SPLITS]}
    dataset = EXPS[w.exp]["dataset"]
    if dataset["source"] == "hf":
        return {}
    from assocmem.corpus.load import resolve_paths

    return {"corpus": [str(p) for p in resolve_paths(dataset["paths"])]}


def raw_dir_arg(w, input):
    return f"--raw-dir {Path(input.raw[0]).parent}" if "raw" in input.keys() else ""


def train_launcher(w):
    """One torchrun over all of a job's GPUs (DDP) when train.gpus > 1, plain python otherwise."""
    gpus = EXPS[w.exp]["train"]["gpus"]
    if gpus > 1:
        return f"python -m torch.distributed.run --standalone --nproc_per_node={gpus}"
    return "python"


def data_files(exp):
    """Every data artifact of an experiment."""
    files = [at("tokens_meta", exp=exp), at("tokens_source", exp=exp)]
    files += [at("subset_meta", exp=exp, subset=s) for s in subsets_of(exp)]
    if is_qf(exp):
        files += [at("raw_file", exp=exp, split=s) for s in QF_SPLITS]
        files += [at(name, exp=exp) for name in ("raw_manifest", "floor", "compare")]
    return files


def run_files(exp, model, subset):
    names = list(layout.ACTIVATION_ARTIFACTS + layout.NEIGHBOUR_ARTIFACTS)
    if subset != PRETRAINED:
        names += layout.RUN_ARTIFACTS
    return [at(name, exp=exp, model=model, subset=subset) for name in names]


def report_inputs(w):
    """Every output of every other job: the report reruns when any changes, and deleting any reruns its job."""
    files = [f for exp in EXPS for f in data_files(exp)]
    return files + [f for run in runs() for f in run_files(*run)]


REPORT_FILES = [at(name) for name in ("report_html", "report_md", "report_checks")]
