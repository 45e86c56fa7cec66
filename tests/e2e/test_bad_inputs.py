"""The bad-input matrix: every malformed config fails before the first job and every damaged artifact fails
the job that reads it, each with a message that names the key or the file (and, for files, how to rebuild)."""

from __future__ import annotations

import errno
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from conftest import ROOT, snakemake

from assocmem import stamps
from assocmem.config import load_config, load_schema
from assocmem.errors import AssocmemError
from assocmem.io import atomic_path, save_torch
from assocmem.report.build import build_report

pytestmark = pytest.mark.e2e


def base_config() -> dict:
    return yaml.safe_load((ROOT / "config" / "test.yaml").read_text())


def qf(config: dict) -> dict:
    return config["experiments"]["qf"]


def corpus_config(tmp_path: Path, paths: list[str]) -> dict:
    return {"experiments": {"web": {
        "dataset": {"name": "corpus", "source": "text", "paths": paths, "val_fraction": 0.2,
                    "tokenizer": {"kind": "bytelevel_bpe", "vocab_size": 300}},
        "models": {"tiny": {"n_layer": 1, "d_model": 16, "n_head": 2, "max_len": 32}},
        "train": {"block_size": 16}, "activations": {"n_chunks": 20, "chunk_len": 8}, "neighbours": {"k": 3}}}}


CONFIG_CASES: list[tuple[str, Callable[[dict], None], str]] = [
    ("unknown key", lambda c: qf(c).update(bogus=1), "experiments.qf: unknown key"),
    ("fraction > 1", lambda c: qf(c)["subsets"].update(fractions=[1.5]), "experiments.qf.subsets.fractions[0]"),
    ("negative size", lambda c: qf(c)["dataset"]["sizes"].update(train=-1), "experiments.qf.dataset.sizes.train"),
    ("no dataset name", lambda c: qf(c)["dataset"].pop("name"), "experiments.qf.dataset: missing required key"),
    ("wrong type", lambda c: qf(c)["train"].update(lr="fast"), "experiments.qf.train.lr"),
    ("subset holds no sequence", lambda c: qf(c)["subsets"].update(fractions=[0.0001]),
     "experiments.qf.subsets.fractions[0]: 0.0001 of the 2000 training sequences"),
    ("k >= n_chunks", lambda c: qf(c)["neighbours"].update(k=500), "experiments.qf.neighbours.k"),
    ("neighbour fraction too small", lambda c: qf(c)["neighbours"].update(fractions=[0.01, 1.0]),
     "experiments.qf.neighbours.fractions[0]"),
    ("missing reference_dev", lambda c: qf(c)["dataset"].update(reference_dev="no/such/question.dev"),
     "experiments.qf.dataset.reference_dev: file no/such/question.dev does not exist"),
    ("n_head does not divide d_model", lambda c: qf(c)["models"]["tiny"].update(n_head=3),
     "experiments.qf.models.tiny.n_head"),
    ("micro batch does not divide", lambda c: qf(c)["train"].update(micro_batch_size=5),
     "experiments.qf.train.micro_batch_size"),
    ("bad device", lambda c: qf(c)["train"].update(device="tpu"), "experiments.qf.train.device"),
    ("seed beyond 2^32", lambda c: c.update(seed=2**70), "seed: 1180591620717411303424 is greater than the maximum"),
    # names become paths and wildcards: shell syntax in one is refused before anything runs (issue 28)
    ("model name with shell syntax", lambda c: qf(c)["models"].update({"x;touch PWNED": qf(c)["models"].pop("tiny")}),
     "experiments.qf.models: 'x;touch PWNED' does not match '^[A-Za-z0-9_]+$'"),
    # issue 39: results_dir '/' wrote /qf, /report and /logs
    ("results_dir is the root", lambda c: c.update(results_dir="/"),
     "assocmem: results_dir: '/' is the file system's root"),
    ("experiment name with $( )", lambda c: c["experiments"].update({"q$(touch PWNED)": c["experiments"].pop("qf")}),
     "experiments: 'q$(touch PWNED)' does not match '^[A-Za-z0-9_]+$'"),
]


@pytest.mark.parametrize(("mutate", "expected"), [case[1:] for case in CONFIG_CASES],
                         ids=[case[0] for case in CONFIG_CASES])
