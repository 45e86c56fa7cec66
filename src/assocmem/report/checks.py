"""Turn pipeline artifacts into the inputs of each claim check (report.claims) and into report sections.

Every data-based claim uses only runs that are converged (report.convergence) or pretrained; the others are
listed in the row. :func:`convergence_records` is each run's status for checks.json.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from assocmem import layout, scaling
from assocmem.config import run_settings
from assocmem.errors import AssocmemError
from assocmem.report import claims, convergence
from assocmem.report.artifacts import Experiment, Run, SweepRun
from assocmem.report.figures import save_figure
from assocmem.report.render import Section, claim_section, errata_section, markdown_table, quantity_header

PAPER_SCALE = (80_000, 1024, "paper: d = 80,000 chunks, n = 1024 (GPT-2 medium)")
FINAL_LN = "final_ln"


def _primary_run(runs: list[Run]) -> Run:
    """The run closest to the paper's setting: a pretrained model if any, else the deepest model on the largest
    subset."""
    pretrained = [r for r in runs if not r.trained]
    if pretrained:
        return pretrained[0]
    return max(runs, key=lambda r: (r.fraction, r.summary["model_config"]["n_layer"], r.summary["n_params"]))


def activation_sets(runs: list[Run], n_queries: int, seed: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Per (run, layer): training activations as stored patterns, held-out activations as queries."""
    rng = np.random.default_rng(seed)
    patterns, queries = {}, {}
    for run in runs:
        train, heldout = run.activations("train"), run.activations("heldout")
        rows = np.sort(rng.choice(heldout.shape[1], size=min(n_queries, heldout.shape[1]), replace=False))
        for slot, layer in enumerate(run.act_meta["layers"]):
            key = f"{run.label}/{layer}"
            patterns[key] = np.asarray(train[slot], dtype=np.float64)
            queries[key] = np.asarray(heldout[slot][rows], dtype=np.float64)
    return patterns, queries


def _t_max(run: Run) -> int:
    """Context length behind each activation: the chunk length for corpus data, the model context for QF."""
    chunk_len = run.act_meta["splits"]["train"].get("chunk_len")
    if chunk_len:
        return int(chunk_len)
    if run.summary is not None:
        return int(run.summary["model_config"]["max_len"])
    raise AssocmemError(f"{run.act_dir / 'meta.json'}: no chunk_len for pretrained run {run.label}")


def _results_dir(run: Run) -> Path:
    """The results directory a run was loaded from (its activation directory sits at a fixed depth)."""
    for root in run.act_dir.parents:
        if layout.path(root, "acts_meta", exp=run.exp, model=run.model, subset=run.subset).parent == run.act_dir:
            return root
    raise AssocmemError(f"{run.act_dir} is not an activation directory of the results layout")


def _paths(run: Run) -> tuple[Path, Path]:
    """(model.pt, subset store directory) of a trained run."""
    root = _results_dir(run)
    fields = {"exp": run.exp, "model": run.model, "subset": run.subset}
    return layout.path(root, "model", **fields), layout.path(root, "subset_meta", **fields).parent


# ---------------------------------------------------------------- convergence

