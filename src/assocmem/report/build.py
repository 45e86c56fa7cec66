"""Assemble the report from pipeline artifacts: checks.json, report.md, index.html and figures/."""

from __future__ import annotations

import csv
import functools
import io
import platform
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from assocmem import layout
from assocmem.dataset_kinds import kind_of
from assocmem.io import write_text
from assocmem.report import claims, figures
from assocmem.report.artifacts import Experiment, Run
from assocmem.report.columns import human_label
from assocmem.report.evidence import Evidence
from assocmem.report.figure_writer import EarlyFigure, early_figure, parallel_figures
from assocmem.report.header import config_files_of_the_run, run_header
from assocmem.report.html_page import render_html
from assocmem.report.memorisation import memorisation_section
from assocmem.report.render import (
    CE_UNIT,
    Section,
    checks_json,
    claim_anchor,
    claim_label,
    claim_section,
    errata_section,
    markdown_table,
    quantity_header,
    render_markdown,
)
from assocmem.report.swap import keep_copy, swapped_in
from assocmem.report.sweep import sweep_section

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


def stage_timings(results_dir: Path, benchmarks: Sequence[str]) -> pd.DataFrame:
    """Wall time and peak RSS of the current config's jobs: the benchmark files named in ``benchmarks`` (each rule's
    `benchmark:` name, listed by the workflow) that exist; a dropped job's file left in the directory is not read."""
    rows = []
    for name in sorted(benchmarks):
        path = Path(results_dir) / layout.TEMPLATES["benchmark"].format(name=name)
        frame = pd.read_csv(path, sep="\t") if path.is_file() else pd.DataFrame()
        if frame.empty:
            continue
        rows.append({"stage": name, "seconds": float(frame["s"].iloc[-1]),
                     "max_rss_mb": float(frame["max_rss"].iloc[-1])})
    return pd.DataFrame(rows, columns=["stage", "seconds", "max_rss_mb"])


def corpus_data_section(exp: Experiment) -> Section:
    section = Section(f"Data: {exp.name} (text corpus)")
    meta = exp.token_meta
    rows = [[split, v["n_docs"], v["n_tokens"]] for split, v in meta["splits"].items()]
    section.tables.append(markdown_table(["split", "documents", "tokens"], rows))
    order = exp.source
    section.paragraphs.append(
        f"Tokenizer: `{meta['tokenizer']['name']}` (vocabulary {meta['tokenizer']['vocab_size']}). Document order "
        f"is the source order; its sha256 is `{order.get('order_sha256', order.get('ids_sha256', 'n/a'))}`. "
        "Subsets are the first X% of that order. There is no exact entropy floor for natural text.")
    return section


def facts_data_section(exp: Experiment) -> Section:
    """The data section of a kind whose data stage records its exact information content (facts)."""
    from assocmem.facts.information import INFORMATION_HEADER, information_rows

    section = Section(f"Data: {exp.name} (random facts)")
    splits = exp.token_meta["splits"]
    section.tables.append(markdown_table(["split", "facts", "tokens", "sha256 (tokens)"],
                                         [[s, v["n_docs"], v["n_tokens"], v["shards"][0]["sha256"][:16]]
                                          for s, v in splits.items()]))
    section.tables.append(markdown_table(INFORMATION_HEADER, information_rows(exp.manifest)))
    section.paragraphs.append(
        f"Each fact is one sequence `<sos> key <sep> value <eos>`; the loss counts {exp.token_meta['loss_tokens']}. "
        f"Information counted: {exp.manifest['information']['counted']}. A model that has stored a fact predicts its "
        "value at 0 nats; on an unseen fact (the validation split) no model beats ln V nats per value token. Recall "
        "of the stored facts is the training curves' 'train CE, fixed sample'.")
    return section


def comparison_tables(compare: dict[str, Any]) -> list[str]:
    """Fidelity of our data to McCoy's (held-out, gen, direct) and, with a configured reference, the rates behind
    the differences; the rows come from :mod:`assocmem.qf.compare`."""
    from assocmem.qf.compare import FIDELITY_TABLE_HEADER, RATE_TABLE_HEADER, fidelity_table, rate_table

    tables = [markdown_table(FIDELITY_TABLE_HEADER, fidelity_table(compare))]
    if compare.get("available"):
        tables.append(markdown_table(RATE_TABLE_HEADER, rate_table(compare)))
    return tables


