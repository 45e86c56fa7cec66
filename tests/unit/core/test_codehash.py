"""A cached result is valid only for the code that made it: every rule carries the digest of its stage's code
(assocmem.codehash), so changing that code reruns the job and its dependants, and nothing else."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT

from assocmem import codehash
from assocmem.codehash import PACKAGE_DIR, code_digest, module_closure, stage_files
from assocmem.errors import AssocmemError

RULES = sorted({name for path in (ROOT / "workflow" / "rules").glob("*.smk")
                for name in re.findall(r"^rule (\w+):", path.read_text(), flags=re.M)})


def relative(stage: str, root: Path = PACKAGE_DIR) -> set[str]:
    return {path.relative_to(root).as_posix() for path in stage_files(stage, root)}


def test_every_rule_has_a_stage_function_and_a_digest():
    assert {"train", "report", "generate_data", "neighbours"} <= set(RULES)
    digests = {rule: code_digest(rule) for rule in RULES}
    assert all(re.fullmatch(r"[0-9a-f]{16}", d) for d in digests.values())
    assert len(set(digests.values())) == len(digests)  # each stage runs different code
    with pytest.raises(AssocmemError, match="no stage function 'nonexistent'"):
        code_digest("nonexistent")


def test_a_stage_covers_what_it_imports_and_nothing_else():
    train = relative("train")
    assert {"train/loop.py", "train/files.py", "model.py", "tokenstore.py", "io.py", "cli.py", "__main__.py",
            "__init__.py"} <= train
    # the stacked rules run their own entry point and write the train stage's files (stamped with its digest)
    assert {"train/stacked_cli.py", "train/stacked.py", "train/stacked_model.py",
            "train/stacked_checkpoint.py"} <= train
    assert not any(name.startswith(("report/", "qf/", "corpus/")) for name in train)
    # a module named only in a string (importlib.resources) brings its package's data files
    assert {"data/qf_fitted_grammar.json", "qf/generate.py", "qf/weights.py"} <= relative("generate_data")
    report = relative("report")
    assert {"report/build.py", "sweep/laws.py", "data/literature.csv"} <= report
    assert not any(name.startswith(("knn/", "train/", "model.py")) for name in report)
    assert any(name.startswith("report/assets/katex/") for name in report)
    # imports inside functions are followed, and every import brings its parent packages
    closure = module_closure(["assocmem.report.build"])
    assert {"assocmem", "assocmem.report", "assocmem.theory"} <= closure.keys()


def copy_package(tmp_path: Path) -> Path:
    root = tmp_path / "assocmem"
    shutil.copytree(PACKAGE_DIR, root, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def changed_stages(root: Path, edit) -> set[str]:
    before = {rule: code_digest(rule, root) for rule in RULES}
    edit(root)
    return {rule for rule in RULES if code_digest(rule, root) != before[rule]}


def append(relpath: str, text: str = "\n# changed\n"):
    return lambda root: (root / relpath).write_text((root / relpath).read_text() + text)


def test_a_change_moves_exactly_the_digests_of_the_stages_that_run_it(tmp_path):
    root = copy_package(tmp_path)
    assert changed_stages(root, append("report/render.py")) == {"report"}
    assert changed_stages(root, append("model.py")) >= {"train", "activations"}
    # the report reads artifacts: it neither trains nor searches, so trainer, model and k-NN code never rerun it
    for code in ("model.py", "train/loop.py", "knn/exact.py"):
        assert not {"report", "generate_data"} & changed_stages(root, append(code)), code
    assert changed_stages(root, append("data/qf_fitted_grammar.json", " ")) >= {"generate_data"}
    everything = changed_stages(root, append("cli.py"))
    assert everything == set(RULES)
    # cli stamps and logs every job with what it imports at its top; its commands' lazy imports run no stage
    for code in ("stamps.py", "progress.py", "runtime/cpu_time.py"):
        assert changed_stages(root, append(code)) == set(RULES), code
    assert changed_stages(root, append("use/cli.py")) == set()

    def edit_subsets_stage(root: Path) -> None:
        text = (root / "stages.py").read_text()
        head, tail = text.split("def subsets(", 1)
        (root / "stages.py").write_text(head + "def subsets(" + tail.replace("make_subset(", "make_subset( ", 1))
    assert changed_stages(root, edit_subsets_stage) == {"subsets"}


def test_a_stage_helper_in_the_stages_module_is_the_code_of_the_stages_that_call_it(tmp_path):
    """A helper of ``assocmem.stages`` is part of every stage that calls it (directly or through another helper)
    and of no other: halving a model's weights in ``_trained_model`` once changed no digest, and evaluate and
    activations kept their results."""
    root = copy_package(tmp_path)

    def edit(helper: str, old: str, new: str):
        def apply(root: Path) -> None:
            text = (root / "stages.py").read_text()
            head, tail = text.split(f"def {helper}(", 1)
            assert old in tail
            (root / "stages.py").write_text(head + f"def {helper}(" + tail.replace(old, new, 1))
        return apply

    assert changed_stages(root, edit("_trained_model", "load_model(", "load_model( ")) == {"evaluate", "activations"}
    assert changed_stages(root, edit("_grid_runs", "runs = []", "runs = [] ")) == {"sweep", "memorisation"}
    assert changed_stages(root, append("stages.py")) == set()  # a comment after the last function
    assert changed_stages(root, append("stages.py", "\nlogging.disable()\n")) == set(RULES)  # runs at import
    rebound = changed_stages(root, append("stages.py", "\nlog = logging.getLogger('other')\n"))  # a 2nd binding
    assert {"evaluate", "neighbours", "sweep"} <= rebound and not {"train", "report"} & rebound
    # a local name that is also a stage's name (``train = ...`` in _grid_runs) is not that stage
    assert changed_stages(root, edit("train", 'setup.mark("imports")', 'setup.mark( "imports")')) == {"train"}


def test_modules_a_module_lists_at_run_time_are_its_code(tmp_path):
    """The report imports its claim modules by listing its package (``pkgutil.iter_modules``), not by import
    statements: each of them, what they import, and a claim module added later are the report's code."""
    report = relative("report")
    claims = {path.relative_to(PACKAGE_DIR).as_posix() for path in (PACKAGE_DIR / "report" / "claims").glob("*.py")}
    assert claims <= report
    assert {"theory/loss_bound.py", "theory/global_energy.py", "report/radius_power.py"} <= report
    root = copy_package(tmp_path)
    assert changed_stages(root, append("report/claims/energy.py")) == {"report"}
    assert changed_stages(root, lambda r: (r / "report" / "claims" / "new_claim.py").write_text("X = 1\n")) == {
        "report"}