@lru_cache(maxsize=256)
def _eval_rows(model_path: str, store_dir: str, train_cfg: str, model_spec: str,
               seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-row NLL of the final model on the fixed validation batches the training job evaluates on."""
    from assocmem.train import build_job, load_model

    job = build_job(json.loads(train_cfg), json.loads(model_spec), seed, Path(store_dir), Path(model_path).parent)
    return convergence.per_row_nll(load_model(Path(model_path)), job.eval_sets["val"])


def run_convergence(exp: Experiment, run: Run, seed: int) -> convergence.Convergence:
    """The run's convergence status; the tolerance is the SE of its final val CE on the fixed eval batches
    (QF: exactly the training job's validation rows; windowed corpora: a ``seed``-ed sample of the same size)."""
    if not run.trained:
        return convergence.pretrained(run.label)
    model_path, store_dir = _paths(run)
    spec, train = run_settings(exp.config, run.model)
    rows = _eval_rows(str(model_path), str(store_dir), json.dumps(train, sort_keys=True),
                      json.dumps(spec, sort_keys=True), seed)
    return convergence.assess_with_noise(run.label, run.metrics, *rows)


def convergence_table(experiments: list[Experiment], seed: int) -> dict[str, convergence.Convergence]:
    """Status of every run, keyed by '<experiment>:<model>/<subset>'."""
    return {_key(run): run_convergence(exp, run, seed) for exp in experiments for run in exp.runs}


def convergence_records(table: dict[str, convergence.Convergence]) -> list[dict[str, Any]]:
    """Each run's convergence status (from :func:`convergence_table`) as plain records (for checks.json)."""
    return [{"experiment": key.split(":", 1)[0], **status.as_record()} for key, status in table.items()]


def _key(run: Run) -> str:
    return f"{run.exp}:{run.label}"


def _status_columns(runs: list[Run], statuses: dict[str, convergence.Convergence]) -> dict[str, list[Any]]:
    return {"usable": [statuses[_key(run)].usable for run in runs],
            "status": [statuses[_key(run)].status for run in runs]}


# ---------------------------------------------------------------- radius inputs

def _distinct_rows(acts: np.ndarray) -> np.ndarray:
    """Row of the first occurrence of every distinct activation vector (identical prefixes give identical
    vectors in a causal model, so at the last layer this keeps one chunk per distinct prefix)."""
    _, first = np.unique(np.ascontiguousarray(acts), axis=0, return_index=True)
    return np.sort(first)


def _self_nn(vectors: np.ndarray, ids: np.ndarray, fractions: list[float], seed: int) -> pd.DataFrame:
    """Rank-1 NN distance of every row of each nested subsample of ``ids`` among that subsample."""
    from assocmem.neighbours import knn, nested_subsample_rows

    frames = []
    for fraction in fractions:
        chosen = ids[nested_subsample_rows(ids.size, fraction, seed)]
        if chosen.size < 2:
            continue
        sub = np.ascontiguousarray(vectors[chosen], dtype=np.float32)
        distances, _ = knn(sub, sub, 1, exclude_ids=np.arange(chosen.size))
        frames.append(pd.DataFrame({"fraction": fraction, "n_patterns": chosen.size, "query": chosen,
                                    "distance": distances[:, 0].astype(np.float64)}))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["fraction", "n_patterns", "query", "distance"])


def _all_chunks(run: Run, layer: str) -> pd.DataFrame:
    """The stored self-search (every chunk, duplicates included) at ``layer``, rank 1."""
    frame = run.nn_self
    rank1 = frame[(frame["rank"] == 1) & (frame["layer"] == layer)]
    counts = rank1.groupby("fraction")["query_row"].transform("size")
    return pd.DataFrame({"fraction": rank1["fraction"].astype(float), "n_patterns": counts,
                         "query": rank1["query_row"], "distance": rank1["distance"].astype(np.float64)})


def _final_ln_affine(run: Run) -> tuple[np.ndarray, np.ndarray] | None:
    """(gain, bias) of the model's final LayerNorm, or None for pretrained runs (no model.pt here)."""
    if not run.trained:
        return None
    from assocmem.train import load_model

    ln_f = load_model(_paths(run)[0]).ln_f
    return ln_f.weight.detach().double().numpy(), ln_f.bias.detach().double().numpy()


def _rms_norm(vectors: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.sum(np.asarray(vectors, dtype=np.float64) ** 2, axis=1))))


