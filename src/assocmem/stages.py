"""One function per Snakemake rule, with the rule's name: read inputs, call the module that does the work,
write outputs. Nothing here branches on the data kind after tokenization.

Each stage receives exactly the config keys that change its output (``params``), so Snakemake reruns a
stage when, and only when, one of them changes.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from assocmem import layout
from assocmem.io import load_npy, read_json, write_csv, write_json, write_parquet
from assocmem.runtime import set_threads
from assocmem.runtime.cpu_time import SetupClock

log = logging.getLogger("assocmem")


def _log_setup(stage: str, setup: SetupClock) -> None:
    """Where the stage's set-up went before its work (gpu_check.py's ``cpu`` table reads the line back)."""
    log.info(setup.message(stage))


def _trained_model(setup: SetupClock, device_spec: str, model_path: Path, expect: dict[str, Any]) -> tuple[str, Any]:
    """(device, model): a trained model loaded on its device (``activations.device``: where trained models run), the
    device's start and the load marked on the set-up clock."""
    from assocmem.runtime import resolve_device
    from assocmem.runtime.cuda_start import cuda_ready
    from assocmem.train import load_model

    device = resolve_device(device_spec, key="activations.device")
    cuda_ready(device)
    setup.mark("device")
    model = load_model(model_path, device, expect=expect)
    setup.mark("model")
    return device, model


def generate_data(params: dict[str, Any], out_dir: Path) -> str:
    """Question-Formation splits: sampled from the grammar (fitted or published weights), or McCoy's files."""
    from assocmem.qf import download, generate

    dataset = params["dataset"]
    if dataset["source"] == "generate":
        manifest = generate.generate_qf(out_dir, **generate.size_args(dataset["sizes"]), seed=params["seed"],
                                        weights=dataset["grammar_weights"])
    else:
        manifest = download.fetch_qf(dataset["download"], out_dir)
    write_json(out_dir / "manifest.json", {**manifest, "source": dataset["source"]})
    return f"{'generated' if dataset['source'] == 'generate' else 'downloaded'} the splits into {out_dir}"


def generate_fresh(params: dict[str, Any], out_dir: Path) -> str:
    """A fresh sample from the generator, distributed as the training split, for the evaluate stage."""
    from assocmem.qf import generate

    dataset = params["dataset"]
    manifest = generate.generate_fresh(out_dir, n_fresh=dataset["fresh_sequences"],
                                       **{k: v for k, v in generate.size_args(dataset["sizes"]).items()
                                          if k != "n_gen"}, seed=params["seed"], weights=dataset["grammar_weights"])
    write_json(out_dir / "manifest.json", manifest)
    return f"{manifest['lines']} fresh sequences into {out_dir}"


def generate_facts(params: dict[str, Any], out_dir: Path) -> str:
    """Memorisation facts (train and unseen) and their exact information content (information.json)."""
    from assocmem.facts.generate import FactsSpec, write_facts

    spec = FactsSpec.from_config(params["facts"])  # its seed resolved by the workflow
    record = write_facts(spec, out_dir)
    keys, info = record["keys"], record["information"]
    return (f"{spec.count} facts ({spec.key_length} x {spec.key_vocab} -> {spec.value_length} x {spec.value_vocab}), "
            f"{info['bits']:.6g} bits to store; min key distance {keys['min_distance_train']} "
            f"(asked {spec.min_key_distance})")


def evaluate(params: dict[str, Any], model: Path, store_dir: Path, out_dir: Path) -> str:
    """The model's CE, with and without <eos>, on each evaluation set (params: files, name -> path; device, the
    experiment's ``activations.device``: where trained models run)."""
    setup = SetupClock()
    from assocmem.evaluation import evaluate_files  # with it assocmem.train, which _trained_model loads with

    setup.mark("imports")
    set_threads(params["threads"])
    files = {name: Path(path) for name, path in params["files"].items()}
    _, trained = _trained_model(setup, params.get("device", "cpu"), model, params["expect"])
    _log_setup("evaluate", setup)
    sets = evaluate_files(trained, store_dir, files)
    write_json(out_dir / "eval.json", {"checkpoint": model.name, "sets": sets})
    return "; ".join(f"{name}: CE {result['ce']:.4f} +- {result['se']:.4f} over {result['rows']} sequences"
                     for name, result in sets.items())


def data_audit(params: dict[str, Any], raw_dir: Path, floor_out: Path, compare_out: Path) -> str:
    """Entropy floors of the generator and of McCoy's real files; fidelity of our data to McCoy's."""
    from assocmem.qf.audit import audit_reference
    from assocmem.qf.floor import audit_floors

    floors = audit_floors(params, raw_dir)
    write_json(floor_out, floors)
    write_json(compare_out, audit_reference(raw_dir / "question.train", params))
    return f"entropy floor of the training data {floors['train']['floor_nats_per_token']:.4f} nats/token (with <eos>)"