def test_bad_config_fails_before_any_job(tmp_path, mutate, expected):
    config = base_config()
    mutate(config)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config))
    result = snakemake(tmp_path, "--cores", "1", config=path, check=False, timeout=120)
    assert result.returncode != 0 and expected in result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize(("paths", "expected"), [(["corpus/*.txt"], "dataset.paths[0]: 'corpus/*.txt' matches no"),
                                                 ([], "dataset.paths: a local corpus needs at least one path")],
                         ids=["glob matches nothing", "no paths"])
def test_bad_corpus_paths_fail_before_any_job(tmp_path, paths, expected):
    path = tmp_path / "corpus.yaml"
    path.write_text(yaml.safe_dump(corpus_config(tmp_path, paths)))
    result = snakemake(tmp_path, "--cores", "1", config=path, check=False, timeout=120)
    assert result.returncode != 0 and expected in result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr


def test_chunk_longer_than_the_context_fails_before_any_job(tmp_path):
    (tmp_path / "doc.txt").write_text("some text\n")
    config = corpus_config(tmp_path, ["doc.txt"])
    config["experiments"]["web"]["activations"]["chunk_len"] = 64
    (tmp_path / "corpus.yaml").write_text(yaml.safe_dump(config))
    result = snakemake(tmp_path, "--cores", "1", config=tmp_path / "corpus.yaml", check=False, timeout=120)
    assert "experiments.web.activations.chunk_len: 64 exceeds the context of model tiny" in result.stderr
    assert result.returncode != 0 and "Traceback" not in result.stdout + result.stderr


def assocmem_run(tmp_path: Path, config: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "assocmem", "run", "-s", str(ROOT / "Snakefile"), "--directory",
                           str(tmp_path), "--configfile", str(config), "-n"], capture_output=True, text=True,
                          timeout=120)


def test_yaml_syntax_error_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("seed: 1\nexperiments:\n  qf: {dataset: {name: question_formation}\n")
    result = assocmem_run(tmp_path, bad)
    assert result.returncode == 2 and f"config file {bad}, line 4, column 1: not valid YAML" in result.stderr
    assert "Traceback" not in result.stderr


def _test_yaml_text() -> str:
    return (ROOT / "config" / "test.yaml").read_text()


# Files Snakemake would load without complaint (keeping the last duplicate, evaluating a template): the workflow and
# `assocmem run` refuse them before any job, naming the file and, for a duplicate, its line.
STRICT_YAML_CASES = [
    ("duplicate key", lambda text: text + "seed: 99\n", "duplicate key 'seed'"),
    ("YTE template", lambda text: "__use_yte__: true\n" + text, "__use_yte__ makes Snakemake evaluate the file"),
]


@pytest.mark.parametrize(("edit", "expected"), [case[1:] for case in STRICT_YAML_CASES],
                         ids=[case[0] for case in STRICT_YAML_CASES])
def test_config_files_are_read_strictly_by_the_workflow_and_by_assocmem_run(tmp_path, edit, expected):
    path = tmp_path / "bad.yaml"
    path.write_text(edit(_test_yaml_text()))
    for result in (snakemake(tmp_path, "-n", config=path, check=False, timeout=120), assocmem_run(tmp_path, path)):
        output = result.stdout + result.stderr
        assert result.returncode != 0 and expected in output and f"config file {path}" in output
        assert "Traceback" not in output
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize(("content", "expected"),
                         [("- 1\n- 2\n", "the top level must be a mapping of keys, not a list"),
                          (None, "is not a file (a directory?)")], ids=["a list", "a directory"])
def test_a_config_that_is_no_mapping_is_named(tmp_path, content, expected):
    path = tmp_path / "bad.yaml"
    if content is None:
        path.mkdir()
    else:
        path.write_text(content)
    result = assocmem_run(tmp_path, path)
    assert result.returncode == 2 and result.stderr.strip() == f"assocmem run: error: config file {path}" \
        f"{': ' if content else ' '}{expected}"


@pytest.mark.parametrize("results_dir", ["r;touch PWNED;x", "r$(touch PWNED)", "with space's \"quotes\" ü"],
                         ids=["semicolon", "command substitution", "space, quotes, unicode"])
