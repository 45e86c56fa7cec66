"""The source a stage runs, and its digest: a cached result is valid only for the code that made it.

Every rule passes ``code_digest(<rule>)`` as a param, so Snakemake (whose default rerun triggers include params)
reruns a job, and everything downstream of it, when the code behind its stage changes, and only then.

What counts as a stage's code: the stage function of the same name in ``assocmem.stages`` (its own source text)
plus every ``assocmem`` module it imports, followed transitively through all imports of those modules (lazy ones
inside functions included), their parent packages, and the data files of every package reached (for example
``assocmem/data/qf_fitted_grammar.json``). A module named in a string (``resources.files("assocmem.data")``) is
reached too. ``cli.py`` and ``__main__.py``, which every rule runs, are always part of it, with the modules they
import at their top (and what those import), ``assocmem.stages`` aside: ``cli`` stamps every job's outputs
(``assocmem.stamps``) and logs its progress. Comments and docstrings count: the digest is of the bytes, so a false
rerun is possible, a stale result is not.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path

from assocmem.errors import AssocmemError

PACKAGE = "assocmem"
PACKAGE_DIR = Path(__file__).resolve().parent
ENTRY_FILES = ("cli.py", "__main__.py")
_MODULE_NAME = re.compile(rf"{PACKAGE}(\.\w+)*")


def module_file(name: str, root: Path = PACKAGE_DIR) -> Path | None:
    """The source file of module ``name`` (``assocmem.x.y``) under the package directory, or None."""
    base = root.joinpath(*name.split(".")[1:])
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    return None


def _with_parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _import_base(node: ast.ImportFrom, module: str, is_package: bool) -> str | None:
    if not node.level:
        return node.module
    package = module if is_package else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def references(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Every ``assocmem`` module name that ``tree`` (the source of ``module``) imports or names in a string."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _import_base(node, module, is_package)
            if base:
                names.add(base)
                names.update(f"{base}.{alias.name}" for alias in node.names)  # a submodule, or a plain name
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _MODULE_NAME.fullmatch(node.value):
            names.add(node.value)
    return {part for name in names if name.split(".")[0] == PACKAGE for part in _with_parents(name)}


REFERENCES_CACHE = "codehash-references-v1.json"
MAX_CACHED_MODULES = 4096  # past this (many edits, many checkouts) the file restarts from this process's entries


def references_cache_file() -> Path:
    """Where the imports of module sources already parsed are kept between processes (``$XDG_CACHE_HOME`` or
    ``~/.cache``, under ``assocmem/``): keyed by a digest of the module's name and bytes, so an edited module is
    parsed again and an entry can never be another content's. The digests themselves always hash the files."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "assocmem" / REFERENCES_CACHE


@functools.cache
def _disk_references() -> dict[str, list[str]]:
    """The cache file's entries; an unreadable or malformed file counts as empty (it is only a cache)."""
    try:
        loaded = json.loads(references_cache_file().read_text())
    except (OSError, ValueError):
        return {}
    valid = isinstance(loaded, dict) and all(
        isinstance(v, list) and all(isinstance(x, str) for x in v) for v in loaded.values())
    return loaded if valid else {}


_NEW_ENTRIES: dict[str, list[str]] = {}


def _save_new_references() -> None:
    """Add this process's new entries to the cache file (atomically; a failure to write only loses the cache)."""
    if not _NEW_ENTRIES:
        return
    from assocmem.io import write_json  # numpy comes with it: only when there is something to write

    merged = {**_disk_references(), **_NEW_ENTRIES}
    try:
        write_json(references_cache_file(), merged if len(merged) <= MAX_CACHED_MODULES else _NEW_ENTRIES)
    except (OSError, AssocmemError):
        return
    _disk_references().update(_NEW_ENTRIES)
    _NEW_ENTRIES.clear()


@functools.lru_cache(maxsize=4096)
def _module_references(source: bytes, name: str, is_package: bool) -> frozenset[str]:
    """``references`` of one module's source, parsed once per content: a Snakefile computes the digest of every
    stage, the stages share most of their modules, and every Snakemake start computes them again (the parse is
    most of that time), so the answer is kept in memory and on disk, keyed by the bytes, never by a file time."""
    key = hashlib.sha256(f"{name}\0{int(is_package)}\0".encode() + source).hexdigest()
    cached = _disk_references().get(key)
    if cached is not None:
        return frozenset(cached)
    found = frozenset(references(ast.parse(source), name, is_package))
    _NEW_ENTRIES[key] = sorted(found)
    return found


