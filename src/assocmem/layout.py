"""Where every artifact lives under the results directory: the one copy of the layout.

Each entry is a template relative to ``results_dir`` whose ``{exp}``, ``{model}``, ``{subset}``, ``{split}``
fields are Snakemake wildcards in ``workflow/rules/common.smk`` and are filled in by :func:`path` for the report.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

TEMPLATES: dict[str, str] = {
    # Question-Formation data (generate_data, data_audit)
    "raw_file": "{exp}/data/raw/question.{split}",
    "raw_manifest": "{exp}/data/raw/manifest.json",
    "floor": "{exp}/data/floor.json",
    "compare": "{exp}/data/compare.json",
    "fresh_file": "{exp}/data/fresh/question.fresh",
    "fresh_manifest": "{exp}/data/fresh/manifest.json",
    # memorisation facts (generate_facts): one fact per line, and the exact information content beside them
    "facts_file": "{exp}/data/facts/{split}.tsv",
    "facts_information": "{exp}/data/facts/information.json",
    # token store (tokenize) and subset views (subsets); both data kinds
    "tokens_meta": "{exp}/data/tokens/meta.json",
    "tokens_source": "{exp}/data/tokens/source.json",
    "subset_meta": "{exp}/data/subsets/{subset}/meta.json",
    # one model on one subset (train, activations, neighbours); subset is "pretrained" for HF models
    "model": "{exp}/train/{model}/{subset}/model.pt",
    "best_model": "{exp}/train/{model}/{subset}/best.pt",
    "metrics": "{exp}/train/{model}/{subset}/metrics.csv",
    "summary": "{exp}/train/{model}/{subset}/summary.json",
    "eval_rows": "{exp}/train/{model}/{subset}/eval_rows.parquet",
    "acts_train": "{exp}/activations/{model}/{subset}/train.npy",
    "acts_heldout": "{exp}/activations/{model}/{subset}/heldout.npy",
    "acts_train_index": "{exp}/activations/{model}/{subset}/train.index.parquet",
    "acts_heldout_index": "{exp}/activations/{model}/{subset}/heldout.index.parquet",
    "acts_meta": "{exp}/activations/{model}/{subset}/meta.json",
    "acts_radius": "{exp}/activations/{model}/{subset}/radius.npy",
    "acts_radius_index": "{exp}/activations/{model}/{subset}/radius.index.parquet",
    "nn_self": "{exp}/neighbours/{model}/{subset}/self.parquet",
    "nn_heldout": "{exp}/neighbours/{model}/{subset}/heldout.parquet",
    "nn_summary": "{exp}/neighbours/{model}/{subset}/summary.csv",
    "nn_radius": "{exp}/neighbours/{model}/{subset}/radius.parquet",
    "nn_radius_meta": "{exp}/neighbours/{model}/{subset}/radius.json",
    "evaluation": "{exp}/eval/{model}/{subset}/eval.json",
    # a scaling sweep's analysis (sweep) and a memorisation grid's (memorisation): two analyses, two files
    "sweep_analysis": "{exp}/sweep/analysis.json",
    "memorisation_analysis": "{exp}/memorisation/analysis.json",
    # each job's provenance stamp (assocmem.stamps): what it wrote, from what, with which settings and code
    "raw_stamp": "{exp}/data/raw/provenance.json",
    "audit_stamp": "{exp}/data/audit.provenance.json",
    "fresh_stamp": "{exp}/data/fresh/provenance.json",
    "facts_stamp": "{exp}/data/facts/provenance.json",
    "tokens_stamp": "{exp}/data/tokens/provenance.json",
    "subset_stamp": "{exp}/data/subsets/{subset}/provenance.json",
    "run_stamp": "{exp}/train/{model}/{subset}/provenance.json",
    "acts_stamp": "{exp}/activations/{model}/{subset}/provenance.json",
    "nn_stamp": "{exp}/neighbours/{model}/{subset}/provenance.json",
    "eval_stamp": "{exp}/eval/{model}/{subset}/provenance.json",
    "sweep_stamp": "{exp}/sweep/provenance.json",
    "memorisation_stamp": "{exp}/memorisation/provenance.json",
    # report
    "report_html": "report/index.html",
    "report_md": "report/report.md",
    "report_checks": "report/checks.json",
    "report_verdicts": "report/verdicts.csv",
    "report_figures": "report/figures",
    "report_stamp": "report/provenance.json",
    # per-job logs and benchmark timings
    "log": "logs/{name}.log",
    "benchmark": "benchmarks/{name}.tsv",
}

# which rule writes each artifact (for error messages that say how to rebuild a damaged file)
PRODUCERS: dict[str, str] = {
    "raw_file": "generate_data", "raw_manifest": "generate_data", "floor": "data_audit", "compare": "data_audit",
    "fresh_file": "generate_fresh", "fresh_manifest": "generate_fresh", "evaluation": "evaluate",
    "sweep_analysis": "sweep", "memorisation_analysis": "memorisation",
    "facts_file": "generate_facts", "facts_information": "generate_facts",
    "tokens_meta": "tokenize", "tokens_source": "tokenize", "subset_meta": "subsets",
    "model": "train", "best_model": "train", "metrics": "train", "summary": "train", "eval_rows": "train",
    "acts_train": "activations", "acts_heldout": "activations", "acts_train_index": "activations",
    "acts_heldout_index": "activations", "acts_meta": "activations", "acts_radius": "activations",
    "acts_radius_index": "activations",
    "nn_self": "neighbours", "nn_heldout": "neighbours", "nn_summary": "neighbours", "nn_radius": "neighbours",
    "nn_radius_meta": "neighbours",
    "report_html": "report", "report_md": "report", "report_checks": "report", "report_verdicts": "report",
    "report_figures": "report",
}
# the stamp each rule writes beside its outputs (pretrained_activations shares activations' directory layout)
STAMPS: dict[str, str] = {
    "generate_data": "raw_stamp", "data_audit": "audit_stamp", "generate_fresh": "fresh_stamp",
    "generate_facts": "facts_stamp",
    "tokenize": "tokens_stamp", "subsets": "subset_stamp", "train": "run_stamp", "activations": "acts_stamp",
    "pretrained_activations": "acts_stamp", "neighbours": "nn_stamp", "evaluate": "eval_stamp", "sweep": "sweep_stamp",
    "memorisation": "memorisation_stamp", "report": "report_stamp",
}
PRODUCERS.update({stamp: rule for rule, stamp in STAMPS.items() if rule != "pretrained_activations"})
RUN_ARTIFACTS = ("model", "best_model", "metrics", "summary", "eval_rows", "run_stamp")
ACTIVATION_ARTIFACTS = ("acts_train", "acts_heldout", "acts_train_index", "acts_heldout_index", "acts_meta",
                        "acts_radius", "acts_radius_index", "acts_stamp")
NEIGHBOUR_ARTIFACTS = ("nn_self", "nn_heldout", "nn_summary", "nn_radius", "nn_radius_meta", "nn_stamp")
PRETRAINED_SUBSET = "pretrained"
FINAL_NORM_LAYER = "final_ln"  # the name of the final norm's output among an activation dump's layers


def pattern(results_dir: str, name: str) -> str:
    """The template under ``results_dir`` with its wildcards left in (for Snakemake rules)."""
    return f"{results_dir}/{TEMPLATES[name]}"


def path(results_dir: str | Path, name: str, **fields: str) -> Path:
    """The concrete path of one artifact."""
    return Path(results_dir) / TEMPLATES[name].format(**fields)


def subset_name(fraction: float) -> str:
    """Stable, path-safe name of a training subset: 1.0 -> 'pct100', 0.001 -> 'pct0.1'."""
    pct = round(fraction * 100, 6)
    return f"pct{int(pct)}" if float(pct).is_integer() else f"pct{pct:g}"


def match(file: str | Path) -> tuple[str, dict[str, str], Path] | None:
    """The artifact ``file`` is (matched on the layout, wherever the results directory is): its name, its
    wildcard fields and the results directory; None for a file outside the layout."""
    found = _match(str(file))
    return None if found is None else (found[0], dict(found[1]), found[2])


@functools.lru_cache(maxsize=65536)
def _match(file: str) -> tuple[str, tuple[tuple[str, str], ...], Path] | None:
    """:func:`match`, once per path: a Snakefile matches every artifact of its DAG several times (a grid of 240
    runs: about 6,000 calls at every start)."""
    parts = Path(file).parts
    for name, template in TEMPLATES.items():
        tparts = Path(template).parts
        if name not in PRODUCERS or len(parts) < len(tparts):
            continue
        fields: dict[str, str] = {}
        if all(_match_part(t, p, fields) for t, p in zip(tparts, parts[-len(tparts):], strict=True)):
            return name, tuple(fields.items()), Path(*parts[:-len(tparts)]) if len(parts) > len(tparts) else Path()
    return None


def producer(file: str | Path) -> str | None:
    """The rule that writes ``file`` (matched on the layout, wherever the results directory is), or None."""
    found = match(file)
    if found is not None:
        return producer_rule(found[0], found[1])
    parts = Path(file).parts
    if len(parts) >= 2 and parts[-2] == "tokens":  # shards and offsets of the token store
        return "tokenize"
    return None


def producer_rule(name: str, fields: dict[str, str]) -> str:
    """The rule that writes artifact ``name`` with these fields (a pretrained model's activations have their own)."""
    if name in ACTIVATION_ARTIFACTS and fields.get("subset") == PRETRAINED_SUBSET:
        return "pretrained_activations"
    return PRODUCERS[name]


def stamp_of(file: str | Path) -> tuple[str, Path] | None:
    """The producing rule and the stamp of the job that wrote ``file``; None for a file no stamped job writes."""
    found = match(file)
    return None if found is None else stamp_for(*found)


def stamp_for(name: str, fields: dict[str, str], results_dir: Path) -> tuple[str, Path] | None:
    """:func:`stamp_of` for an artifact already matched (:func:`match`)."""
    rule = producer_rule(name, fields)
    return rule, results_dir / TEMPLATES[STAMPS[rule]].format(**fields)


def train_job(exp: str, model: str, subset: str) -> str:
    """The name of a training job, as its model files record it (assocmem.provenance)."""
    return f"{exp}/{model}/{subset}"


def job_id(rule: str, stamp: str | Path) -> str:
    """A job's identity, as its stamp records it: the rule and its directory under the results directory, e.g.
    ``activations qf/activations/L2/pct1``."""
    found = match(stamp)
    if found is None:
        raise ValueError(f"{stamp} is not a stamp of the layout")
    name, fields, _ = found
    return f"{rule} {Path(TEMPLATES[name].format(**fields)).parent.as_posix()}"


@functools.cache
def _part_pattern(template: str) -> re.Pattern[str]:
    pattern = re.escape(template)
    for field in ("exp", "model", "subset", "split", "name"):
        pattern = pattern.replace(re.escape("{" + field + "}"), f"(?P<{field}>[^/]+)")
    return re.compile(pattern)


def _match_part(template: str, part: str, fields: dict[str, str]) -> bool:
    found = _part_pattern(template).fullmatch(part)
    if found is None or any(fields.get(k, v) != v for k, v in found.groupdict().items()):
        return False
    fields.update(found.groupdict())
    return True


REPLICATE = ".s"


def replicate_label(model: str, replicate: int) -> str:
    """The run name of replicate ``replicate`` of a model in a sweep: the model itself, then <model>.s<k>."""
    return model if replicate == 0 else f"{model}{REPLICATE}{replicate}"


def parse_replicate(label: str) -> tuple[str, int]:
    model, _, replicate = label.partition(REPLICATE)
    return model, int(replicate or 0)


def replicate_seed(seed: int, replicate: int) -> int:
    """Training seed of replicate k: the config's seed for k = 0 (so a sweep's first seed matches a plain run)."""
    return seed + 1000 * replicate
