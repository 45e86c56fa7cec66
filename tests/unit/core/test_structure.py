"""The package's shape, as a newcomer relies on it: rooms (top-level modules and subpackages of assocmem) import
only rooms below them, so there are no cycles; the report reads artifacts and reaches neither the trainer nor the
k-NN; the theory is pure math; no file is too long to read."""

from __future__ import annotations

import ast

import pytest
from helpers import ROOT

from assocmem.codehash import PACKAGE_DIR, module_closure, references

# Each room may import only rooms of a lower level.
LEVELS = (
    {"errors", "data", "layout", "schemas", "rerun", "checkout"},
    {"io", "runtime", "gemm", "theory", "stats", "progress", "targets"},
    {"codehash", "tokenstore", "model", "testing", "provenance", "tables", "stamps", "runlock", "autotune"},
    {"tokenwriter", "subsets", "stopping", "footprint", "trust"},
    {"qf", "corpus", "facts", "train", "activations", "knn", "sweep"},
    {"evaluation", "memorisation"},
    {"dataset_kinds", "use"},
    {"config"},
    {"report", "overrides", "stacking"},
    {"stages", "runhooks"},
    {"cli"},
    {"__main__"},
)
LEVEL = {room: level for level, rooms in enumerate(LEVELS) for room in rooms}
MAX_LINES = 500


def module_name(path) -> str:
    parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def imports() -> list[tuple[str, str]]:
    """(importing module, imported assocmem module) for every import in the package, lazy ones included."""
    edges = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        name = module_name(path)
        tree = ast.parse(path.read_bytes(), filename=str(path))
        edges += [(name, target) for target in references(tree, name, path.name == "__init__.py")]
    return edges


def test_every_room_has_a_level() -> None:
    rooms = {room(module_name(path)) for path in PACKAGE_DIR.rglob("*.py")} - {""}
    assert rooms == set(LEVEL), f"rooms without a level: {rooms - set(LEVEL)}; levels without a room: " \
                                f"{set(LEVEL) - rooms}"


def test_rooms_import_only_rooms_below_them() -> None:
    upward = sorted({f"{source} -> {target}" for source, target in imports()
                     if room(target) and room(source) != room(target)
                     and LEVEL[room(target)] >= LEVEL[room(source)]})
    assert upward == []


def test_the_report_reaches_neither_trainer_nor_knn_nor_model() -> None:
    reached = module_closure(["assocmem.report.build"]).keys()
    banned = ("assocmem.train", "assocmem.knn", "assocmem.model", "assocmem.activations", "assocmem.stages")
    assert not [name for name in reached if name.startswith(banned)]


def test_theory_is_pure_math() -> None:
    outside = sorted({target for source, target in imports() if room(source) == "theory"
                      and room(target) not in ("theory", "errors", "")})
    assert outside == []


SOURCE_FILES = [*sorted(PACKAGE_DIR.rglob("*.py")), *sorted((ROOT / "workflow" / "rules").glob("*.smk")),
                *sorted((ROOT / "tests").rglob("*.py")), *sorted((ROOT / "benchmarks").rglob("*.py"))]


@pytest.mark.parametrize("path", SOURCE_FILES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_source_file_is_too_long(path) -> None:
    """The package's modules, the workflow's rule files, the tests and the benchmarks alike."""
    assert len(path.read_text(encoding="utf-8").splitlines()) <= MAX_LINES


def test_rules_stay_declarative() -> None:
    """Rule files hold no function definitions: logic lives in the input/param functions of common.smk (and of the
    files it includes, common_*.smk) and in src."""
    rules = [path for path in (ROOT / "workflow" / "rules").glob("*.smk") if not path.name.startswith("common")]
    assert rules and not [path.name for path in rules if "\ndef " in path.read_text()]