def module_closure(roots: Iterable[str], root: Path = PACKAGE_DIR) -> dict[str, Path]:
    """Module name -> source file of ``roots`` and everything they import within the package, transitively."""
    seen: dict[str, Path] = {}
    todo = [part for name in roots for part in _with_parents(name)]
    while todo:
        name = todo.pop()
        path = module_file(name, root)
        if name in seen or path is None:
            continue
        seen[name] = path
        todo.extend(_module_references(path.read_bytes(), name, path.name == "__init__.py") - seen.keys())
    _save_new_references()
    return seen


def _package_data(package_init: Path) -> list[Path]:
    """Non-Python files of a package directory, not descending into subpackages or caches; hidden files (an
    editor's or an atomic write's temporary file) are not package data."""
    files = []
    for path in sorted(package_init.parent.rglob("*")):
        inside = path.relative_to(package_init.parent).parts[:-1]
        nested = any((package_init.parent.joinpath(*inside[:i + 1]) / "__init__.py").is_file()
                     for i in range(len(inside)))
        hidden = path.name.startswith(".")
        if path.is_file() and path.suffix not in (".py", ".pyc") and "__pycache__" not in path.parts and not (
                nested or hidden):
            files.append(path)
    return files


@functools.lru_cache(maxsize=8)
def _parsed(source: bytes) -> ast.Module:
    """stages.py's and the entry files' trees, parsed once per process and content (every stage's digest reads
    them)."""
    return ast.parse(source)


def _stage_function(stage: str, root: Path) -> ast.FunctionDef:
    stages = root / "stages.py"
    tree = _parsed(stages.read_bytes())
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == stage:
            return node
    raise AssocmemError(f"{stages} has no stage function {stage!r} (one function per rule, named like the rule)")


def _top_level_imports(path: Path, name: str) -> set[str]:
    """The package modules ``path`` (module ``name``) imports at its top, not inside its functions."""
    tree = _parsed(path.read_bytes())
    nodes = [node for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom)]
    return set().union(*(references(node, name, False) for node in nodes))


def _entry_imports(root: Path) -> set[str]:
    """What the entry files import at their top, themselves and the stages module aside (a stage's own imports
    are its own; following ``cli``'s lazy imports would make every stage depend on every command)."""
    found = set().union(*(_top_level_imports(root / name, f"{PACKAGE}.{Path(name).stem}") for name in ENTRY_FILES
                          if (root / name).is_file()))
    apart = [f"{PACKAGE}.{Path(name).stem}" for name in ENTRY_FILES] + [f"{PACKAGE}.stages"]
    return {name for name in found if not any(name == a or name.startswith(a + ".") for a in apart)}


def stage_files(stage: str, root: Path = PACKAGE_DIR) -> list[Path]:
    """Every file whose bytes the stage's outputs may depend on (see the module docstring)."""
    stages_tree = _parsed((root / "stages.py").read_bytes())
    module_level = [node for node in stages_tree.body if isinstance(node, ast.Import | ast.ImportFrom)]
    names = set().union(*(references(node, f"{PACKAGE}.stages", False) for node in
                          [*module_level, _stage_function(stage, root)]))
    modules = module_closure((names | _entry_imports(root)) - {f"{PACKAGE}.stages"}, root)
    files = set(modules.values()) | {root / name for name in ENTRY_FILES if (root / name).is_file()}
    for path in list(files):
        if path.name == "__init__.py":
            files.update(_package_data(path))
    return sorted(files)


def code_digest(stage: str, root: Path = PACKAGE_DIR) -> str:
    """sha256 (16 hex digits) of the stage function's source and of every file in ``stage_files``."""
    digest = hashlib.sha256()
    digest.update(ast.get_source_segment((root / "stages.py").read_text(), _stage_function(stage, root)).encode())
    for path in stage_files(stage, root):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]