def tokenize(params: dict[str, Any], out_dir: Path, raw_dir: Path | None) -> str:
    """Normalise the data into the token store with its kind's tokenizer (QF files word by word, a text corpus
    with its tokenizer)."""
    from assocmem.dataset_kinds import kind_of

    kind_of(params["dataset"]).tokenize(params, out_dir, raw_dir)
    meta = read_json(out_dir / "meta.json")
    return f"vocabulary of {meta['vocab_size']} tokens into {out_dir}"


def subsets(params: dict[str, Any], store_dir: Path, out_dir: Path) -> str:
    from assocmem.subsets import make_subset

    make_subset(store_dir, params["fraction"], by=params["by"], out_dir=out_dir)
    return f"{out_dir.name}: the first {100 * params['fraction']:g}% of the training split"


def train(params: dict[str, Any], store_dir: Path, run_dir: Path) -> str:
    setup = SetupClock()
    # stacked_cli: the train_stacked_<exp> rules' entry point writes this stage's files, so its code is this stage's
    from assocmem.footprint import check_training_memory
    from assocmem.tokenstore import read_store_meta
    from assocmem.train import build_job, stacked_cli  # noqa: F401

    setup.mark("imports")
    set_threads(params["threads"])
    check_training_memory(params["train"], params["model"], read_store_meta(store_dir), params["job"])
    setup.mark("memory check")  # on a GPU it initialises torch's CUDA (the device's context comes at "device")
    # the digest of the code running (cli.run_stage): a checkpoint written by other code never resumes (issue 28)
    job = build_job(params["train"], params["model"], params["seed"], store_dir, run_dir, code=params["code"],
                    job=params["job"])
    setup.mark("data")
    summary = job.run(setup=setup)
    if not summary:  # a DDP rank other than 0
        return ""
    return (f"val CE {summary['final']['val_ce']:.3f} (best {summary['best_val_ce']:.3f} at step "
            f"{summary['best_step']}), train CE {summary['final']['train_loss']:.3f} after {summary['steps']} steps")


def activations(params: dict[str, Any], model_path: Path, store_dir: Path, out_dir: Path) -> str:
    setup = SetupClock()
    from assocmem.activations.decoder import check_decoder_activations_memory, dump_decoder_activations
    from assocmem.train import load_model  # noqa: F401 (_trained_model's: its import counts among the imports)

    setup.mark("imports")
    set_threads(params["threads"])
    acts = params["activations"]
    device, model = _trained_model(setup, acts["device"], model_path, params["expect"])
    _log_setup("activations", setup)
    check_decoder_activations_memory(model.cfg, acts, store_dir, device, params.get("label") or str(model_path))
    dump_decoder_activations(model, store_dir, out_dir,
                             heldout_split=acts["heldout_split"], n_chunks=acts["n_chunks"],
                             chunk_len=acts["chunk_len"], layers=acts["layers"], batch_size=acts["batch_size"],
                             seed=params["seed"], label=params.get("label", ""), radius_chunks=acts["radius_chunks"],
                             checkpoint=acts["checkpoint"], model_file=model_path)
    return _activation_shape(out_dir)


def _activation_shape(out_dir: Path) -> str:
    meta = read_json(out_dir / "meta.json")
    chunks = ", ".join(f"{split['n_chunks']} {name}" for name, split in meta["splits"].items())
    return f"{chunks} chunks x {len(meta['layers'])} layers x d={meta['d_model']}"


def pretrained_activations(params: dict[str, Any], store_dir: Path, out_dir: Path) -> str:
    from assocmem.activations.hf import dump_hf_activations

    set_threads(params["threads"])
    spec = {**params["pretrained"], "device": params["activations"]["device"]}
    dump_hf_activations(spec, params["activations"], params["seed"], store_dir, out_dir)
    return _activation_shape(out_dir)


