"""Load a document corpus (OpenWebText from the Hugging Face Hub, or local stand-ins) in a fixed order.

Document ids are row indices in the source order: rows of the files in the order listed (glob matches
sorted), rows within a file in file order. :func:`prepare_corpus` records that order (n_docs, sha256 of the id
list) and a seeded held-out validation set (ids saved to ``val_ids.npy``).

For OpenWebText (Fig. 3 of the paper) the Hub repository ``Skylion007/openwebtext`` is script-based, which
current ``datasets`` refuses to run; its automatic parquet conversion lives on the ``refs/convert/parquet``
branch. Pin ``revision`` to a commit of that branch and set ``data_files`` to the glob inside it, e.g.::

    {"source": "hf", "name": "Skylion007/openwebtext", "revision": "<40-hex commit of refs/convert/parquet>",
     "data_files": "plain_text/train/*.parquet", "split": "train", "text_column": "text"}

which loads ``hf://datasets/Skylion007/openwebtext@<commit>/plain_text/train/*.parquet`` with the parquet
builder. Without ``data_files`` the repository is loaded with ``load_dataset(name, revision=...)``.
"""

from __future__ import annotations

import codecs
import glob
import hashlib
import math
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from assocmem.errors import AssocmemError
from assocmem.io import sha256_file, write_json, write_npy

if TYPE_CHECKING:
    import datasets

SOURCES = ("hf", "text", "jsonl", "parquet")
_BUILDERS = {"text": "text", "jsonl": "json", "parquet": "parquet"}
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_OFFLINE_ADVICE = (
    "Unset HF_HUB_OFFLINE / HF_DATASETS_OFFLINE and check network access to huggingface.co, or download the "
    "parquet files once and use a local spec ({'source': 'parquet', 'paths': [...]})."
)


def load_corpus(spec: dict[str, Any]) -> datasets.Dataset:
    """Load the corpus described by ``spec`` as a ``datasets.Dataset`` in source order.

    spec keys -- ``source``: "hf" | "text" | "jsonl" | "parquet"; ``text_column`` (default "text");
    ``cache_dir`` (datasets cache). hf: ``name``, ``revision`` (40-hex commit; set ``allow_unpinned: true`` to
    accept a branch name), ``data_files`` (glob inside the repository at that revision), ``split``.
    Local: ``paths`` (files or globs); text files: ``sample_by`` "paragraph" (default: documents separated by
    a blank line) | "line" | "document" (one file, one document).
    """
    source = spec.get("source")
    if source not in SOURCES:
        raise AssocmemError(f"corpus spec key 'source' is {source!r}; expected one of {list(SOURCES)}")
    dataset = _load_hf(spec) if source == "hf" else _load_local(spec, source)
    column = spec.get("text_column", "text")
    if column not in dataset.column_names:
        raise AssocmemError(
            f"corpus has no column {column!r} (spec key 'text_column'); its columns are "
            f"{dataset.column_names} ({describe_source(spec)})"
        )
    return dataset


def describe_source(spec: dict[str, Any]) -> str:
    if spec.get("source") == "hf":
        return f"hf dataset {spec.get('name')}@{spec.get('revision')} data_files={spec.get('data_files')}"
    return f"{spec.get('source')} files {spec.get('paths')}"


def resolve_paths(paths: str | list[str]) -> list[Path]:
    """Expand files and globs in the given order (matches of one glob sorted); every entry must match."""
    entries = [paths] if isinstance(paths, str | os.PathLike) else list(paths)
    if not entries:
        raise AssocmemError("corpus spec key 'paths' is empty")
    resolved: list[Path] = []
    for entry in map(str, entries):
        if glob.has_magic(entry):
            matches = sorted(glob.glob(entry, recursive=True))
            if not matches:
                raise AssocmemError(f"no corpus files match {entry!r} (spec key 'paths')")
            resolved.extend(Path(match) for match in matches)
        elif Path(entry).is_file():
            resolved.append(Path(entry))
        else:
            raise AssocmemError(f"missing corpus file {entry!r} (spec key 'paths')")
    duplicates = sorted({str(path) for path in resolved if resolved.count(path) > 1})
    if duplicates:
        raise AssocmemError(f"corpus files listed more than once in 'paths': {duplicates}")
    return resolved