def data_section(exp: Experiment) -> Section:
    """The data section of an audited kind (exact floor and fidelity to the real files), of a kind with an exact
    information content (facts), else the plain one."""
    from assocmem.qf.floor import FLOOR_TABLE_HEADER, floor_table

    kind = kind_of(exp.config["dataset"])
    if kind.exact_information:
        return facts_data_section(exp)
    if not kind.audited:
        return corpus_data_section(exp)
    floors, compare, manifest = exp.floor, exp.compare, exp.manifest
    shipped = compare["shipped_fit"]
    section = Section(f"Data: {exp.name}")
    splits = exp.token_meta["splits"]
    section.tables.append(markdown_table(
        ["split", "sequences", "tokens", "mean length", "sha256 (tokens)"],
        [[s, v["n_docs"], v["n_tokens"], v["mean_len"], v["shards"][0]["sha256"][:16]] for s, v in splits.items()]))
    weights = manifest.get("grammar_weights")
    if manifest.get("source") != "generate":
        generator = "McCoy's published files"
    elif weights == "fitted":
        generator = (f"grammar weights `fitted` (annotation `{shipped['annotation']}`, fitted {shipped['date']} on "
                     f"McCoy's question.dev {shipped['sources']['dev']['sha256'][:12]} and question.gen "
                     f"{shipped['sources']['gen']['sha256'][:12]}; see `assocmem.qf.fit`)")
    else:
        generator = (f"grammar weights `{weights}` (the held-out fidelity rows below describe the fitted grammar, "
                     "not these weights; the direct rows, with a configured reference, describe the data used here)")
    section.paragraphs.append(f"Source: `{manifest.get('source')}`, {generator}. Loss counts "
                              f"{exp.token_meta['loss_tokens']}.")
    section.paragraphs.append(
        f"**Entropy floors.** {floors['eos_convention']} Our data's floor is exact for the generating grammar (up to "
        "the dedupe approximation of `assocmem.qf.floor`); McCoy's real files have no known generator, so their "
        "floor is estimated. Estimator check: on simulated 1,000-line files from the fitted grammar the Miller-Madow "
        f"estimate is off by {shipped['reference_floors']['estimator_check']['bias']:+.4f} ± "
        f"{shipped['reference_floors']['estimator_check']['sd_estimate']:.4f} nats/token (mean ± sd).")
    section.tables.append(markdown_table(FLOOR_TABLE_HEADER, floor_table(floors)))
    calibration = shipped["calibration"]
    source = ("the configured reference file (the iid table refitted on each half)" if compare.get("heldout")
              else f"McCoy's question.dev as measured when the grammar was fitted ({shipped['date']}; no reference_dev "
                   "is configured)")
    section.paragraphs.append(
        "**Fidelity to McCoy's data.** Fit on one half of the real file, generate 100,000 lines, compare with the "
        f"half the fit never saw, for {source}; gen: the same with interleaved halves of McCoy's question.gen. "
        "TV = total-variation distance; noise floor = mean TV between two independent samples of the same sizes "
        "from one distribution; goal $\\mathrm{TV}\\le 1.5\\times$ noise floor. The noise floor holds sampling "
        "noise only: a correctly specified model fitted on 500 lines passes all six dev checks with probability "
        f"{calibration['pass_rate_all_measures_both_folds']:.2f} and the two template checks with probability "
        f"{calibration['pass_rate_template_both_folds']:.2f} (simulation, {calibration['n_rep']} files). "
        f"Model choice: {shipped['selection_rule']}.")
    section.tables += comparison_tables(compare)
    if not compare.get("available"):
        section.paragraphs.append(f"No configured real file ({compare.get('reason')}): the fidelity rows below are "
                                  "the shipped fit-time numbers.")
    return section


