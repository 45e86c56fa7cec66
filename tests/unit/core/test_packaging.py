"""What an install carries: the config schema is package data with one copy (the workflow's path links to it), so
the command line works from any directory; a plain install has everything the pipeline imports and the test
extra the tooling; environment.yml and the rules' conda environment list the same packages, from conda-forge and
bioconda only."""

from __future__ import annotations

import ast
import fnmatch
import os
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from helpers import ROOT
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from assocmem.codehash import PACKAGE_DIR, stage_files
from assocmem.schemas import config_schema_path

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
RUNTIME = {canonicalize_name(Requirement(text).name): Requirement(text)
           for text in PYPROJECT["project"]["dependencies"]}
WORKFLOW_SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"
CONDA_NAMES = {"matplotlib": "matplotlib-base"}  # pip name -> conda-forge name, where they differ
FROM_PIP = {"torch", "faiss-cpu"}  # in the environments' pip section (see environment.yml's header)
TRANSITIVE = {"cycler": "matplotlib"}  # imported by src, installed by a listed dependency
RULES = sorted({name for path in (ROOT / "workflow" / "rules").glob("*.smk")
                for name in re.findall(r"^rule (\w+):", path.read_text(), flags=re.M)})


def test_the_workflow_schema_is_a_relative_link_to_the_packaged_one() -> None:
    assert WORKFLOW_SCHEMA.is_symlink(), "workflow/schemas/config.schema.yaml must stay a link (one copy)"
    assert not os.path.isabs(os.readlink(WORKFLOW_SCHEMA))  # a relative link survives a clone or a move
    packaged = ROOT / "src" / "assocmem" / "schemas" / "config.schema.yaml"
    assert WORKFLOW_SCHEMA.resolve() == packaged.resolve() == config_schema_path().resolve()
    patterns = PYPROJECT["tool"]["setuptools"]["package-data"]["assocmem"]
    assert any(fnmatch.fnmatch("schemas/config.schema.yaml", pattern) for pattern in patterns)


def test_validate_config_works_from_any_directory(tmp_path) -> None:
    run = [sys.executable, "-m", "assocmem", "validate-config", str(ROOT / "config" / "test.yaml")]
    result = subprocess.run(run, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load(result.stdout)["experiments"]["qf"]["train"]["max_steps"] == 60
    refused = subprocess.run([*run, "--schema", str(tmp_path / "other.yaml")], cwd=tmp_path, capture_output=True,
                             text=True, timeout=120)
    assert refused.returncode == 2 and f"config schema not found: {tmp_path / 'other.yaml'}" in refused.stderr


def test_no_stage_digest_reads_the_schema() -> None:
    """The schema's defaults reach the jobs through their params; editing it must not rerun every stage."""
    for rule in RULES:
        assert not [path for path in stage_files(rule) if "schemas" in path.relative_to(PACKAGE_DIR).parts], rule


def optional_imports(tree: ast.AST) -> set[ast.AST]:
    """Imports inside a ``try`` that handles ImportError: optional features, not requirements."""
    guarded = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
                "ImportError" in ast.unparse(handler.type or ast.Name("BaseException")) for handler in node.handlers):
            guarded.update(child for statement in node.body for child in ast.walk(statement))
    return guarded


def third_party_imports() -> set[str]:
    names = set()
    for path in PACKAGE_DIR.rglob("*.py"):
        tree = ast.parse(path.read_bytes())
        optional = optional_imports(tree)
        for node in ast.walk(tree):
            if node in optional:
                continue
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names.add(node.module.split(".")[0])
    return {name for name in names if name not in sys.stdlib_module_names and name != "assocmem"}


def test_a_plain_install_has_everything_the_package_imports() -> None:
    providers = metadata.packages_distributions()
    missing = []
    for name in sorted(third_party_imports()):
        dists = {canonicalize_name(d) for d in providers.get(name, [])} | {TRANSITIVE.get(name, name)}
        if not dists & RUNTIME.keys():
            missing.append(f"{name} (from {sorted(dists)})")
    assert missing == [], "imported by src/assocmem but not in [project] dependencies"


def test_test_tooling_is_an_extra_not_a_runtime_dependency() -> None:
    test_extra = {canonicalize_name(Requirement(text).name) for text in PYPROJECT["project"]["optional-dependencies"]
                  ["test"]}
    tooling = {"pytest", "hypothesis", "playwright", "ruff", "snakefmt", "mpmath"}
    assert tooling <= test_extra
    assert not tooling & RUNTIME.keys()


def conda_specs(path: Path) -> tuple[dict, dict[str, str], list[str]]:
    """(the environment file, conda package name -> spec, the pip section's lines)."""
    env = yaml.safe_load(path.read_text())
    pip = next((item["pip"] for item in env["dependencies"] if isinstance(item, dict)), [])
    specs = {re.split(r"[<>=!\s]", item, maxsplit=1)[0]: item for item in env["dependencies"] if isinstance(item, str)}
    return env, specs, pip


def lower_bound(requirement: Requirement) -> str | None:
    return next((spec.version for spec in requirement.specifier if spec.operator in (">=", "==")), None)


@pytest.mark.parametrize(("path", "skip"), [(ROOT / "environment.yml", set()),
                                            (ROOT / "workflow" / "envs" / "assocmem.yaml", {"snakemake"})],
                         ids=["environment.yml", "workflow-envs"])
def test_conda_environments_match_pyproject(path: Path, skip: set[str]) -> None:
    env, specs, pip = conda_specs(path)
    assert set(env["channels"]) <= {"conda-forge", "bioconda"} and "pytorch" not in env["channels"]
    assert "pytorch" not in specs and "cpuonly" not in specs
    pip_names = {canonicalize_name(Requirement(line).name): Requirement(line) for line in pip
                 if not line.startswith("-")}
    assert "torch==2.13.0" in pip and "torch==2.13.0" in (ROOT / "README.md").read_text()  # README's pin
    for name, requirement in RUNTIME.items():
        if name in skip:
            continue
        if name in FROM_PIP:
            assert name in pip_names, f"{path.name}: {name} belongs in the pip section"
            continue
        conda_name = CONDA_NAMES.get(name, name)
        assert conda_name in specs, f"{path.name} lacks {conda_name} (pyproject: {requirement})"
        listed = Requirement(specs[conda_name].replace(" ", ""))
        assert lower_bound(listed) == lower_bound(requirement), f"{path.name}: {listed} vs pyproject {requirement}"


def test_environment_yml_installs_the_package_and_the_slurm_plugin() -> None:
    _, specs, pip = conda_specs(ROOT / "environment.yml")
    assert any(line.split("#")[0].strip() == "-e ." for line in pip)
    plugin = Requirement(specs["snakemake-executor-plugin-slurm"].replace(" ", ""))
    assert plugin.specifier.contains("2.0") and not plugin.specifier.contains("3.0")  # pinned to a major range
    assert Requirement(specs["snakemake"].replace(" ", "")).specifier.contains("9.27")
