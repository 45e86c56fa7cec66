"""assocmem.load_model: a model file or a run directory, read with weights_only=True, its weights and (inside a
results directory) its job and run checked; `import assocmem` stays cheap."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest
import torch
from trained_run import run_dir

import assocmem
from assocmem.codehash import PACKAGE_DIR
from assocmem.errors import AssocmemError
from assocmem.io import read_json, write_json
from assocmem.model import DecoderLM
from assocmem.use.checkpoint import load_model


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    first, second = a.state_dict(), b.state_dict()
    return first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)


def one_line_naming(err: pytest.ExceptionInfo, path) -> bool:
    return str(path) in str(err.value) and "\n" not in str(err.value)


def test_a_run_directory_loads_its_best_pt_in_eval_mode(trained) -> None:
    from_dir = assocmem.load_model(run_dir(trained))
    from_file = load_model(run_dir(trained) / "best.pt")
    final = assocmem.load_model(run_dir(trained) / "model.pt")
    assert isinstance(from_dir, DecoderLM) and not from_dir.training and not final.training
    assert same_weights(from_dir, from_file) and not same_weights(from_dir, final)
    tokens = torch.tensor([[2, 5, 7]])
    assert torch.equal(from_dir(tokens), from_file(tokens))
    assert assocmem.load_model is load_model and "load_model" in dir(assocmem)


def test_a_model_file_outside_a_results_directory_has_its_weights_checked_only(trained, tmp_path) -> None:
    copy = tmp_path / "mine" / "best.pt"
    copy.parent.mkdir()
    shutil.copy(run_dir(trained) / "best.pt", copy)
    assert same_weights(load_model(copy), load_model(run_dir(trained)))


def test_changed_weights_are_refused_naming_the_file(results, tmp_path) -> None:
    """Inside a results directory the job's stamp refuses the file; outside, its own weights digest does."""
    path = run_dir(results) / "best.pt"
    payload = torch.load(path, weights_only=True)
    payload["model"]["tok_emb.weight"][0, 0] += 1e-3
    torch.save(payload, path)
    with pytest.raises(AssocmemError, match="is not the file job 'train qf/train/tiny/pct100' wrote") as err:
        load_model(run_dir(results))
    assert one_line_naming(err, path)
    elsewhere = tmp_path / "best.pt"
    shutil.copy(path, elsewhere)
    with pytest.raises(AssocmemError, match="fails its sha256 check") as err:
        load_model(elsewhere)
    assert one_line_naming(err, elsewhere)


def test_a_model_file_swapped_into_another_run_is_refused(results) -> None:
    other = run_dir(results).parent / "pct10"
    shutil.copytree(run_dir(results), other)
    with pytest.raises(AssocmemError, match="holds the outputs of job 'train qf/train/tiny/pct100', not of 'train "
                                            "qf/train/tiny/pct10'") as err:
        load_model(other)
    assert one_line_naming(err, other)
    (other / "provenance.json").unlink()  # no stamp: the job did not finish, or the stamp was deleted
    with pytest.raises(AssocmemError, match="missing provenance stamp .*pct10/provenance.json: its job did not"):
        load_model(other)
    summary = run_dir(results) / "summary.json"
    write_json(summary, {**read_json(summary), "fingerprint": "0" * 64})  # the run that wrote it is another one
    with pytest.raises(AssocmemError, match="summary.json is not the file job 'train qf/train/tiny/pct100' wrote"):
        load_model(run_dir(results) / "model.pt")


@pytest.mark.parametrize("name", ["missing.pt", "empty_run", "half.pt"])
def test_bad_paths_give_one_line_errors_naming_them(results, name) -> None:
    path = run_dir(results) / name
    if name == "empty_run":
        path.mkdir()
    if name == "half.pt":
        data = (run_dir(results) / "best.pt").read_bytes()
        path.write_bytes(data[: len(data) // 2])
    with pytest.raises(AssocmemError) as err:
        load_model(path)
    assert one_line_naming(err, path)


def test_importing_assocmem_stays_cheap() -> None:
    code = "import sys, assocmem; print(sorted(m for m in ('torch', 'numpy', 'assocmem.use') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_no_module_of_the_package_uses_the_lazy_export() -> None:
    """assocmem/__init__.py names its lazy exports relatively, so no stage's code digest (assocmem.codehash)
    follows them: that is right only while no stage's code uses them."""
    pattern = re.compile(r"from assocmem import [^\n]*\bload_model\b|\bassocmem\.load_model\b")
    users = [path.relative_to(PACKAGE_DIR).as_posix() for path in PACKAGE_DIR.rglob("*.py")
             if path.name != "__init__.py" and pattern.search(path.read_text(encoding="utf-8"))]
    users = [user for user in users if not user.startswith("use/")]
    assert users == []