def training_section(exp: Experiment, fig_dir: Path, regime: Callable[[Run], str]) -> Section:
    """The training curves and one row per run, with its regime (converged, over-fitted, not converged: the rule
    of report/convergence.py, which decides whether a claim may rest on the run)."""
    section = Section(f"Training curves: {exp.name} (Fig. 3/4 analogue)", toc_label=f"Training: {exp.name}")
    section.figures.append(figures.training_curves(exp, fig_dir))
    rows = []
    for run in exp.trained_runs:
        last = run.metrics.iloc[-1]
        rows.append([run.model, run.subset, regime(run), run.summary["n_params"], run.summary["subset"]["n_tokens"],
                     last["train_loss"], last["train_eval_ce"], last["val_ce"], run.metrics["val_ce"].min()])
    ce = f"({CE_UNIT})"
    section.tables.append(markdown_table(
        ["model", "subset", "regime", "parameters N", "train tokens", f"final train loss {ce}",
         f"final train CE, fixed sample {ce}", f"final val CE {ce}", f"best val CE {ce}"], rows))
    section.paragraphs.append("Regime: the convergence rule's verdict on the run (see the loss-floor claim); only a "
                              "converged run carries a claim about a loss level, an over-fitted one is read at its "
                              "best checkpoint.")
    train = exp.config["train"]
    micro = train["micro_batch_size"] or train["batch_size"]
    unit = "sequences" if exp.token_meta["batching"] == "sequences" else "windows of block_size tokens"
    section.paragraphs.append(
        f"Batch: {train['batch_size']} {unit} per optimizer step, as {train['batch_size'] // micro} "
        f"micro-batch(es) of {micro} (gradient accumulation); lr {train['lr']} with {train['warmup_steps']} "
        f"warmup steps then cosine decay to {train['min_lr_ratio']}×; {train['max_steps']} steps; "
        f"precision {train['precision']}. Train loss is the running mean since the previous evaluation; "
        "'train CE (fixed sample)' and val CE are evaluated on fixed batches.")
    overrides = {name: spec["train"] for name, spec in exp.config["models"].items() if spec.get("train")}
    if overrides:
        section.paragraphs.append("Per-model overrides of these settings: " + "; ".join(
            f"{name}: " + ", ".join(f"{key} {value}" for key, value in keys.items())
            for name, keys in overrides.items()) + ".")
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
    section = Section(f"Nearest-neighbour distances: {exp.name} (Fig. 2 analogue)",
                      toc_label=f"NN distances: {exp.name}")
    section.paragraphs.append(
        "Chunks are prefixes of one sequence ending at a uniform random position (see "
        "`assocmem.activations`); exact L2 distances by faiss, self-match removed by id. Reference lines: "
        "$r^* = \\sqrt{n/(2\\pi e)}$ and $2r^*$ with $n$ = d_model.")
    section.tables.append(duplicate_table(exp))
    section.figures.append(figures.nn_by_layer(exp, fig_dir))
    section.figures += [figures.nn_histograms(run, fig_dir) for run in exp.runs]  # each run on its own x-range
    return section


def provenance_section(config: dict[str, Any], experiments: list[Experiment], results_dir: Path,
                       benchmarks: Sequence[str]) -> Section:
    """Package versions, data checksums, the timings of the current config's jobs (``benchmarks``: their names) and
    the config."""
    section = Section("Provenance")
    versions = package_versions()
    section.tables.append(markdown_table(["package", "version"], [[k, v] for k, v in versions.items()]))
    checksum_rows = [[exp.name, name, digest] for exp in experiments if exp.manifest
                     for name, digest in sorted(exp.manifest.get("sha256", {}).items())]
    if checksum_rows:
        section.tables.append(markdown_table(["experiment", "file", "sha256"], checksum_rows))
    timings = stage_timings(results_dir, benchmarks)
    if not timings.empty:
        section.tables.append(markdown_table(["stage", "wall time (s)", "peak RSS (MB)"], timings.values.tolist()))
        section.paragraphs.append(f"Sum of stage wall times: {timings['seconds'].sum():.1f} s; "
                                  f"largest peak RSS: {timings['max_rss_mb'].max():.0f} MB.")
    section.paragraphs.append("```" + yaml.safe_dump(config, sort_keys=False) + "```")
    return section


WIDE_TABLE_COLUMNS = 8  # a numbers table with more columns than this, and fewer rows than columns, is transposed


def numbers_tables(numbers: dict[str, Any], units: dict[str, str] | None = None) -> list[str]:
    """Keys 'prefix.quantity' become one row per prefix and one column per quantity (transposed when that is wider
    than ``WIDE_TABLE_COLUMNS`` and has fewer rows than columns, so it fits the page); the rest a plain list. Headers
    are in words and carry units (``units`` by quantity name; cross-entropies are nats/token)."""
    plain, grouped = [], {}
    for key, value in numbers.items():
        prefix, _, quantity = key.rpartition(".")
        if prefix:
            grouped.setdefault(prefix, {})[quantity] = value
        else:
            plain.append([quantity_header(key, units), value])
    tables = [markdown_table(["quantity", "value"], plain)] if plain else []
    by_columns: dict[tuple[str, ...], list[list[Any]]] = {}
    for prefix, values in grouped.items():
        by_columns.setdefault(tuple(values), []).append([human_label(prefix), *values.values()])
    for columns, rows in by_columns.items():
        names = [quantity_header(c, units) for c in columns]
        if len(columns) + 1 > WIDE_TABLE_COLUMNS and len(rows) < len(columns):
            tables.append(markdown_table(["quantity", *(row[0] for row in rows)],
                                         [[name, *(row[1 + i] for row in rows)] for i, name in enumerate(names)]))
        else:
            tables.append(markdown_table(["set", *names], rows))
    return tables


def early_claim_figures(fig_dir: Path) -> dict[str, list[EarlyFigure[tuple[Path, str]]]]:
    """The figures each claim's registry record draws, started now: they need no run's data, so inside
    :func:`parallel_figures` forked children draw them while the report loads and judges the runs."""
    return {claim.id: [early_figure(f"claim {claim.id} #{i + 1}", functools.partial(make, fig_dir))
                       for i, make in enumerate(claim.figures)] for claim in claims.all_claims()}


