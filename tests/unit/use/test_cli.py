"""`python -m assocmem sample | evaluate | tensorboard` as a researcher types them; `evaluate --params ...` stays
the pipeline's stage."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from trained_run import JOB, dev_file, run_dir, store_dir

from assocmem import cli
from assocmem.io import read_json
from assocmem.tokenstore import read_store_meta
from assocmem.use.checkpoint import load_model
from assocmem.use.evaluate import evaluate_file
from assocmem.use.vocabulary import load_vocabulary


def assocmem(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "assocmem", *map(str, args)], capture_output=True, text=True,
                          timeout=300)


def test_sample_prints_one_sequence_per_line_the_same_for_a_seed(trained) -> None:
    args = ("sample", "--model", run_dir(trained), "--n", 3, "--max-new", 12, "--seed", 5)
    first, again = assocmem(*args), assocmem(*args)
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    words = set(read_store_meta(store_dir(trained))["tokenizer"]["vocab"])
    assert len(lines) == 3 and all(0 < len(line.split()) <= 12 and set(line.split()) <= words for line in lines)
    assert again.stdout == first.stdout


def test_evaluate_prints_the_ce_with_and_without_eos(trained) -> None:
    result = assocmem("evaluate", "--model", run_dir(trained), "--file", dev_file(trained))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["model", "data", "CE", "CE"]
    assert lines[1] == "data   question.dev: 8 sequences, 96 tokens, 8 unknown words"
    model = load_model(run_dir(trained))
    expected = evaluate_file(model, load_vocabulary(store_dir(trained), model), dev_file(trained))
    assert lines[2] == f"CE     {expected['ce']:.4f} +- {expected['se']:.4f} nats/token with <eos>"
    assert lines[3].endswith(f"nats/token without <eos> ({expected['tokens'] - expected['rows']} tokens)")
    split = assocmem("evaluate", "--model", run_dir(trained) / "model.pt", "--split", "train", "--limit", 5, "--json")
    assert split.returncode == 0, split.stderr
    numbers = json.loads(split.stdout)
    assert numbers["rows"] == 5 and numbers["split"] == "train" and numbers["store"] == str(store_dir(trained))


@pytest.mark.parametrize("command", ["sample", "evaluate"])
def test_a_missing_model_exits_2_with_one_line(tmp_path, command) -> None:
    result = assocmem(command, "--model", tmp_path / "nothing.pt")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [f"assocmem {command}: error: model file not found: {tmp_path / 'nothing.pt'} "
                                          "(pass a model file, e.g. results/<exp>/train/<model>/<subset>/best.pt, "
                                          "or its run directory)"]


def test_tensorboard_writes_event_files_or_says_what_it_needs(trained, tmp_path) -> None:
    result = assocmem("tensorboard", trained, "--logdir", tmp_path / "runs")
    try:
        import tensorboardX  # noqa: F401
    except ImportError:
        assert result.returncode == 2 and len(result.stderr.splitlines()) == 1 and "tensorboardX" in result.stderr
        return
    assert result.returncode == 0 and result.stdout.splitlines() == [str(tmp_path / "runs" / "qf/train/tiny/pct100")]


def test_evaluate_with_params_is_still_the_pipeline_stage(trained, tmp_path) -> None:
    assert cli.is_user_command(["evaluate", "--model", "x"]) and cli.is_user_command(["sample"])
    stage_calls = (["evaluate", "--params", "{}"], ["evaluate", "--params={}"], ["train"], [])
    assert not any(cli.is_user_command(argv) for argv in stage_calls)
    params = {"files": {"dev": str(dev_file(trained))}, "seed": 0, "expect": {"job": JOB, "spec": {}}}
    code = cli.main(["evaluate", "--params", json.dumps(params), "--model", str(run_dir(trained) / "best.pt"),
                     "--store-dir", str(store_dir(trained)), "--out-dir", str(tmp_path)])
    sets = read_json(tmp_path / "eval.json")["sets"]
    model = load_model(run_dir(trained))
    direct = evaluate_file(model, load_vocabulary(store_dir(trained), model), dev_file(trained))
    assert code == 0 and sets["dev"]["ce"] == direct["ce"]