def _load_local(spec: dict[str, Any], source: str) -> datasets.Dataset:
    import datasets

    files = [str(path) for path in resolve_paths(spec.get("paths") or [])]
    if source in ("text", "jsonl"):
        for path in files:
            check_text_file(Path(path))
    options: dict[str, Any] = {}
    if source == "text":
        options["sample_by"] = spec.get("sample_by", "paragraph")
    try:
        return datasets.load_dataset(
            _BUILDERS[source], data_files={"train": files}, split="train", cache_dir=spec.get("cache_dir"),
            **options,
        )
    except Exception as err:  # noqa: BLE001 - parse errors from arrow/json come in many types
        raise AssocmemError(
            f"could not read {source} corpus files {files}: {type(err).__name__}: {err}"
        ) from err


def check_text_file(path: Path, chunk: int = 1 << 20) -> None:
    """A local text/jsonl corpus file must be non-empty UTF-8 (checked incrementally, memory bounded)."""
    if path.stat().st_size == 0:
        raise AssocmemError(f"corpus file {path} is empty: remove it from dataset.paths or fill it")
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset = 0
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            try:
                decoder.decode(block)
            except UnicodeDecodeError as err:
                raise AssocmemError(f"corpus file {path} is not UTF-8 text (byte {offset + err.start}: "
                                    f"{err.reason}); convert it to UTF-8 or remove it from dataset.paths") from err
            offset += len(block)
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError as err:
        raise AssocmemError(f"corpus file {path} ends inside a UTF-8 character: it is truncated") from err


def _load_hf(spec: dict[str, Any]) -> datasets.Dataset:
    import datasets

    name, revision = spec.get("name"), spec.get("revision")
    if not name:
        raise AssocmemError("hf corpus spec needs key 'name' (e.g. 'Skylion007/openwebtext')")
    if not revision or not (_COMMIT.match(revision) or spec.get("allow_unpinned")):
        raise AssocmemError(
            f"hf corpus spec key 'revision' is {revision!r}: pin it to a 40-hex commit (for OpenWebText, a "
            "commit of the refs/convert/parquet branch) or set allow_unpinned: true"
        )
    split = spec.get("split", "train")
    try:
        if spec.get("data_files"):
            return datasets.load_dataset(
                "parquet", data_files={split: _hub_urls(name, revision, spec["data_files"])}, split=split,
                cache_dir=spec.get("cache_dir"),
            )
        return datasets.load_dataset(name, revision=revision, split=split, cache_dir=spec.get("cache_dir"))
    except Exception as err:  # noqa: BLE001 - network, auth and missing-file errors come in many types
        offline = " (offline mode: HF_HUB_OFFLINE or HF_DATASETS_OFFLINE is set)" if hub_offline() else ""
        script_hint = "" if spec.get("data_files") else (
            " Script-based repositories (such as Skylion007/openwebtext) load only through their parquet "
            "conversion: set 'data_files' (e.g. 'plain_text/train/*.parquet') and pin 'revision' to a commit "
            "of refs/convert/parquet."
        )
        raise AssocmemError(
            f"could not load {describe_source(spec)} split {split!r}{offline}: "
            f"{type(err).__name__}: {str(err).rstrip('.')}. {_OFFLINE_ADVICE}{script_hint}"
        ) from err


def _hub_urls(name: str, revision: str, data_files: str | list[str]) -> list[str]:
    patterns = [data_files] if isinstance(data_files, str) else list(data_files)
    quoted = revision.replace("/", "%2F")  # hf:// paths take branch names with '/' URL-quoted
    return [f"hf://datasets/{name}@{quoted}/{pattern.lstrip('/')}" for pattern in patterns]


def hub_offline() -> bool:
    flags = (os.environ.get(name, "") for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))
    return any(flag.strip().lower() in ("1", "on", "yes", "true") for flag in flags)


def validation_ids(
    n_docs: int, *, seed: int, val_fraction: float | None = None, val_docs: int | None = None
) -> np.ndarray:
    """Sorted int64 ids of a seeded held-out set: ``val_docs`` documents, or ceil(val_fraction * n_docs)."""
    if val_fraction is not None and val_docs is not None:
        raise AssocmemError("corpus spec: give 'val_fraction' or 'val_docs', not both")
    if val_fraction is not None:
        if not 0 <= val_fraction < 1:
            raise AssocmemError(f"corpus spec key 'val_fraction' must be in [0, 1), got {val_fraction}")
        val_docs = math.ceil(val_fraction * n_docs)
    count = int(val_docs or 0)
    if count < 0 or (count and count >= n_docs):
        raise AssocmemError(f"validation set of {count} documents does not fit a corpus of {n_docs}")
    chosen = np.random.default_rng(seed).choice(n_docs, size=count, replace=False)
    return np.sort(chosen).astype(np.int64)