def test_results_dir_reaches_the_shell_as_a_path_never_as_a_command(tmp_path, results_dir):
    """Issue 28: every path reaches the shell quoted, so a results_dir with shell syntax is just a directory name."""
    config = base_config()
    config["results_dir"] = results_dir
    config["report"] = {"title": f"a title with {results_dir} in it: '$(touch PWNED)'; touch PWNED"}
    path = tmp_path / "odd.yaml"
    path.write_text(yaml.safe_dump(config, allow_unicode=True))
    # the report's command carries the title and every stamp path; the semicolon case runs everything
    target = "report/index.html" if ";" in results_dir else "qf/data/subsets/pct10/meta.json"
    snakemake(tmp_path, "--cores", "1", str(Path(results_dir) / target), config=path, timeout=300)
    assert not list(tmp_path.rglob("PWNED")) and not (ROOT / "PWNED").exists()
    assert (tmp_path / results_dir / "qf" / "data" / "tokens" / "meta.json").is_file()


def test_missing_configfile_is_one_line(tmp_path):
    result = assocmem_run(tmp_path, tmp_path / "nope.yaml")
    assert result.returncode == 2 and result.stderr.strip() == f"assocmem run: error: config file not found: " \
                                                                f"{tmp_path / 'nope.yaml'}"


# ------------------------------------------------------------------ damaged artifacts: the job that reads one fails


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def flip_bytes(path: Path) -> None:
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 64] = bytes(b ^ 0xA5 for b in data[middle:middle + 64])
    path.write_bytes(bytes(data))


def edit_model(path: Path, edit: Callable[[dict], None]) -> None:
    """Rewrite a model file with ``edit`` applied to its payload (a foreign or stale model stand-in)."""
    payload = torch.load(path, map_location="cpu", weights_only=True)
    edit(payload)
    save_torch(path, payload)


def copy_from_pct10(path: Path) -> None:
    path.write_bytes((path.parent.parent / "pct10" / path.name).read_bytes())


def copy_run_from_pct10(path: Path) -> None:
    """Replace a job's whole directory, stamp included, with another job's (a consistent copy of the wrong job;
    new file times, as `cp -r` gives)."""
    shutil.rmtree(path.parent)
    shutil.copytree(path.parent.parent / "pct10", path.parent, copy_function=shutil.copy)


def restamp_with_other_settings(stamp: Path) -> None:
    """A job directory brought over from a run whose config differed (here: k) for this very job."""
    record = json.loads(stamp.read_text())
    record["params"]["neighbours"]["k"] += 1
    record["params_sha256"] = stamps.params_digest(record["params"])
    stamp.write_text(json.dumps(record))


def set_nan(path: Path) -> None:
    """One value of an activation array NaN; the file stays a valid .npy of the same shape and dtype."""
    array = np.load(path)
    array[0, 0, 0] = np.nan
    np.save(path, array)


def cut_mid_row(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-10])


def drop_last_row(path: Path) -> None:
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:-1]))


def as_written_by_its_job(damage: Callable[[Path], None]) -> Callable[[Path], None]:
    """``damage``, then the file's entry in its job's provenance stamp (where there is one) made to match, as if the
    job had written it so (a diverged model, a writer's bug): the reader's own check must find it."""
    def apply(path: Path) -> None:
        damage(path)
        stamp = path.parent / "provenance.json"
        if stamp.is_file():
            record = json.loads(stamp.read_text())
            record["files"][path.name] = stamps.file_entry(path)
            stamp.write_text(json.dumps(record))
    return apply