def _radius_run(run: Run, seed: int) -> tuple[pd.DataFrame, dict[str, Any], list[dict[str, Any]]]:
    layers = list(run.act_meta["layers"])
    last = layers[-1]
    train = run.activations("train")
    acts = np.asarray(train[len(layers) - 1], dtype=np.float32)
    fractions = sorted(float(f) for f in run.nn_self["fraction"].unique())
    distinct = _distinct_rows(acts)
    frames = [_all_chunks(run, last).assign(set="all"),
              _self_nn(acts, distinct, fractions, seed).assign(set="distinct")]
    info: dict[str, Any] = {"n_chunks": acts.shape[0], "n_distinct": distinct.size,
                            "rms_norm": _rms_norm(acts[distinct]), "n_dim": acts.shape[1], "t_max": _t_max(run)}
    all_full = frames[0][frames[0]["fraction"] == max(fractions)]["distance"]
    info["zero_share"] = float((all_full == 0).mean()) if len(all_full) else np.nan
    affine = _final_ln_affine(run) if last == FINAL_LN else None
    if affine is not None and np.all(np.abs(affine[0]) > 0):
        gain, bias = affine
        normalised = ((acts.astype(np.float64) - bias) / gain).astype(np.float32)
        frames.append(_self_nn(normalised, distinct, fractions, seed).assign(set="gain_free"))
        info.update(gain_rms=float(np.sqrt(np.mean(gain**2))), gain_free_rms_norm=_rms_norm(normalised[distinct]))
    summary = run.nn_summary
    full = summary[(summary["protocol"] == "self") & (summary["fraction"] == summary["fraction"].max())]
    scale = [{"run": run.label, "layer": row["layer"], "mean_nn": float(row["mean"]),
              "rms_norm": _rms_norm(train[layers.index(row["layer"])])} for _, row in full.iterrows()]
    return pd.concat(frames, ignore_index=True).assign(run=run.label), info, scale