def neighbours(params: dict[str, Any], act_dir: Path, out_dir: Path) -> str:
    """Self and held-out k-NN of every layer, and the radius test's searches on the last layer (distinct prefixes,
    and the final LayerNorm's gain divided out where the last layer is its output)."""
    setup = SetupClock()
    from assocmem.activations import FINAL_NORM_LAYER, final_norm_affine
    from assocmem.footprint import check_neighbours_memory
    from assocmem.knn import job_engine, search_activations, search_radius
    from assocmem.runtime.cuda_start import cuda_ready

    setup.mark("imports")
    threads = set_threads(params["threads"])
    meta = read_json(act_dir / "meta.json")
    cfg, seed = params["neighbours"], params["seed"]
    engine = job_engine(cfg, meta["splits"]["train"]["n_chunks"], meta["splits"]["heldout"]["n_chunks"],
                        meta["radius"]["n_chunks"], meta["d_model"])
    setup.mark("engine")
    cuda_ready(engine.device)
    setup.mark("device")
    check_neighbours_memory(meta, cfg, engine.device, str(act_dir))
    train, heldout = (load_npy(act_dir / f"{split}.npy", dtype="float32",
                               shape=(len(meta["layers"]), meta["splits"][split]["n_chunks"], meta["d_model"]))
                      for split in ("train", "heldout"))
    sample = load_npy(act_dir / "radius.npy", dtype="float32", shape=(1, meta["radius"]["n_chunks"], meta["d_model"]))
    setup.mark("data")
    _log_setup("neighbours", setup)
    self_df, held_df, summary = search_activations(train, heldout, meta["layers"], cfg, seed, engine)
    affine = final_norm_affine(meta) if meta["layers"][-1] == FINAL_NORM_LAYER else None
    radius, radius_numbers = search_radius(sample[0], train, meta["layers"], cfg, seed, affine, engine)
    write_parquet(out_dir / "self.parquet", self_df)
    write_parquet(out_dir / "heldout.parquet", held_df)
    write_csv(out_dir / "summary.csv", summary)
    write_parquet(out_dir / "radius.parquet", radius)
    write_json(out_dir / "radius.json", radius_numbers)
    # host-specific: apart from the science
    cpu_choice = None if engine.cpu_choice is None else engine.cpu_choice.record()
    write_json(out_dir / "timing.json", {"engine": engine.record(), "threads": threads, "cpu_engine": cpu_choice})
    last = summary[(summary["protocol"] == "self") & (summary["layer"] == meta["layers"][-1])]
    last = last[last["fraction"] == last["fraction"].max()]
    return f"mean NN distance of the last layer ({meta['layers'][-1]}) {float(last['mean'].iloc[0]):.3g}"


def _grid_runs(cfg: dict[str, Any]) -> list[Any]:
    """The runs of a grid: each model x replicate seed x subset, with its early-stopping settings."""
    from assocmem.config import run_settings
    from assocmem.sweep.cells import SweepRunSpec

    runs = []
    for model in cfg["models"]:
        train = run_settings(cfg, model)[1]
        runs += [SweepRunSpec(model, replicate, fraction, train.get("early_stopping_patience"), train["eval_interval"])
                 for replicate in range(cfg["sweep"]["seeds"]) for fraction in cfg["subsets"]["fractions"]]
    return runs


def sweep(params: dict[str, Any], results_dir: Path, out_dir: Path) -> str:
    """A scaling sweep's analyses from the train artifacts of its runs (params: experiment, its config, seed)."""
    from assocmem.sweep.analysis import analyse, to_json
    from assocmem.sweep.cells import read_cells

    exp, cfg = params["experiment"], params["config"]
    analysis = analyse(read_cells(results_dir, exp, _grid_runs(cfg)), cfg["sweep"], seed=params["seed"],
                       progress=log.info)
    write_json(out_dir / "analysis.json", to_json(analysis))
    boundary = analysis["parametric_boundary"]
    if boundary["fit"] is None:
        return f"no boundary fit: {boundary['reason']}"
    fit = boundary["fit"]
    return (f"boundary exponent b = {fit['b']:.2f}, 95% CI [{fit['b_low']:.2f}, {fit['b_high']:.2f}]; "
            f"{boundary['power_reason']}")


def memorisation(params: dict[str, Any], results_dir: Path, out_dir: Path) -> str:
    """A memorisation grid (a sweep of facts): the storage boundary N_b(D), its power and bits per parameter
    (params: experiment, its config, seed)."""
    from assocmem.knn.engine import resolve_engine
    from assocmem.memorisation.analysis import analyse, headline
    from assocmem.memorisation.cells import read_runs
    from assocmem.memorisation.patterns import grid_patterns

    exp, cfg = params["experiment"], params["config"]
    runs = _grid_runs(cfg)
    stop_at = cfg["train"]["stop_at_recall"]
    threshold = cfg["sweep"]["recall_threshold"] or stop_at
    information = read_json(layout.path(results_dir, "facts_information", exp=exp))
    outcomes = read_runs(results_dir, exp, runs)
    by_run = {f"{row['label']}/{row['subset']}": row for row in outcomes.to_dict(orient="records")}
    # the pattern distances run on torch on this engine's device: no CPU engine to time
    engine = resolve_engine(cfg.get("neighbours", {}).get("device", "auto"), "faiss")
    patterns = grid_patterns(results_dir, exp, runs, by_run, engine)
    analysis = analyse(outcomes, information, threshold, stop_at, patterns=patterns,
                       power_sims=cfg["sweep"]["power_sims"], seed=params["seed"], progress=log.info,
                       interval_threshold=cfg["sweep"]["interval_threshold"])
    write_json(out_dir / "analysis.json", analysis)
    return headline(analysis)


def report(params: dict[str, Any], results_dir: Path, out_dir: Path) -> str:
    from collections import Counter

    from assocmem.report.build import build_report
    from assocmem.runtime.blas import one_blas_thread

    with one_blas_thread():  # the report's threads are its figure writers (processes); its products are small
        build_report(params, results_dir, out_dir)
    verdicts = Counter(check["verdict"] for check in read_json(out_dir / "checks.json")["checks"])
    return f"{out_dir / 'index.html'}: " + ", ".join(f"{n} {verdict}" for verdict, n in sorted(verdicts.items()))
