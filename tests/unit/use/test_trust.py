"""Issue 39: `load_model`, `sample`, `evaluate` and `verify` refuse what the pipeline refuses: an edited token store,
a run directory copied from another commit, a model trained on a store other than the one there now."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from trained_run import dev_file, run_dir, stamp_job, store_dir

from assocmem import cli, stamps
from assocmem.errors import AssocmemError
from assocmem.trust import audit
from assocmem.use.checkpoint import load_model
from assocmem.use.vocabulary import load_vocabulary


def assocmem(capsys: pytest.CaptureFixture, *args: object) -> tuple[int, str, str]:
    """`python -m assocmem ARGS`, in this process: exit status, stdout, stderr."""
    capsys.readouterr()
    status = cli.main(list(map(str, args)))
    out, err = capsys.readouterr()
    return status, out, err


def swap_two_words(meta: Path) -> None:
    """Two words of the vocabulary swapped: the same size, every id of the two meaning the other word."""
    record = json.loads(meta.read_text())
    vocab = record["tokenizer"]["vocab"]
    vocab[-1], vocab[-2] = vocab[-2], vocab[-1]
    meta.write_text(json.dumps(record))


def restamp_with_other_code(stamp: Path) -> None:
    """The job's stamp as another commit's code writes it (a `cp -a` of its directory from another checkout)."""
    record = json.loads(stamp.read_text())
    record["code"] = "0" * 16
    stamp.write_text(json.dumps(record))


def test_an_edited_token_store_is_refused_by_evaluate_and_sample_naming_meta_json(results, capsys) -> None:
    meta = store_dir(results) / "meta.json"
    swap_two_words(meta)
    for command in (("evaluate", "--file", dev_file(results)), ("sample", "--n", 1, "--seed", 1)):
        status, out, err = assocmem(capsys, command[0], "--model", run_dir(results), *command[1:])
        assert status == 2 and out == "" and len(err.splitlines()) == 1, err
        assert f"{meta} is not the file job 'tokenize qf/data/tokens' wrote" in err
    status, out, _ = assocmem(capsys, "verify", results)
    assert status == 1 and f"{meta} is not the file job" in out


def test_a_run_directory_from_another_commit_is_refused_and_reported(results) -> None:
    stamp = run_dir(results) / "provenance.json"
    restamp_with_other_code(stamp)
    with pytest.raises(AssocmemError, match="was made by other code of stage train than this checkout's") as err:
        load_model(run_dir(results))
    assert "\n" not in str(err.value) and str(run_dir(results)) in str(err.value)
    assert stamps.scan(results) == []  # what `assocmem run` checks: Snakemake reruns a job of other code
    assert [problem.split(" was made")[0] for problem in audit(results)] == [str(run_dir(results))]


def test_a_model_built_from_a_store_that_changed_since_is_refused(results) -> None:
    """The store's job reran (a new stamp) and the run did not: the model was trained on other data."""
    tokens_stamp = store_dir(results) / "provenance.json"
    record = json.loads(tokens_stamp.read_text())
    record["params"], record["params_sha256"] = {"changed": 1}, stamps.params_digest({"changed": 1})
    tokens_stamp.write_text(json.dumps(record))
    with pytest.raises(AssocmemError, match=f"{run_dir(results)} was built from other outputs of "
                                            f"{store_dir(results)}"):
        load_model(run_dir(results))
    assert len(audit(results)) == 1


def test_a_store_the_model_was_not_trained_on_is_refused(results) -> None:
    other = results / "other" / "data" / "tokens"
    shutil.copytree(store_dir(results), other)
    stamp_job(other, "tokenize")
    model = load_model(run_dir(results))
    with pytest.raises(AssocmemError, match=f"was trained on the token store {store_dir(results)}, not on {other}: "
                                            f"pass --store {store_dir(results)}"):
        load_vocabulary(other, model, run_dir(results) / "best.pt")
    assert load_vocabulary(other, model).tokenizer.vocab_size == model.cfg.vocab_size  # no model file: no claim


def test_verify_names_a_missing_results_directory(tmp_path, capsys) -> None:
    status, _, err = assocmem(capsys, "verify", tmp_path / "nothing")
    assert status == 2 and err.strip() == f"assocmem verify: error: results directory not found: {tmp_path / 'nothing'}"
