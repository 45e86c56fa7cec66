"""Assemble the report from pipeline artifacts: checks.json, report.md, index.html and figures/."""

from __future__ import annotations

import platform
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from assocmem.io import write_text
from assocmem.report import figures
from assocmem.report.artifacts import Experiment, load_experiments
from assocmem.report.checks import collect_checks, theory_sections
from assocmem.report.render import Section, checks_json, markdown_table, render_html, render_markdown

PACKAGES = ("assocmem", "torch", "numpy", "scipy", "pandas", "faiss-cpu", "snakemake", "transformers",
            "datasets", "matplotlib")


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def stage_timings(results_dir: Path) -> pd.DataFrame:
    rows = []
    for path in sorted((results_dir / "benchmarks").rglob("*.tsv")):
        frame = pd.read_csv(path, sep="\t")
        if frame.empty:
            continue
        rows.append({"stage": path.relative_to(results_dir / "benchmarks").with_suffix("").as_posix(),
                     "seconds": float(frame["s"].iloc[-1]), "max_rss_mb": float(frame["max_rss"].iloc[-1])})
    return pd.DataFrame(rows, columns=["stage", "seconds", "max_rss_mb"])


def corpus_data_section(exp: Experiment) -> Section:
    section = Section(f"Data: {exp.name} (text corpus)")
    meta = exp.token_meta
    rows = [[split, v["n_docs"], v["n_tokens"], v["run"].get("tokens_per_s")] for split, v in meta["splits"].items()]
    section.tables.append(markdown_table(["split", "documents", "tokens", "tokenize throughput (tokens/s)"], rows))
    order = exp.source
    section.paragraphs.append(
        f"Tokenizer: `{meta['tokenizer']['name']}` (vocabulary {meta['tokenizer']['vocab_size']}). Document order "
        f"is the source order; its sha256 is `{order.get('order_sha256', order.get('ids_sha256', 'n/a'))}`. "
        "Subsets are the first X% of that order. There is no exact entropy floor for natural text.")
    return section


def comparison_tables(compare: dict[str, Any]) -> list[str]:
    rows = []
    for key, label in (("length", "sentence length"), ("template", "POS template"),
                       ("task_template", "(task, POS template)"), ("frame", "sentence frame")):
        entry = compare[key]
        rows.append([label, entry["tvd"], entry["noise"]["vs_generated_q95"], entry["n_distinct_generated"],
                     entry["n_distinct_reference"]])
    table = markdown_table(["distribution", "TVD ours vs McCoy", "noise q95", "distinct (ours)",
                            "distinct (McCoy)"], rows)
    task = compare["task_fraction"]
    ours, theirs = compare["rates"]["generated"], compare["rates"]["reference"]
    rates = [["decl fraction", task["generated"]["decl"], task["reference"]["decl"], task["binomial_p"]]]
    rates += [[name, ours[name], theirs[name], ""] for name in ("intransitive", "subject_rc", "subject_pp",
                                                                 "repeated_noun") if name in ours]
    return [table, markdown_table(["rate", "ours", "McCoy dev", "binomial p"], rates)]


def data_section(exp: Experiment) -> Section:
    if exp.floor is None:
        return corpus_data_section(exp)
    floor = exp.floor["train"]
    section = Section(f"Data: {exp.name}")
    splits = exp.token_meta["splits"]
    section.tables.append(markdown_table(
        ["split", "sequences", "tokens", "mean length", "sha256 (tokens)"],
        [[s, v["n_docs"], v["n_tokens"], v["mean_len"], v["shards"][0]["sha256"][:16]] for s, v in splits.items()]))
    section.paragraphs.append(
        f"Source: `{exp.manifest.get('source')}`. Loss counts {exp.token_meta['loss_tokens']}. "
        f"Exact entropy floor of the training distribution: **{floor['floor_nats_per_token']:.4f} nats/token** "
        f"(sequence entropy {floor['seq_entropy_nats']:.3f} nats over {floor['expected_predicted_tokens']:.3f} "
        "predicted tokens on average).")
    compare = exp.compare
    if compare.get("available"):
        section.paragraphs.append(
            f"Divergence of our generated training split ({compare['n']['generated']} lines) from McCoy's real "
            f"`question.dev` ({compare['n']['reference']} lines). TVD = total-variation distance; 'noise q95' is "
            "the 95th percentile of the TVD between our data and samples of the reference's size drawn from our "
            "generator, i.e. what sampling noise alone produces.")
        section.tables += comparison_tables(compare)
        ratios = {key: compare[key]["tvd"] / compare[key]["noise"]["vs_generated_q95"]
                  for key in ("length", "template", "frame")}
        verdict = ("McCoy's data is NOT a sample of the published grammar as given"
                   if min(ratios.values()) > 1 else "McCoy's data is consistent with our generator")
        section.paragraphs.append(
            f"{verdict}: in the tables below the TVD is {min(ratios.values()):.1f}-{max(ratios.values()):.1f} "
            "times the sampling-noise level (see `assocmem.data.qf` for the rules we inferred and adopted). "
            "The entropy floor is exact for our generator, not necessarily for McCoy's files.")
    else:
        section.paragraphs.append(f"No comparison with McCoy's real data: {compare.get('reason')}.")
    return section