def test_every_module_the_report_stage_imports_is_in_its_digest():
    """What the report's code loads when it builds its claims is what its digest covers (a module loaded and not
    digested is code whose change leaves the report stale)."""
    script = ("import sys; from assocmem.report.build import build_report; "
              "from assocmem.report.claims.registry import all_claims; all_claims(); "
              "print('\\n'.join(m.__file__ for n, m in sorted(sys.modules.items()) "
              "if n.split('.')[0] == 'assocmem' and getattr(m, '__file__', None)))")
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    files = {Path(line).resolve() for line in loaded.split()}
    assert files and files <= {path.resolve() for path in stage_files("report")}, files - set(stage_files("report"))


def test_an_editors_hidden_temporary_file_is_not_code(tmp_path):
    """An editor or an atomic write leaves `.name.tmp` beside a module for a moment: no digest may read it (it
    can vanish between listing and reading) or move because of it."""
    root = copy_package(tmp_path)
    assert changed_stages(root, lambda r: (r / ".train.py.4cf5cd13.tmp").write_text("half a file")) == set()


def fresh_process() -> None:
    """Forget what this process has cached (as a new Snakemake start would), keeping the cache file."""
    codehash._disk_references.cache_clear()
    codehash._module_references.cache_clear()


def test_the_imports_cache_file_is_keyed_by_content(tmp_path, monkeypatch):
    """Every Snakemake start digests every stage, and parsing ~110 modules was most of that time, so the imports of
    a module's source are kept on disk, keyed by its name and bytes: a later process parses nothing unchanged, an
    edit that adds an import is parsed again and moves the closure, and a damaged cache file is ignored."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = copy_package(tmp_path)
    fresh_process()
    before = relative("report", root)
    assert codehash.references_cache_file().is_file()

    fresh_process()
    parse = codehash.references

    def no_module_parse(tree, *args):
        if isinstance(tree, ast.Module):  # a whole module (stages.py's own nodes are read directly)
            pytest.fail("an unchanged module was parsed again")
        return parse(tree, *args)

    monkeypatch.setattr(codehash, "references", no_module_parse)
    assert relative("report", root) == before
    monkeypatch.setattr(codehash, "references", parse)

    append("report/render.py", "\nimport assocmem.knn.exact  # an import the report did not have\n")(root)
    fresh_process()
    after = relative("report", root)
    assert "knn/exact.py" in after and "knn/exact.py" not in before

    codehash.references_cache_file().write_text("{not json")
    fresh_process()
    assert relative("report", root) == after
    fresh_process()