ARTIFACT_CASES: list[tuple[str, str, Callable[[Path], None], tuple[str, ...], str]] = [
    ("best.pt copied from another job", "results/qf/train/tiny/pct100/best.pt", copy_from_pct10, (),
     "pct100/best.pt is not the file job 'train qf/train/tiny/pct100' wrote"),
    ("run directory copied from another job", "results/qf/train/tiny/pct100/best.pt", copy_run_from_pct10, (),
     "pct100 holds the outputs of job 'train qf/train/tiny/pct10', not of 'train qf/train/tiny/pct100'"),
    ("activations directory copied from another job", "results/qf/activations/tiny/pct100/meta.json",
     copy_run_from_pct10, (), "holds the outputs of job 'activations qf/activations/tiny/pct10'"),
    ("hand-edited question.train", "results/qf/data/raw/question.train",
     lambda p: p.write_text(p.read_text().replace(" . ", " , ", 1)), (),
     "question.train is not the file job 'generate_data qf/data/raw' wrote"),
    ("corrupt stamp", "results/qf/activations/tiny/pct100/provenance.json", lambda p: p.write_text("{not json"), (),
     "corrupt JSON in results/qf/activations/tiny/pct100/provenance.json"),
    ("best.pt of another architecture", "results/qf/train/tiny/pct100/best.pt",
     lambda p: edit_model(p, lambda m: m["config"].update(d_model=2 * m["config"]["d_model"])), (),
     "pct100/best.pt is not the file job 'train qf/train/tiny/pct100' wrote"),
    ("best.pt of another run of the job", "results/qf/train/tiny/pct100/best.pt",
     lambda p: edit_model(p, lambda m: m["provenance"].update(fingerprint="0" * 64)), (),
     "pct100/best.pt is not the file job 'train qf/train/tiny/pct100' wrote"),
    ("binary question.train", "results/qf/data/raw/question.train",
     lambda p: p.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256))), (),
     "question.train is not the file job 'generate_data qf/data/raw' wrote"),
    ("truncated best.pt", "results/qf/train/tiny/pct100/best.pt", truncate, (),
     "pct100/best.pt is not the file job 'train qf/train/tiny/pct100' wrote"),
    ("corrupted best.pt", "results/qf/train/tiny/pct100/best.pt", flip_bytes, (),
     "results/qf/train/tiny/pct100/best.pt"),
    ("truncated activations", "results/qf/activations/tiny/pct100/train.npy", truncate, (),
     "pct100/train.npy is not the file job 'activations qf/activations/tiny/pct100' wrote"),
    ("truncated token shard", "results/qf/data/tokens/train_00000.bin", truncate, ("--forcerun", "train"),
     "qf/data/tokens/train_00000.bin is missing or has the wrong size"),
    ("corrupted token shard", "results/qf/data/tokens/train_00000.bin", flip_bytes, ("--forcerun", "train"),
     "qf/data/tokens/train_00000.bin fails its sha256 check"),
    ("missing offsets", "results/qf/data/tokens/train.offsets.npy", lambda p: p.unlink(), ("--forcerun", "train"),
     "qf/data/tokens/train.offsets.npy is missing"),
    ("corrupt subset meta", "results/qf/data/subsets/pct100/meta.json", lambda p: p.write_text("{not json"), (),
     "pct100/meta.json is not the file job 'subsets qf/data/subsets/pct100' wrote"),
    ("corrupt neighbour table", "results/qf/neighbours/tiny/pct100/self.parquet", truncate, (),
     "pct100/self.parquet is not the file job 'neighbours qf/neighbours/tiny/pct100' wrote"),
    # written so by the job itself (its stamp agrees): the reader's own checks refuse it (issue 28)
    ("NaN in activations", "results/qf/activations/tiny/pct100/train.npy", as_written_by_its_job(set_nan), (),
     "results/qf/activations/tiny/pct100/train.npy: 1 of 15360 values are not finite (NaN or inf)"),
    ("summary.csv cut mid-row", "results/qf/neighbours/tiny/pct100/summary.csv", as_written_by_its_job(cut_mid_row),
     ("--forcerun", "report"), "results/qf/neighbours/tiny/pct100/summary.csv is cut mid-row"),
    ("summary.csv without its last row", "results/qf/neighbours/tiny/pct100/summary.csv",
     as_written_by_its_job(drop_last_row), ("--forcerun", "report"),
     "results/qf/neighbours/tiny/pct100/summary.csv has 11 rows, expected 12 (4 layers x (2 self fractions + "
     "held-out)"),
]


@pytest.mark.parametrize(("target", "damage", "extra", "expected"), [case[1:] for case in ARTIFACT_CASES],
                         ids=[case[0] for case in ARTIFACT_CASES])
