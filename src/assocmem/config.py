"""Load and validate the workflow configuration against its JSON schema (``workflow/schemas/config.schema.yaml``,
a link to the package's ``assocmem/schemas/config.schema.yaml``; passed in by the workflow, or by the command line:
``assocmem.schemas.config_schema_path()`` unless ``validate-config --schema`` names another).

Validation fills in the schema's defaults and reports *every* problem at once, each one naming the key
path (``experiments.qf.subsets.fractions[0]``), before any job runs.
"""

from __future__ import annotations

import copy
import glob
import math
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from assocmem.dataset_kinds import KINDS, kind_of
from assocmem.errors import AssocmemError

LOCAL_SOURCES = ("text", "jsonl", "parquet")  # dataset.source values read from dataset.paths


class ConfigError(AssocmemError):
    """The configuration does not match the schema."""


def load_schema(path: Path) -> dict[str, Any]:
    path = Path(path)
    if not path.exists():
        raise AssocmemError(f"config schema not found: {path}")
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _with_defaults(validator_class: type) -> type:
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema) -> Iterator[Any]:
        if isinstance(instance, dict):
            for name, subschema in properties.items():
                if "default" in subschema and name not in instance:
                    instance[name] = copy.deepcopy(subschema["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


_DefaultFillingValidator = _with_defaults(jsonschema.Draft202012Validator)


def _key_path(error: jsonschema.ValidationError) -> str:
    path = ""
    for part in error.absolute_path:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "<top level>"


def _describe(error: jsonschema.ValidationError) -> str:
    if error.validator == "additionalProperties":
        return f"{_key_path(error)}: unknown key ({error.message})"
    if error.validator == "required":
        return f"{_key_path(error)}: missing required key ({error.message})"
    if error.validator == "enum" and error.instance == "gpu" and "cuda" in error.validator_value:
        return f"{_key_path(error)}: 'gpu' is no longer a device name; write cuda"
    return f"{_key_path(error)}: {error.message}"


def validate_config(config: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """Return a validated deep copy of ``config`` with defaults filled in; raise ConfigError otherwise."""
    if not isinstance(config, dict):
        raise ConfigError(f"config must be a mapping, got {type(config).__name__}")
    filled = copy.deepcopy(config)
    validator = _DefaultFillingValidator(schema)
    errors = sorted(validator.iter_errors(filled), key=lambda e: list(map(str, e.absolute_path)))
    problems = [*_non_finite(filled), *(_describe(e) for e in errors)]
    if problems:
        lines = "\n  - ".join(problems)
        raise ConfigError(f"invalid config ({len(problems)} problem(s)):\n  - {lines}")
    _check_semantics(filled)
    return filled


def _non_finite(value: Any, path: str = "") -> Iterator[str]:
    """Every NaN or infinity (YAML's ``.nan``, ``.inf``): JSON schema's bounds let them through (NaN compares false
    with every bound), and a stage then fails late without naming the key."""
    if isinstance(value, float) and not math.isfinite(value):
        yield f"{path or '<top level>'}: {value} is not a finite number"
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _non_finite(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _non_finite(item, f"{path}[{i}]")


def _check_semantics(config: dict[str, Any]) -> None:
    """Cross-key rules the JSON schema cannot express: everything decidable from the config alone fails here,
    before the first job, instead of late in a stage or the report."""
    problems = []
    for exp_name, exp in config["experiments"].items():
        prefix = f"experiments.{exp_name}"
        problems += _dataset_problems(prefix, exp)
        problems += _model_problems(prefix, exp)
        problems += _size_problems(prefix, exp)
        problems += _memorisation_problems(prefix, exp)
    if problems:
        raise ConfigError("invalid config:\n  - " + "\n  - ".join(problems))


def _dataset_problems(prefix: str, exp: dict[str, Any]) -> list[str]:
    dataset, problems = exp["dataset"], []
    kind = kind_of(dataset)
    if dataset["source"] not in kind.sources:
        problems.append(f"{prefix}.dataset.source: {kind.name} takes {' or '.join(map(repr, kind.sources))}, "
                        f"not {dataset['source']!r}")
    problems += [f"{prefix}.dataset.{problem}" for problem in kind.problems(dataset)]
    if dataset["source"] == "hf" and not dataset.get("hf_name"):
        problems.append(f"{prefix}.dataset.hf_name: required when source is 'hf'")
    reference = dataset.get("reference_dev")
    if reference and not Path(reference).is_file():
        problems.append(f"{prefix}.dataset.reference_dev: file {reference} does not exist (relative paths are "
                        "relative to the working directory); give McCoy's question.dev or remove the key")
    if dataset["source"] in LOCAL_SOURCES:
        if not dataset["paths"]:
            problems.append(f"{prefix}.dataset.paths: a local corpus needs at least one path or glob")
        for i, pattern in enumerate(dataset["paths"]):
            if not glob.glob(pattern):
                problems.append(f"{prefix}.dataset.paths[{i}]: {pattern!r} matches no file")
    return problems


def _memorisation_problems(prefix: str, exp: dict[str, Any]) -> list[str]:
    """Recall is measured on facts only; a sweep of facts is the memorisation grid, whose "stored" needs it."""
    is_facts = kind_of(exp["dataset"]).name == "facts"
    if exp["train"].get("stop_at_recall") is not None and not is_facts:
        return [f"{prefix}.train.stop_at_recall: recall is measured on facts (dataset.name: facts) only"]
    sweep, stop = exp.get("sweep"), exp["train"].get("stop_at_recall")
    if is_facts and sweep is not None and stop is None:
        return [f"{prefix}.train.stop_at_recall: a sweep of facts is a memorisation grid and needs the recall that "
                "counts a fact set as stored (e.g. 0.95)"]
    threshold = (sweep or {}).get("recall_threshold")
    if threshold is not None and (not is_facts or threshold > stop):
        return [f"{prefix}.sweep.recall_threshold: {threshold} must be a facts grid's and at most "
                f"train.stop_at_recall ({stop}): training stops there, so a higher share is never measured"]
    if (sweep or {}).get("interval_threshold") is not None and not is_facts:
        return [f"{prefix}.sweep.interval_threshold: the two-budget interval is a memorisation grid's (a sweep of "
                "facts); a scaling sweep's intervals are its bootstrap's"]
    return []


def _model_problems(prefix: str, exp: dict[str, Any]) -> list[str]:
    problems, kind = [], kind_of(exp["dataset"])
    if not exp["models"] and not exp["pretrained"]:
        problems.append(f"{prefix}.models: no model to train (and no pretrained one): the experiment would run no "
                        "job the report checks; give at least one model")
    for name, spec in exp["pretrained"].items():
        if (spec["name"] is None) == (spec["config"] is None):
            problems.append(f"{prefix}.pretrained.{name}: give exactly one of 'name' or 'config'")
        if not kind.takes_pretrained:
            takers = [k.name for k in KINDS.values() if k.takes_pretrained]
            problems.append(f"{prefix}.pretrained.{name}: pretrained models need a {' or '.join(takers)} dataset")
    for name, model in exp["models"].items():
        if model["d_model"] % model["n_head"]:
            problems.append(f"{prefix}.models.{name}.n_head: must divide d_model "
                            f"({model['d_model']} % {model['n_head']} != 0)")
        if kind.windowed:
            context = max(model["max_len"], exp["train"]["block_size"])
            if exp["activations"]["chunk_len"] > context:
                problems.append(f"{prefix}.activations.chunk_len: {exp['activations']['chunk_len']} exceeds the "
                                f"context of model {name} ({context} = max(max_len, train.block_size))")
    micro = exp["train"]["micro_batch_size"]
    batches = {"train.batch_size": exp["train"]["batch_size"]}
    batches.update({f"models.{name}.train.batch_size": spec["train"]["batch_size"]
                    for name, spec in exp["models"].items() if "batch_size" in spec.get("train", {})})
    problems += [f"{prefix}.train.micro_batch_size: must divide {key} ({batch} % {micro} != 0)"
                 for key, batch in batches.items() if micro is not None and batch % micro]
    return problems


def _size_problems(prefix: str, exp: dict[str, Any]) -> list[str]:
    """Subsets that hold no training example, and neighbour searches with fewer candidates than k."""
    problems = []
    n_chunks, neighbours = exp["activations"]["n_chunks"], exp["neighbours"]
    if neighbours["k"] >= n_chunks:
        problems.append(f"{prefix}.neighbours.k: must be smaller than activations.n_chunks")
    for i, fraction in enumerate(neighbours["fractions"]):
        if round(fraction * n_chunks) <= neighbours["k"]:
            problems.append(f"{prefix}.neighbours.fractions[{i}]: {fraction} of {n_chunks} chunks keeps "
                            f"{round(fraction * n_chunks)} rows, too few for k = {neighbours['k']} neighbours")
    if kind_of(exp["dataset"]).sized:
        problems += _fresh_problems(prefix, exp["dataset"])
        n_train = exp["dataset"]["sizes"]["train"]
        for i, fraction in enumerate(exp["subsets"]["fractions"]):
            if math.floor(Fraction(repr(float(fraction))) * n_train) < 1:
                problems.append(f"{prefix}.subsets.fractions[{i}]: {fraction} of the {n_train} training "
                                "sequences (dataset.sizes.train) holds no sequence")
    return problems


FRESH_DEFAULT = 100_000


def fresh_sequences(dataset: dict[str, Any]) -> int:
    """The fresh sample's size: dataset.fresh_sequences, or min(100,000, the iid pool) when null."""
    pool = sum(dataset["sizes"][split] for split in ("train", "dev", "test"))
    value = dataset.get("fresh_sequences")
    return min(FRESH_DEFAULT, pool) if value is None else int(value)


def _fresh_problems(prefix: str, dataset: dict[str, Any]) -> list[str]:
    pool = sum(dataset["sizes"][split] for split in ("train", "dev", "test"))
    if dataset.get("fresh_sequences") is not None and dataset["fresh_sequences"] > pool:
        return [f"{prefix}.dataset.fresh_sequences: {dataset['fresh_sequences']} exceeds the iid pool of {pool} "
                "sequences (sizes.train + dev + test), whose distribution the fresh sample must share"]
    return []


class _StrictLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (plain YAML keeps the last value silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first at line {seen[key] + 1})", key_node.start_mark)
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


def read_config_file(path: str | Path) -> dict[str, Any]:
    """A config file's mapping, or a ConfigError naming the file (and line) for anything that is not one.

    Refused: a missing file or a directory, invalid YAML, a key given twice, a top level other than a mapping,
    and ``__use_yte__`` (Snakemake would evaluate the file as a YTE template, i.e. run Python from the config)."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"config file not found: {path}")
    if not path.is_file():
        raise ConfigError(f"config file {path} is not a file (a directory?)")
    try:
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=_StrictLoader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}, line {mark.line + 1}, column {mark.column + 1}" if mark else str(path)
        raise ConfigError(f"config file {where}: not valid YAML ({getattr(err, 'problem', None) or err})") from err
    except UnicodeDecodeError as err:
        raise ConfigError(f"config file {path} is not UTF-8 text: {err}") from err
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {path}: the top level must be a mapping of keys, not a {type(raw).__name__}")
    if "__use_yte__" in raw:
        raise ConfigError(f"config file {path}: __use_yte__ makes Snakemake evaluate the file as a YTE template "
                          "(Python code in a config); refused: write the values out")
    return raw


def load_config(path: str | Path, schema: dict[str, Any]) -> dict[str, Any]:
    return validate_config(read_config_file(path), schema)


def run_settings(exp: dict[str, Any], model: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(model spec, train settings) of one model of a validated experiment: the experiment's ``train`` keys
    with the model's own ``train`` overrides (e.g. a per-size learning rate) applied. ``model`` may be a sweep
    replicate label (``<model>.s<k>``)."""
    from assocmem.layout import parse_replicate

    spec = dict(exp["models"][parse_replicate(model)[0]])
    overrides = spec.pop("train", None) or {}
    return spec, {**exp["train"], **overrides}


def evaluation_sets(exp: dict[str, Any]) -> dict[str, str]:
    """The evaluate stage's sets of a validated experiment, by name -> layout artifact or config path: a fresh
    sample of a generated audited dataset, McCoy's real test split when the data is downloaded, and the configured
    real file (dataset.reference_dev). Empty for other kinds and for sweeps."""
    dataset = exp["dataset"]
    if not kind_of(dataset).audited or exp.get("sweep") is not None:
        return {}
    sets = {}
    if dataset["source"] == "generate" and fresh_sequences(dataset) > 0:
        sets["fresh"] = "fresh_file"
    if dataset["source"] == "download":
        sets["test"] = "raw_file:test"
    if dataset.get("reference_dev"):
        sets["reference"] = dataset["reference_dev"]
    return sets


def evaluated_runs(exp: dict[str, Any]) -> list[tuple[str, float]]:
    """(model, fraction) of every run the evaluate stage evaluates: each model on the largest subset, where the
    experiment has evaluation sets."""
    if not evaluation_sets(exp):
        return []
    return [(model, max(exp["subsets"]["fractions"])) for model in exp["models"]]