def ids_sha256(ids: np.ndarray) -> str:
    """sha256 of an id list, hashed as little-endian int64."""
    return hashlib.sha256(np.ascontiguousarray(ids, dtype="<i8").tobytes()).hexdigest()


def order_metadata(dataset: datasets.Dataset, spec: dict[str, Any], val_ids: np.ndarray) -> dict[str, Any]:
    """The recorded document order: ids are source row indices 0..n_docs-1; the split's id lists hashed."""
    n_docs = dataset.num_rows
    is_val = np.zeros(n_docs, dtype=bool)
    is_val[val_ids] = True
    return {
        "source": {key: value for key, value in spec.items() if key != "cache_dir"},
        "files": _file_records(spec),
        "n_docs": n_docs,
        "doc_ids": "row index in source order (files in listed order, glob matches sorted)",
        "order_sha256": ids_sha256(np.arange(n_docs, dtype=np.int64)),
        "text_column": spec.get("text_column", "text"),
        "val": {
            "seed": int(spec.get("seed", 0)), "val_fraction": spec.get("val_fraction"),
            "val_docs": spec.get("val_docs"), "n_docs": len(val_ids), "ids_file": "val_ids.npy",
            "ids_sha256": ids_sha256(val_ids),
        },
        "train": {"n_docs": n_docs - len(val_ids), "ids_sha256": ids_sha256(np.flatnonzero(~is_val))},
    }


def _file_records(spec: dict[str, Any]) -> list[dict[str, Any]] | None:
    """Local files with size and (unless ``hash_files: false``) sha256; hf sources are pinned by revision."""
    if spec.get("source") == "hf":
        return None
    hash_files = spec.get("hash_files", True)
    return [
        {"path": str(path), "bytes": path.stat().st_size, "sha256": sha256_file(path) if hash_files else None}
        for path in resolve_paths(spec["paths"])
    ]


def prepare_corpus(
    spec: dict[str, Any], out_dir: str | os.PathLike[str]
) -> tuple[datasets.Dataset, dict[str, Any]]:
    """Load the corpus, draw the validation ids, write ``source.json`` and ``val_ids.npy`` to ``out_dir``."""
    dataset = load_corpus(spec)
    val_ids = validation_ids(
        dataset.num_rows, seed=int(spec.get("seed", 0)), val_fraction=spec.get("val_fraction"),
        val_docs=spec.get("val_docs"),
    )
    meta = order_metadata(dataset, spec, val_ids)
    write_npy(Path(out_dir) / "val_ids.npy", val_ids)
    write_json(Path(out_dir) / "source.json", meta)
    return dataset, meta


def iter_documents(
    dataset: datasets.Dataset, *, text_column: str = "text", split: str = "all",
    val_ids: np.ndarray | None = None, batch_size: int = 1000,
) -> Iterator[str]:
    """Yield document texts of ``split`` ("all", "train" = all but ``val_ids``, "val") in source order.

    Reads ``batch_size`` rows at a time from the memory-mapped Arrow table, so memory does not grow with the
    corpus.
    """
    if split not in ("all", "train", "val"):
        raise AssocmemError(f"document split must be 'all', 'train' or 'val', got {split!r}")
    if text_column not in dataset.column_names:
        raise AssocmemError(f"corpus has no column {text_column!r}; its columns are {dataset.column_names}")
    ids = np.asarray(val_ids if val_ids is not None else [], dtype=np.int64)
    if split == "val":
        dataset = dataset.select(ids)
    keep_row = np.ones(dataset.num_rows, dtype=bool)
    if split == "train":
        keep_row[ids] = False
    row = 0
    for batch in dataset.select_columns([text_column]).iter(batch_size=batch_size):
        for text in batch[text_column]:
            if keep_row[row]:
                yield _checked_text(text, row if split != "val" else int(ids[row]), text_column)
            row += 1


def _checked_text(text: Any, doc_id: int, column: str) -> str:
    if not isinstance(text, str):
        raise AssocmemError(f"document {doc_id}: column {column!r} holds {type(text).__name__}, not text")
    return text