def radius_inputs(runs: list[Run], statuses: dict[str, convergence.Convergence],
                  seed: int) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(nn_queries, runs, layer_scale) in the form claims.radius expects: last-layer NN distances of every run
    for all chunks, distinct prefixes and (trained models) the gain-free final LayerNorm vectors."""
    queries, infos, scales = [], [], []
    for run in runs:
        frame, info, scale = _radius_run(run, seed)
        status = statuses[_key(run)]
        queries.append(frame)
        infos.append({"run": run.label, "usable": status.usable, "status": status.status, **info})
        scales += scale
    return pd.concat(queries, ignore_index=True), pd.DataFrame(infos), pd.DataFrame(scales)


# ---------------------------------------------------------------- other claim inputs

def prop4_inputs(runs: list[Run], statuses: dict[str, convergence.Convergence]) -> pd.DataFrame:
    rows = []
    for run in runs:
        last = run.act_meta["layers"][-1]
        s = run.nn_summary
        paper = s[(s["protocol"] == "self") & (s["layer"] == last) & (s["fraction"] == s["fraction"].max())]
        final = run.metrics.iloc[-1]
        rows.append({"model": run.label, "nn_median": float(paper["median"].iloc[0]),
                     "n_dim": int(s["n_dim"].iloc[0]), "n_patterns": int(run.act_meta["splits"]["train"]["n_chunks"]),
                     "n_layers": int(run.summary["model_config"]["n_layer"]),
                     "train_ce": float(final["train_eval_ce"]), "test_ce": float(final["val_ce"])})
    return pd.DataFrame(rows).assign(**_status_columns(runs, statuses))


def scaling_inputs(runs: list[Run], statuses: dict[str, convergence.Convergence]) -> pd.DataFrame:
    frame = pd.DataFrame([{"model": run.model, "run": run.label, "n_params": run.summary["n_params"],
                           "n_train_tokens": run.summary["subset"]["n_tokens"],
                           "best_val_loss": float(run.metrics["val_ce"].min())} for run in runs])
    return frame.assign(**_status_columns(runs, statuses))


def params_inputs(runs: list[Run]) -> pd.DataFrame:
    rows = []
    for run in runs:
        cfg = run.summary["model_config"]
        rows.append({"model": run.label, "n_params": run.summary["n_params"], "vocab": cfg["vocab_size"],
                     "n_ctx": cfg["max_len"], "d": cfg["d_model"], "n_layer": cfg["n_layer"], "d_ff": cfg["d_ff"],
                     "tied": bool(cfg["tie_embeddings"]), "n_train_tokens": run.summary["subset"]["n_tokens"]})
    return pd.DataFrame(rows)


def final_ce(runs: list[Run], statuses: dict[str, convergence.Convergence]) -> pd.DataFrame:
    """Final CE of every run with the standard error of its val CE (the convergence tolerance)."""
    return pd.DataFrame([{"run": run.label, "fraction": run.fraction,
                          "train_ce": float(run.metrics["train_eval_ce"].iloc[-1]),
                          "test_ce": float(run.metrics["val_ce"].iloc[-1]),
                          "test_ce_se": statuses[_key(run)].tolerance} for run in runs]
                        ).assign(**_status_columns(runs, statuses))


def overfit_inputs(runs: list[Run], statuses: dict[str, convergence.Convergence]) -> pd.DataFrame:
    frames = [run.metrics.assign(subset=run.label, usable=statuses[_key(run)].usable,
                                 status=statuses[_key(run)].status)
              .rename(columns={"train_eval_ce": "train_ce", "val_ce": "test_ce"}) for run in runs]
    return pd.concat(frames, ignore_index=True)[["subset", "step", "train_ce", "test_ce", "usable", "status"]]


_NO_FLOOR_LIMITS = ("Only Question-Formation data has an exact entropy floor in this pipeline; natural-text "
                    "corpora have none, so these claims need a Question-Formation experiment (or another "
                    "dataset with a computable entropy).")


def _no_floor_rows() -> list[dict[str, Any]]:
    reason = "No experiment with an exact entropy floor (only question_formation data has one)."
    return [claims.check_row(claim_id, claim, "nothing: no exact floor available", {"experiments_with_floor": 0},
                             "not-testable", reason, "data", ours_tex=r"Not testable without an entropy floor.",
                             limits=_NO_FLOOR_LIMITS)
            for claim_id, claim in (("loss_floor", "the minimum achievable cross-entropy loss is about 1"),
                                    ("overfit", "small subsets over-fit: train CE falls while test CE rises"))]


def _floor_rows(experiments: list[Experiment], statuses: dict[str, convergence.Convergence],
                sweeps: dict[str, dict[str, Any]], seed: int) -> list[dict[str, Any]]:
    with_floor = [exp for exp in experiments if exp.floor is not None and (exp.trained_runs or exp.name in sweeps)]
    if not with_floor:
        return _no_floor_rows()
    exp = with_floor[0]
    train_floor = exp.floor["train"]
    floor = float(train_floor["floor_nats_per_token"])
    floor_low = floor - float(train_floor.get("exclusion_bound_nats_per_token", 0.0))
    sweep = next((sweeps[e.name] for e in with_floor if e.name in sweeps), None)
    # E fitted on the runs that met their early-stopping rule only: a verdict rests on converged runs
    converged_fit = sweep["parametric_converged"] if sweep else None
    sweep_e = (converged_fit["E"], *sweep["E_converged_ci"]) if converged_fit else None
    trained = [run for e in with_floor for run in e.trained_runs]
    frames = [final_ce(trained, statuses)] if trained else []
    frames.append(_sweep_floor_runs(with_floor, sweeps, seed))
    rows = [claims.loss_floor(pd.concat(frames, ignore_index=True), floor, floor_low=floor_low, sweep_E=sweep_e)]
    if trained:
        return [*rows, claims.overfit(overfit_inputs(trained, statuses), floor)]
    return [*rows, claims.check_row(
        "overfit", "small subsets over-fit: train CE falls while test CE rises", "nothing: only sweep runs, which "
        "stop at their best validation CE", {"experiments_with_training_curves": 0}, "not-testable",
        "A scaling sweep stops each run when its validation CE stops improving, so it never shows the late rise; "
        "the default config (`snakemake --cores all`) trains past it.", "data", ours_tex=r"Not measured in this run.",
        limits="Needs an experiment that trains small subsets for a fixed budget (the default config does).")]


def _radius_row(runs: list[Run], statuses: dict[str, convergence.Convergence], seed: int,
                fig_dir: Path) -> dict[str, Any]:
    """The radius row plus its figure (``figures``: file name under fig_dir and caption)."""
    from assocmem.report.radius_figures import radius_trend

    nn_queries, run_info, layer_scale = radius_inputs(runs, statuses, seed)
    row = claims.radius(nn_queries, run_info, layer_scale, seed=seed)
    path, caption = radius_trend(nn_queries, run_info, fig_dir, seed=seed)
    return {**row, "figures": [{"file": path.name, "caption": caption}]}


def synthetic_layer_sets(seed: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Three random 'layers' of stored patterns and queries, for eq. (8) when no activations were dumped."""
    rng = np.random.default_rng(seed)
    sets = {f"synthetic_layer{i}": rng.normal(scale=1.0 + i, size=(64, 16)) for i in range(3)}
    return sets, rng.normal(size=(32, 16))


