"""The bad-input matrix: every malformed config fails before the first job and every damaged artifact fails
the job that reads it, each with a message that names the key or the file (and, for files, how to rebuild)."""

from __future__ import annotations

import errno
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import yaml
from conftest import ROOT, snakemake

from assocmem.errors import AssocmemError
from assocmem.io import atomic_path, save_torch

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
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize(("paths", "expected"), [(["corpus/*.txt"], "dataset.paths[0]: 'corpus/*.txt' matches no"),
                                                 ([], "dataset.paths: a local corpus needs at least one path")],
                         ids=["glob matches nothing", "no paths"])
def test_bad_corpus_paths_fail_before_any_job(tmp_path, paths, expected):
    path = tmp_path / "corpus.yaml"
    path.write_text(yaml.safe_dump(corpus_config(tmp_path, paths)))
    result = snakemake(tmp_path, "--cores", "1", config=path, check=False, timeout=120)
    assert result.returncode != 0 and expected in result.stdout + result.stderr


def test_chunk_longer_than_the_context_fails_before_any_job(tmp_path):
    (tmp_path / "doc.txt").write_text("some text\n")
    config = corpus_config(tmp_path, ["doc.txt"])
    config["experiments"]["web"]["activations"]["chunk_len"] = 64
    (tmp_path / "corpus.yaml").write_text(yaml.safe_dump(config))
    result = snakemake(tmp_path, "--cores", "1", config=tmp_path / "corpus.yaml", check=False, timeout=120)
    assert "experiments.web.activations.chunk_len: 64 exceeds the context of model tiny" in result.stderr


def assocmem_run(tmp_path: Path, config: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "assocmem", "run", "-s", str(ROOT / "Snakefile"), "--directory",
                           str(tmp_path), "--configfile", str(config), "-n"], capture_output=True, text=True,
                          timeout=120)


def test_yaml_syntax_error_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("seed: 1\nexperiments:\n  qf: {dataset: {name: question_formation}\n")
    result = assocmem_run(tmp_path, bad)
    assert result.returncode == 2 and f"config file {bad}, line 4, column 1: not valid YAML" in result.stderr


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
    path = tmp_path / "odd.yaml"
    path.write_text(yaml.safe_dump(config, allow_unicode=True))
    snakemake(tmp_path, "--cores", "1", str(Path(results_dir) / "qf" / "data" / "subsets" / "pct10" / "meta.json"),
              config=path, timeout=300)
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


ARTIFACT_CASES: list[tuple[str, str, Callable[[Path], None], tuple[str, ...], str]] = [
    ("best.pt copied from another job", "results/qf/train/tiny/pct100/best.pt", copy_from_pct10, (),
     "best.pt was written by training job 'qf/tiny/pct10', not by 'qf/tiny/pct100'"),
    ("best.pt of another architecture", "results/qf/train/tiny/pct100/best.pt",
     lambda p: edit_model(p, lambda m: m["config"].update(d_model=2 * m["config"]["d_model"])), (),
     "best.pt is not the configured model qf/tiny/pct100: d_model = "),
    ("best.pt of another run of the job", "results/qf/train/tiny/pct100/best.pt",
     lambda p: edit_model(p, lambda m: m["provenance"].update(fingerprint="0" * 64)), (),
     "best.pt does not come from the run recorded in results/qf/train/tiny/pct100/summary.json"),
    ("binary question.train", "results/qf/data/raw/question.train",
     lambda p: p.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256))), (), "question.train: not UTF-8 text"),
    ("truncated best.pt", "results/qf/train/tiny/pct100/best.pt", truncate, (),
     "cannot read model results/qf/train/tiny/pct100/best.pt: truncated or corrupt"),
    ("corrupted best.pt", "results/qf/train/tiny/pct100/best.pt", flip_bytes, (),
     "results/qf/train/tiny/pct100/best.pt"),
    ("truncated activations", "results/qf/activations/tiny/pct100/train.npy", truncate, (),
     "corrupt array file results/qf/activations/tiny/pct100/train.npy"),
    ("truncated token shard", "results/qf/data/tokens/train_00000.bin", truncate, ("--forcerun", "train"),
     "qf/data/tokens/train_00000.bin is missing or has the wrong size"),
    ("corrupted token shard", "results/qf/data/tokens/train_00000.bin", flip_bytes, ("--forcerun", "train"),
     "qf/data/tokens/train_00000.bin fails its sha256 check"),
    ("missing offsets", "results/qf/data/tokens/train.offsets.npy", lambda p: p.unlink(), ("--forcerun", "train"),
     "qf/data/tokens/train.offsets.npy is missing"),
    ("corrupt subset meta", "results/qf/data/subsets/pct100/meta.json", lambda p: p.write_text("{not json"), (),
     "corrupt JSON in results/qf/data/subsets/pct100/meta.json"),
    ("corrupt neighbour table", "results/qf/neighbours/tiny/pct100/self.parquet", truncate, (),
     "corrupt table results/qf/neighbours/tiny/pct100/self.parquet"),
]


@pytest.mark.parametrize(("target", "damage", "extra", "expected"), [case[1:] for case in ARTIFACT_CASES],
                         ids=[case[0] for case in ARTIFACT_CASES])
def test_damaged_artifact_fails_its_reader_naming_the_file(tiny_copy, target, damage, extra, expected):
    damage(tiny_copy / target)
    result = snakemake(tiny_copy, "--cores", "1", *extra, check=False, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode != 0 and expected in output, output[-3000:]
    assert "--forcerun" in output or "rerun `snakemake" in output or "Regenerate" in output  # says how to fix


@pytest.mark.parametrize(("content", "expected"), [(b"", "is empty"), (b"caf\xe9 au lait\n", "is not UTF-8 text")],
                         ids=["empty corpus file", "non-UTF-8 corpus file"])
def test_bad_corpus_file_fails_tokenize_naming_it(tmp_path, content, expected):
    (tmp_path / "doc.txt").write_bytes(content)
    (tmp_path / "corpus.yaml").write_text(yaml.safe_dump(corpus_config(tmp_path, ["doc.txt"])))
    result = snakemake(tmp_path, "--cores", "1", "results/web/data/tokens/meta.json",
                       config=tmp_path / "corpus.yaml", check=False, timeout=300)
    assert result.returncode != 0 and f"corpus file doc.txt {expected}" in result.stdout + result.stderr


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