def test_damaged_artifact_fails_its_reader_naming_the_file(tiny_copy, target, damage, extra, expected):
    damage(tiny_copy / target)
    result = snakemake(tiny_copy, "--cores", "1", *extra, check=False, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode != 0 and expected in output, output[-3000:]
    assert "Traceback" not in output, output[-3000:]  # the job's log holds one line naming the file
    assert "--forcerun" in output or "rerun `snakemake" in output or "Regenerate" in output  # says how to fix
    # issue 39: the hint repeats the command that was run (its --configfile), and the job's command is printed once
    hints = [part.split("`")[0] for part in output.split("rerun `")[1:]]
    assert all(f"--configfile {ROOT / 'config' / 'test.yaml'}" in hint for hint in hints), hints
    assert "returned non-zero exit status" not in output


def drop_last_parquet_row(path: Path) -> None:
    pd.read_parquet(path).iloc[:-1].to_parquet(path, index=False)


SHORTENED_TABLES = [
    ("qf/train/tiny/pct100/metrics.csv", drop_last_row,
     "has 2 rows, expected 3 (an evaluation every 20 steps and at the last of the 60 steps in "),
    ("qf/train/tiny/pct10/eval_rows.parquet", drop_last_parquet_row,
     "has 31 rows, expected 32 (the validation rows recorded in "),
    ("qf/neighbours/tiny/pct10/self.parquet", drop_last_parquet_row,
     "has 3599 rows, expected 3600 (5 neighbours of the self-search queries of 120 chunks at fractions [0.5, 1.0] x 4 "
     "layers"),
    ("qf/neighbours/tiny/pct100/summary.csv", drop_last_row, "has 11 rows, expected 12 ("),
]


@pytest.mark.parametrize(("table", "damage", "expected"), SHORTENED_TABLES, ids=[t[0] for t in SHORTENED_TABLES])
def test_a_shortened_table_fails_the_report_on_its_own(tiny_copy, table, damage, expected):
    """The report built directly (no provenance stamp checked first): each table it reads is held to the rows its
    producer wrote, and a shortened one is refused naming it, instead of changing a figure."""
    config = load_config(ROOT / "config" / "test.yaml", load_schema(ROOT / "workflow" / "schemas" /
                                                                      "config.schema.yaml"))
    results = tiny_copy / "results"
    damage(results / table)
    with pytest.raises(AssocmemError) as err:
        build_report({"config": config, "report": config["report"]}, results, tiny_copy / "report")
    message = str(err.value)
    assert message.startswith(f"{results / table} {expected}") and "damaged or cut; delete" in message, message


@pytest.mark.parametrize(("content", "expected"), [(b"", "is empty"), (b"caf\xe9 au lait\n", "is not UTF-8 text")],
                         ids=["empty corpus file", "non-UTF-8 corpus file"])
def test_bad_corpus_file_fails_tokenize_naming_it(tmp_path, content, expected):
    (tmp_path / "doc.txt").write_bytes(content)
    (tmp_path / "corpus.yaml").write_text(yaml.safe_dump(corpus_config(tmp_path, ["doc.txt"])))
    result = snakemake(tmp_path, "--cores", "1", "results/web/data/tokens/meta.json",
                       config=tmp_path / "corpus.yaml", check=False, timeout=300)
    assert result.returncode != 0 and f"corpus file doc.txt {expected}" in result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr


def test_full_disk_is_named_and_leaves_no_file(tmp_path, monkeypatch):
    def no_space(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("assocmem.io.os.replace", no_space)
    with (pytest.raises(AssocmemError, match=r"no space left on the device while writing .*out\.json"),
          atomic_path(tmp_path / "out.json") as tmp):
        tmp.write_text("{}")
    assert list(tmp_path.iterdir()) == []


def test_torch_full_disk_message_is_translated(tmp_path, monkeypatch):
    def fails(*_args, **_kwargs):
        raise RuntimeError("[enforce fail at inline_container.cc:778] . unexpected pos 195136 vs 195024")

    monkeypatch.setattr("torch.save", fails)
    with pytest.raises(AssocmemError, match=r"no space left on the device while writing .*model\.pt"):
        save_torch(tmp_path / "model.pt", {"x": 1})
    assert list(tmp_path.iterdir()) == []


def test_checkpoints_swapped_with_mv_are_found_before_any_job(tiny_copy):
    """`mv` keeps the files' times, so Snakemake sees nothing to redo (and would rebuild from the wrong model
    once anything else made it rerun): `assocmem run` and `assocmem verify` name both files; a forced reader
    refuses them."""
    train = tiny_copy / "results" / "qf" / "train" / "tiny"
    held = train / "held.pt"  # best.pt: the checkpoint evaluate and activations read
    (train / "pct100" / "best.pt").rename(held)
    (train / "pct10" / "best.pt").rename(train / "pct100" / "best.pt")
    held.rename(train / "pct10" / "best.pt")
    run = [sys.executable, "-m", "assocmem"]
    verify = subprocess.run([*run, "verify", "results"], cwd=tiny_copy, capture_output=True, text=True, check=False)
    assert verify.returncode == 1 and verify.stdout.count("is not the file job 'train qf/train/tiny/") == 2
    refused = subprocess.run([*run, "run", "-s", str(ROOT / "Snakefile"), "--configfile",
                              str(ROOT / "config" / "test.yaml"), "--cores", "1"], cwd=tiny_copy, capture_output=True,
                             text=True, check=False)
    assert refused.returncode != 0 and "2 output(s) under" in refused.stderr, refused.stderr[-2000:]
    assert "Traceback" not in refused.stderr and "pct10/best.pt" in refused.stderr
    forced = snakemake(tiny_copy, "--cores", "1", "--forcerun", "evaluate", check=False, timeout=300)
    output = forced.stdout + forced.stderr
    assert forced.returncode != 0 and "is not the file job 'train qf/train/tiny/pct100'" in output


def test_a_job_directory_made_with_other_settings_runs_again(tiny_copy):
    """A job directory brought over from a run whose config differed for this very job (with its times, so
    Snakemake's records call it up to date): its stamp says so, and the job runs again with this config's settings
    before the report reads it (a report job forced alone reads it only after that)."""
    stamp = tiny_copy / "results" / "qf" / "neighbours" / "tiny" / "pct100" / "provenance.json"
    restamp_with_other_settings(stamp)
    result = snakemake(tiny_copy, "--cores", "1", "--forcerun", "report")
    assert "results/qf/neighbours/tiny/pct100 (other settings)" in result.stderr
    assert json.loads(stamp.read_text())["params"]["neighbours"]["k"] == 5
    assert "Nothing to be done" in snakemake(tiny_copy, "--cores", "1", "-n").stdout


def test_a_job_directory_copied_with_its_times_is_found_before_any_job(tiny_copy):
    """`cp -a` of another job's directory keeps its times: Snakemake reruns nothing; `assocmem verify` names it."""
    activations = tiny_copy / "results" / "qf" / "activations" / "tiny"
    shutil.rmtree(activations / "pct100")
    shutil.copytree(activations / "pct10", activations / "pct100")
    assert "Nothing to be done" in snakemake(tiny_copy, "--cores", "1", "-n").stdout
    verify = subprocess.run([sys.executable, "-m", "assocmem", "verify", "results"], cwd=tiny_copy,
                            capture_output=True, text=True, check=False)
    assert verify.returncode == 1 and "pct100 holds the outputs of job 'activations qf/activations/tiny/pct10'" in (
        verify.stdout)


def test_evaluate_and_verify_refuse_what_the_pipeline_refuses(tiny_copy, capsys):
    """Issue 39, on the pipeline's own stamps (tokenize -> subsets -> train): two words swapped in the store's
    meta.json are refused by `evaluate` naming the file (it scored CE 3.46 instead of 2.85), and a run directory
    whose stamp says another commit's code made it is reported by `verify` and refused by `evaluate`."""
    from assocmem import cli

    results = tiny_copy / "results"
    meta, run = results / "qf/data/tokens/meta.json", results / "qf/train/tiny/pct100"
    original = meta.read_text()
    record = json.loads(original)
    vocab = record["tokenizer"]["vocab"]
    vocab[-1], vocab[-2] = vocab[-2], vocab[-1]
    meta.write_text(json.dumps(record))
    evaluate = ["evaluate", "--model", str(run), "--file", str(results / "qf/data/raw/question.dev")]
    assert cli.main(evaluate) == 2
    assert f"{meta} is not the file job 'tokenize qf/data/tokens' wrote" in capsys.readouterr().err
    meta.write_text(original)
    stamp = json.loads((run / "provenance.json").read_text())
    (run / "provenance.json").write_text(json.dumps({**stamp, "code": "0" * 16}))
    assert cli.main(["verify", str(results)]) == 1
    assert f"{run} was made by other code of stage train" in capsys.readouterr().out
    assert cli.main(evaluate) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and f"{run} was made by other code of stage train" in err