def theory_sections(checks: list[dict[str, Any]], fig_dir: Path,
                    drawn: dict[str, list[EarlyFigure[tuple[Path, str]]]] | None = None) -> list[Section]:
    """One section per claim (see render.claim_section for its order), then the errata. A claim's figures are
    those its row brings ({"file": name under fig_dir, "caption"}) and those its registry record draws (``drawn``:
    from :func:`early_claim_figures`; by default drawn here)."""
    drawn = early_claim_figures(fig_dir) if drawn is None else drawn
    sections = []
    for check in checks:
        figures = [(fig_dir / figure["file"], figure["caption"]) for figure in check.get("figures", [])]
        claim = claims.get(check["id"])  # a row of no registered claim is refused, naming its id
        figures += [figure.result() for figure in drawn[claim.id]]
        tables = numbers_tables(check.get("numbers", {}), check.get("units"))
        sections.append(claim_section(check, tables, figures))
    errata = errata_section(checks)
    return sections + ([errata] if errata else [])


VERDICTS_HEADER = ["claim", "label", "verdict", "how we know", "section in index.html"]


def verdicts_csv(checks: list[dict[str, Any]]) -> str:
    """The verdict table as CSV, one row per claim (registered with `snakemake --report`; opens in any spreadsheet)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(VERDICTS_HEADER)
    writer.writerows([check["id"], claim_label(check), check["verdict"], check.get("how", ""),
                      f"index.html#{claim_anchor(check['id'])}"] for check in checks)
    return out.getvalue()


def experiment_sections(exp: Experiment, evidence: Evidence, fig_dir: Path) -> list[Section]:
    """The data section of ``exp``, then: a memorisation grid's section, a scaling sweep's, or the training and
    neighbour sections of its runs."""
    sections = [data_section(exp)]
    if exp.name in evidence.memorisation_grids:
        return sections + [memorisation_section(exp, evidence.memorisation_grids[exp.name], exp.manifest, fig_dir)]
    if exp.name in evidence.sweeps:
        floor = exp.floor["train"]["floor_nats_per_token"] if exp.floor else None
        return sections + [sweep_section(exp, evidence.sweeps[exp.name], floor, fig_dir)]
    if exp.trained_runs:
        sections.append(training_section(exp, fig_dir, lambda run: evidence.status(run).status))
    return sections + [neighbour_section(exp, fig_dir)]


def build_report(params: dict[str, Any], results_dir: Path, out_dir: Path) -> list[dict[str, Any]]:
    """The report, built beside ``out_dir`` and swapped in whole when complete (``assocmem.report.swap``)."""
    with swapped_in(Path(out_dir)) as stage:
        checks = _build_report(params, results_dir, stage)
    keep_copy(Path(out_dir))
    return checks


def rows_and_run_sections(evidence: Evidence, fig_dir: Path) -> tuple[list[dict[str, Any]], list[Section]]:
    """Every claim's row (report order) and the experiments' sections. The claims whose rows bring figures of the
    runs are evaluated first, then the experiments' sections drawn, then the other claims: inside
    :func:`parallel_figures` each figure then renders while the report computes what comes after it."""
    ordered = claims.all_claims()
    first = {claim.id: claim.row(evidence) for claim in ordered if claim.brings_figures}
    sections = [section for exp in evidence.experiments for section in experiment_sections(exp, evidence, fig_dir)]
    return [first[claim.id] if claim.id in first else claim.row(evidence) for claim in ordered], sections


def _build_report(params: dict[str, Any], results_dir: Path, out_dir: Path) -> list[dict[str, Any]]:
    config, report_cfg = params["config"], params["report"]
    fig_dir = out_dir / "figures"
    fig_dir.mkdir(parents=True, exist_ok=True)
    with parallel_figures(int(params.get("threads", 1))):  # the figures' files are complete after the block
        theory_figures = early_claim_figures(fig_dir)
        evidence = Evidence.load(results_dir, config, report_cfg, fig_dir)
        checks, sections = rows_and_run_sections(evidence, fig_dir)
        sections += theory_sections(checks, fig_dir, theory_figures)
    # the workflow lists the current jobs' benchmark names (report.smk); a report built outside it lists none
    sections.append(provenance_section(config, evidence.experiments, Path(results_dir), params.get("benchmarks", [])))
    title = report_cfg["title"]
    devices = sorted({str(run.summary.get("device", "n/a")) for exp in evidence.experiments
                      for run in exp.trained_runs})
    header = run_header(config, config_files_of_the_run(), devices, package_versions())
    write_text(out_dir / "checks.json", checks_json(checks, evidence.convergence_records()))
    write_text(out_dir / "verdicts.csv", verdicts_csv(checks))
    write_text(out_dir / "report.md", render_markdown(title, checks, sections, out_dir, header))
    write_text(out_dir / "index.html", render_html(title, checks, sections, header))
    return checks