def _no_activations_radius() -> dict[str, Any]:
    return claims.check_row(
        "radius", "the typical pattern radius is of order sqrt(n/(2 pi e))",
        "nothing: this configuration dumps no activations (a scaling sweep only)", {"runs_with_activations": 0},
        "not-testable", "No nearest-neighbour distances: the configured experiments dump no activations. The "
        "default config (`snakemake --cores all`) measures them.", "data",
        ours_tex=r"Not measured in this run.",
        limits="Needs an experiment with activations and neighbours (any non-sweep experiment).")


def _sweep_eval_se(exp: Experiment, run: SweepRun, seed: int) -> float:
    """Standard error of a sweep run's validation CE from the evaluation sample (the dev rows as clusters)."""
    spec, train = run_settings(exp.config, run.label)
    rows = _eval_rows(str(run.model_path), str(run.store_dir), json.dumps(train, sort_keys=True),
                      json.dumps(spec, sort_keys=True), seed)
    return convergence.ratio_standard_error(*rows)[1]


def _sweep_floor_runs(experiments: list[Experiment], sweeps: dict[str, dict[str, Any]], seed: int) -> pd.DataFrame:
    """The sweep's cells on their largest training set, as loss_floor inputs: best validation CE, usable when the
    run met its early-stopping rule (its CE had stopped improving) before or at its step budget. Its standard
    error joins the two noises of a run's CE as an estimate of its expected held-out CE: the evaluation sample's
    (the dev rows as clusters, as for the default's runs) and the training seed's (the standard deviation over
    seeds pooled over the usable full-data cells; the sweep's noise at that D when no cell has two)."""
    rows = []
    for exp in experiments:
        if exp.name not in sweeps or exp.floor is None:
            continue
        analysis = sweeps[exp.name]
        cells = pd.DataFrame(analysis["cells"])
        full = cells[cells["fraction"] == cells["fraction"].max()]
        usable = full[~full["budget_limited"].astype(bool)]
        within = usable.groupby("n_params")["val_ce"].var(ddof=1).dropna()
        seed_sd = (float(np.sqrt(within.mean())) if len(within)
                   else scaling.at_d(analysis["noise"], full["n_tokens"].iloc[0]))
        runs = {(run.model, run.replicate): run for run in exp.sweep_runs if run.fraction == cells["fraction"].max()}
        for cell in full.itertuples():
            run = runs[(cell.model, cell.seed)]
            eval_se = _sweep_eval_se(exp, run, seed) if not cell.budget_limited else float("nan")
            rows.append({"run": f"sweep {run.label}/{cell.subset}", "fraction": 1.0, "train_ce": cell.train_ce,
                         "test_ce": cell.val_ce, "test_ce_se": float(np.hypot(eval_se, seed_sd)),
                         "eval_se": eval_se, "seed_sd": seed_sd, "usable": not cell.budget_limited,
                         "status": ("hit its step budget still improving" if cell.budget_limited
                                    else "converged (early-stopping rule met)")})
    return pd.DataFrame(rows)


