"""Where every artifact lives under the results directory: the one copy of the layout.

Each entry is a template relative to ``results_dir`` whose ``{exp}``, ``{model}``, ``{subset}``, ``{split}``
fields are Snakemake wildcards in ``workflow/rules/common.smk`` and are filled in by :func:`path` for the report.
"""

from __future__ import annotations

from pathlib import Path

TEMPLATES: dict[str, str] = {
    # Question-Formation data (generate_data, data_audit)
    "raw_file": "{exp}/data/raw/question.{split}",
    "raw_manifest": "{exp}/data/raw/manifest.json",
    "floor": "{exp}/data/floor.json",
    "compare": "{exp}/data/compare.json",
    # token store (tokenize) and subset views (subsets); both data kinds
    "tokens_meta": "{exp}/data/tokens/meta.json",
    "tokens_source": "{exp}/data/tokens/source.json",
    "subset_meta": "{exp}/data/subsets/{subset}/meta.json",
    # one model on one subset (train, activations, neighbours); subset is "pretrained" for HF models
    "model": "{exp}/train/{model}/{subset}/model.pt",
    "metrics": "{exp}/train/{model}/{subset}/metrics.csv",
    "summary": "{exp}/train/{model}/{subset}/summary.json",
    "acts_train": "{exp}/activations/{model}/{subset}/train.npy",
    "acts_heldout": "{exp}/activations/{model}/{subset}/heldout.npy",
    "acts_train_index": "{exp}/activations/{model}/{subset}/train.index.parquet",
    "acts_heldout_index": "{exp}/activations/{model}/{subset}/heldout.index.parquet",
    "acts_meta": "{exp}/activations/{model}/{subset}/meta.json",
    "nn_self": "{exp}/neighbours/{model}/{subset}/self.parquet",
    "nn_heldout": "{exp}/neighbours/{model}/{subset}/heldout.parquet",
    "nn_summary": "{exp}/neighbours/{model}/{subset}/summary.csv",
    # report
    "report_html": "report/index.html",
    "report_md": "report/report.md",
    "report_checks": "report/checks.json",
    "report_figures": "report/figures",
    # per-job logs and benchmark timings
    "log": "logs/{name}.log",
    "benchmark": "benchmarks/{name}.tsv",
}

RUN_ARTIFACTS = ("model", "metrics", "summary")
ACTIVATION_ARTIFACTS = ("acts_train", "acts_heldout", "acts_train_index", "acts_heldout_index", "acts_meta")
NEIGHBOUR_ARTIFACTS = ("nn_self", "nn_heldout", "nn_summary")
PRETRAINED_SUBSET = "pretrained"


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