def training_section(exp: Experiment, fig_dir: Path) -> Section:
    section = Section(f"Training curves: {exp.name} (Fig. 3/4 analogue)")
    path = figures.training_curves(exp, fig_dir)
    floor_text = "black: exact entropy floor of the data; " if exp.floor else ""
    section.figures.append((path, f"Train (solid) and validation (dashed) CE per subset; {floor_text}"
                                  "dotted grey: the paper's ≈1 floor."))
    rows = []
    for run in exp.trained_runs:
        last = run.metrics.iloc[-1]
        rows.append([run.model, run.subset, run.summary["n_params"], run.summary["subset"]["n_tokens"],
                     last["train_loss"], last["train_eval_ce"], last["val_ce"], run.metrics["val_ce"].min()])
    section.tables.append(markdown_table(
        ["model", "subset", "params N", "train tokens", "final train loss", "final train CE (fixed sample)",
         "final val CE", "best val CE"], rows))
    train = exp.config["train"]
    micro = train["micro_batch_size"] or train["batch_size"]
    unit = "windows of block_size tokens" if exp.floor is None else "sequences"
    section.paragraphs.append(
        f"Batch: {train['batch_size']} {unit} per optimizer step, as {train['batch_size'] // micro} "
        f"micro-batch(es) of {micro} (gradient accumulation); lr {train['lr']} with {train['warmup_steps']} "
        f"warmup steps then cosine decay to {train['min_lr_ratio']}×; {train['max_steps']} steps; "
        f"precision {train['precision']}. Train loss is the running mean since the previous evaluation; "
        "'train CE (fixed sample)' and val CE are evaluated on fixed batches.")
    return section


def duplicate_table(exp: Experiment) -> str:
    """Exact-duplicate chunks give zero NN distances; show the statistics with and without them."""
    rows = []
    for run in exp.runs:
        last = run.act_meta["layers"][-1]
        frame = run.nn_self
        dist = frame.loc[(frame["rank"] == 1) & (frame["layer"] == last)
                         & (frame["fraction"] == frame["fraction"].max()), "distance"].to_numpy()
        nonzero = dist[dist > 1e-6]
        train_meta = run.act_meta["splits"]["train"]
        rows.append([run.label, last, len(dist), train_meta.get("distinct_chunks"), float((dist <= 1e-6).mean()),
                     float(dist.mean()), float(pd.Series(dist).median()),
                     float(nonzero.mean()) if len(nonzero) else float("nan"),
                     float(pd.Series(nonzero).median()) if len(nonzero) else float("nan")])
    return markdown_table(["run", "layer", "chunks", "distinct (sequence, position)", "share of zero NN distances",
                           "mean", "median", "mean w/o zeros", "median w/o zeros"], rows)


def neighbour_section(exp: Experiment, fig_dir: Path) -> Section:
    section = Section(f"Nearest-neighbour distances: {exp.name} (Fig. 2 analogue)")
    section.paragraphs.append(
        "Chunks are prefixes of one sequence ending at a uniform random position (see "
        "`assocmem.activations`); exact L2 distances by faiss, self-match removed by id. Reference lines: "
        "r* = sqrt(n/(2πe)) and 2r* with n = d_model.")
    section.tables.append(duplicate_table(exp))
    section.figures.append((figures.nn_by_layer(exp, fig_dir), "Mean NN distance per layer, in units of r*."))
    for run in exp.runs:
        section.figures.append((figures.nn_histograms(run, fig_dir),
                                f"{run.label}: NN distance histograms at each subsample fraction."))
    return section


def provenance_section(config: dict[str, Any], experiments: list[Experiment], results_dir: Path) -> Section:
    section = Section("Provenance")
    versions = package_versions()
    section.tables.append(markdown_table(["package", "version"], [[k, v] for k, v in versions.items()]))
    checksum_rows = [[exp.name, name, digest] for exp in experiments if exp.manifest
                     for name, digest in sorted(exp.manifest.get("sha256", {}).items())]
    if checksum_rows:
        section.tables.append(markdown_table(["experiment", "file", "sha256"], checksum_rows))
    timings = stage_timings(results_dir)
    if not timings.empty:
        section.tables.append(markdown_table(list(timings.columns), timings.values.tolist()))
        section.paragraphs.append(f"Sum of stage wall times: {timings['seconds'].sum():.1f} s; "
                                  f"largest peak RSS: {timings['max_rss_mb'].max():.0f} MB.")
    section.paragraphs.append("```" + yaml.safe_dump(config, sort_keys=False) + "```")
    return section


def build_report(params: dict[str, Any], results_dir: Path, out_dir: Path) -> list[dict[str, Any]]:
    config, report_cfg = params["config"], params["report"]
    fig_dir = out_dir / "figures"
    fig_dir.mkdir(parents=True, exist_ok=True)
    experiments = load_experiments(results_dir, config)
    checks = collect_checks(experiments, report_cfg, fig_dir)
    sections: list[Section] = []
    for exp in experiments:
        sections.append(data_section(exp))
        if exp.trained_runs:
            sections.append(training_section(exp, fig_dir))
        sections.append(neighbour_section(exp, fig_dir))
    sections += theory_sections(checks, fig_dir)
    sections.append(provenance_section(config, experiments, Path(results_dir)))
    title = report_cfg["title"]
    write_text(out_dir / "checks.json", checks_json(checks))
    write_text(out_dir / "report.md", render_markdown(title, checks, sections, out_dir))
    write_text(out_dir / "index.html", render_html(title, checks, sections))
    return checks
