"""The source a stage runs, and its digest: a cached result is valid only for the code that made it.

Every rule passes ``code_digest(<rule>)`` as a param, so Snakemake (whose default rerun triggers include params)
reruns a job, and everything downstream of it, when the code behind its stage changes, and only then.

What counts as a stage's code: the stage function of the same name in ``assocmem.stages`` (its own source text)
plus every ``assocmem`` module it imports, followed transitively through all imports of those modules (lazy ones
inside functions included), their parent packages, and the data files of every package reached (for example
``assocmem/data/qf_fitted_grammar.json``). A module named in a string (``resources.files("assocmem.data")``) is
reached too. A module that lists its own package's modules at run time (``pkgutil.iter_modules`` or
``walk_packages``, as the report's claim registry does to import every claim module) reaches every module under
that package. The stage function's helpers in ``assocmem.stages`` (the module-level functions, classes and
constants it names, and theirs in turn) count as the stage's own source. ``cli.py`` and ``__main__.py``, which
every rule runs, are always part of it, with the modules they import at their top (and what those import),
``assocmem.stages`` aside: ``cli`` stamps every job's outputs (``assocmem.stamps``) and logs its progress. Comments
and docstrings count: the digest is of the bytes, so a false rerun is possible, a stale result is not.
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
_DISCOVERY_CALLS = ("iter_modules", "walk_packages")
EVERY_MODULE = ".*"  # a reference "assocmem.pkg.*": every module under the package assocmem.pkg


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


def _discovers_modules(node: ast.AST) -> bool:
    """A call that lists a package's modules at run time (whatever it then imports is in no import statement)."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    return name in _DISCOVERY_CALLS


def references(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Every ``assocmem`` module name that ``tree`` (the source of ``module``) imports or names in a string; for a
    module that lists its package's modules at run time, ``<its package>.*`` (:data:`EVERY_MODULE`) too."""
    names: set[str] = set()
    every: set[str] = set()
    for node in ast.walk(tree):
        if _discovers_modules(node):
            every.add((module if is_package else module.rpartition(".")[0]) + EVERY_MODULE)
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _import_base(node, module, is_package)
            if base:
                names.add(base)
                names.update(f"{base}.{alias.name}" for alias in node.names)  # a submodule, or a plain name
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _MODULE_NAME.fullmatch(node.value):
            names.add(node.value)
    found = {part for name in names if name.split(".")[0] == PACKAGE for part in _with_parents(name)}
    return found | {name for name in every if name.split(".")[0] == PACKAGE}


# The version names what `references` finds: v2 added EVERY_MODULE, which a v1 entry of the same bytes lacks.
REFERENCES_CACHE = "codehash-references-v2.json"
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


def package_modules(package: str, root: Path = PACKAGE_DIR) -> list[str]:
    """Every module under ``package`` (its subpackages' included), by name; none for a name that is no package."""
    init = module_file(package, root)
    if init is None or init.name != "__init__.py":
        return []
    found = []
    for path in sorted(init.parent.rglob("*.py")):
        parts = path.relative_to(init.parent).with_suffix("").parts
        if not any(part.startswith(".") or part == "__pycache__" for part in parts):
            found.append(".".join([package, *parts[:-1]] + ([] if parts[-1] == "__init__" else [parts[-1]])))
    return found


def module_closure(roots: Iterable[str], root: Path = PACKAGE_DIR) -> dict[str, Path]:
    """Module name -> source file of ``roots`` and everything they import within the package, transitively."""
    seen: dict[str, Path] = {}
    todo = [part for name in roots for part in _with_parents(name)]
    while todo:
        name = todo.pop()
        if name.endswith(EVERY_MODULE):
            todo.extend(set(package_modules(name.removesuffix(EVERY_MODULE), root)) - seen.keys())
            continue
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


def _defined_names(node: ast.stmt) -> set[str]:
    """The names a module-level statement binds (a function, a class, an assignment's targets); imports aside."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {node.name}
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
        node, ast.AnnAssign | ast.AugAssign) else []
    return {leaf.id for target in targets for leaf in ast.walk(target) if isinstance(leaf, ast.Name)}


def _free_names(node: ast.AST) -> set[str]:
    """The names ``node`` reads and does not bind itself (a local ``train = ...`` is not the stage ``train``)."""
    read, bound = set(), set()
    for leaf in ast.walk(node):
        if isinstance(leaf, ast.Name):
            (read if isinstance(leaf.ctx, ast.Load) else bound).add(leaf.id)
        elif isinstance(leaf, ast.arg):
            bound.add(leaf.arg)
    return read - bound


def _run_at_import(tree: ast.Module) -> list[ast.stmt]:
    """Module-level statements that bind no name and import nothing (a call, an ``if``): they run for every stage.
    The docstring aside."""
    body = tree.body[1:] if tree.body and isinstance(tree.body[0], ast.Expr) and isinstance(
        getattr(tree.body[0], "value", None), ast.Constant) else tree.body
    return [node for node in body if not _defined_names(node) and not isinstance(
        node, ast.Import | ast.ImportFrom | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)]


def _stage_nodes(stage: str, root: Path) -> list[ast.stmt]:
    """The stage function, what runs at the import of ``assocmem.stages``, and the module-level definitions they
    name (helpers, constants), theirs in turn, in source order: a helper shared by two stages is part of both."""
    tree = _parsed((root / "stages.py").read_bytes())
    defined: dict[str, list[ast.stmt]] = {}
    for node in tree.body:
        for name in _defined_names(node):
            defined.setdefault(name, []).append(node)  # every statement that binds it (``X = ...``, ``X += ...``)
    chosen = {id(node): node for node in [_stage_function(stage, root), *_run_at_import(tree)]}
    todo = list(chosen.values())
    while todo:
        for node in (node for name in sorted(_free_names(todo.pop())) for node in defined.get(name, [])):
            if id(node) not in chosen:
                chosen[id(node)] = node
                todo.append(node)
    return sorted(chosen.values(), key=lambda node: node.lineno)


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
                          [*module_level, *_stage_nodes(stage, root)]))
    modules = module_closure((names | _entry_imports(root)) - {f"{PACKAGE}.stages"}, root)
    files = set(modules.values()) | {root / name for name in ENTRY_FILES if (root / name).is_file()}
    for path in list(files):
        if path.name == "__init__.py":
            files.update(_package_data(path))
    return sorted(files)


def code_digest(stage: str, root: Path = PACKAGE_DIR) -> str:
    """sha256 (16 hex digits) of the stage function's source with its helpers' (:func:`_stage_nodes`) and of every
    file in ``stage_files``."""
    digest = hashlib.sha256()
    source = (root / "stages.py").read_text()
    for node in _stage_nodes(stage, root):
        digest.update(ast.get_source_segment(source, node).encode() + b"\0")
    for path in stage_files(stage, root):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]