def collect_checks(experiments: list[Experiment], report_cfg: dict[str, Any], fig_dir: Path,
                   sweeps: dict[str, dict[str, Any]] | None = None,
                   statuses: dict[str, convergence.Convergence] | None = None) -> list[dict[str, Any]]:
    """Every claim row. ``sweeps``: the scaling-sweep analyses by experiment (report.sweep.analyse_sweep); they
    decide the scaling claim and give loss_floor its second, independent estimate of the irreducible loss.
    ``statuses``: :func:`convergence_table` when the caller already has it."""
    seed = report_cfg["synthetic_seed"]
    sweeps = sweeps or {}
    all_runs = [run for exp in experiments for run in exp.runs]
    trained = [run for run in all_runs if run.trained]
    statuses = convergence_table(experiments, seed) if statuses is None else statuses
    patterns, queries = activation_sets(all_runs, report_cfg["energy_queries"], seed)
    if all_runs:
        primary = _primary_run(all_runs)
        layer_sets = {layer: np.asarray(primary.activations("train")[slot], dtype=np.float64)
                      for slot, layer in enumerate(primary.act_meta["layers"])}
        last_queries = queries[f"{primary.label}/{primary.act_meta['layers'][-1]}"]
    else:
        layer_sets, last_queries = synthetic_layer_sets(seed)
    own_scales = {(int(run.act_meta["splits"]["train"]["n_chunks"]), int(run.nn_summary["n_dim"].iloc[0]))
                  for run in all_runs}
    own = [(d, n, f"this pipeline: d = {d}, n = {n}") for d, n in sorted(own_scales)]
    rows = [
        claims.prop1(patterns, queries, seed),
        claims.prop2(patterns, queries, seed),
        claims.prop3(patterns, queries, seed),
        claims.eq8(layer_sets, last_queries),
        claims.eq12(),
        claims.lemma5([PAPER_SCALE, *own]),
        _radius_row(all_runs, statuses, seed, fig_dir) if all_runs else _no_activations_radius(),
    ]
    if trained:
        rows += [claims.prop4(prop4_inputs(trained, statuses)), claims.params(params_inputs(trained))]
    rows.append(_scaling_row(experiments, sweeps, trained, statuses))
    rows += _floor_rows(experiments, statuses, sweeps, seed)
    rows += [claims.literature(claims.read_literature_csv()), claims.fig1()]
    return rows


def _scaling_row(experiments: list[Experiment], sweeps: dict[str, dict[str, Any]], trained: list[Run],
                 statuses: dict[str, convergence.Convergence]) -> dict[str, Any]:
    if sweeps:
        name, analysis = next(iter(sweeps.items()))
        exp = next(exp for exp in experiments if exp.name == name)
        return claims.scaling_sweep(analysis, exp.floor["train"]["floor_nats_per_token"] if exp.floor else None)
    return claims.scaling(scaling_inputs(trained, statuses))


def _fig1_figure(fig_dir: Path) -> tuple[Path, str]:
    from assocmem.report import figures

    fig, caption = figures.fig1_landscapes()
    return save_figure(fig, fig_dir, "fig1_landscapes")[0], caption


def _eq12_figure(fig_dir: Path) -> tuple[Path, str]:
    from assocmem.report import figures

    fig, caption = figures.eq12_ball_integral()
    return save_figure(fig, fig_dir, "eq12_ball_integral")[0], caption


# Claim id -> function(fig_dir) -> (png path, caption); captions come from report.figures with the drawing.
FIGURES = {"fig1": _fig1_figure, "eq12": _eq12_figure}


def numbers_tables(numbers: dict[str, Any], units: dict[str, str] | None = None) -> list[str]:
    """Keys 'prefix.quantity' become one row per prefix and one column per quantity; the rest a plain list.
    Column headers carry units (``units`` by quantity name; cross-entropies are nats/token)."""
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
        by_columns.setdefault(tuple(values), []).append([prefix, *values.values()])
    for columns, rows in by_columns.items():
        tables.append(markdown_table(["set", *(quantity_header(c, units) for c in columns)], rows))
    return tables


def theory_sections(checks: list[dict[str, Any]], fig_dir: Path) -> list[Section]:
    """One section per claim (see render.claim_section for its order), then the errata. A claim's figures are
    those its row brings ({"file": name under fig_dir, "caption"}) and the one FIGURES draws for it."""
    sections = []
    for check in checks:
        figures = [(fig_dir / figure["file"], figure["caption"]) for figure in check.get("figures", [])]
        figures += [FIGURES[check["id"]](fig_dir)] if check["id"] in FIGURES else []
        tables = numbers_tables(check.get("numbers", {}), check.get("units"))
        sections.append(claim_section(check, tables, figures))
    errata = errata_section(checks)
    return sections + ([errata] if errata else [])
