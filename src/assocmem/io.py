"""Atomic, checksummed file I/O shared by every stage.

Every output a stage produces goes through :func:`atomic_path`: the writer fills a temporary
file in the destination directory and it is renamed into place only when the writer returns
without error. A killed job therefore never leaves a file that looks complete.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from assocmem.errors import AssocmemError


@contextlib.contextmanager
def atomic_path(dest: str | os.PathLike[str], suffix: str | None = None) -> Iterator[Path]:
    """Yield a temporary path next to ``dest``; rename it onto ``dest`` on success.

    ``suffix`` defaults to ``dest``'s own suffix, so libraries that append extensions
    (numpy, matplotlib, pandas) see the right one.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(
        prefix=f".{dest.name}.", suffix=".tmp" + (suffix if suffix is not None else dest.suffix),
        dir=dest.parent,
    )
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        tmp.chmod(0o644)  # mkstemp creates 0600; outputs are ordinary shared files
        os.replace(tmp, dest)
    except OSError as err:
        if err.errno in (errno.ENOSPC, errno.EDQUOT):
            raise AssocmemError(f"no space left on the device while writing {dest}: free some space and rerun; "
                                "files already complete were not touched") from err
        raise
    finally:
        if tmp.exists():
            tmp.unlink()


def write_text(dest: str | os.PathLike[str], text: str) -> None:
    with atomic_path(dest) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_bytes(dest: str | os.PathLike[str], data: bytes) -> None:
    with atomic_path(dest) as tmp:
        tmp.write_bytes(data)


def write_json(dest: str | os.PathLike[str], obj: Any) -> None:
    write_text(dest, json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n")


def rebuild_hint(path: str | os.PathLike[str]) -> str:
    """How to rebuild a damaged or missing artifact: delete it and rerun, or force its rule."""
    from assocmem.layout import producer
    from assocmem.rerun import forcerun_command, rerun_command

    rule = producer(path)
    force = f" (or `{forcerun_command(rule)}`)" if rule else ""
    return f"delete {path} and rerun `{rerun_command()}`{force}"


def read_json(path: str | os.PathLike[str]) -> Any:
    path = Path(path)
    if not path.exists():
        raise AssocmemError(f"missing file: {path}; {rebuild_hint(path)}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise AssocmemError(f"corrupt JSON in {path}: {err}; {rebuild_hint(path)}") from err
    except OSError as err:  # a directory, or a file this user may not read
        raise AssocmemError(f"cannot read {path}: {err.strerror or err}; {rebuild_hint(path)}") from err


FINITE_CHECK_BYTES = 64 << 20  # the slice of an array checked at a time, so a memory map is never copied whole


def count_nonfinite(array: np.ndarray, chunk_bytes: int = FINITE_CHECK_BYTES) -> int:
    """How many values of ``array`` are NaN or inf (0 for a non-float dtype), counted over slices of about
    ``chunk_bytes``: a memory-mapped array is read slice by slice, never copied whole."""
    if not np.issubdtype(array.dtype, np.inexact) or array.size == 0:
        return 0
    flat = array.reshape(-1, order="A")  # a view of a C- or Fortran-ordered array (a memory map stays one)
    step = max(1, chunk_bytes // array.itemsize)
    return sum(int(np.count_nonzero(~np.isfinite(flat[start:start + step]))) for start in range(0, flat.size, step))


def require_finite(array: np.ndarray, what: str, fix: str) -> None:
    """Raise AssocmemError naming ``what`` and how many values are NaN or inf, and ``fix``, when any is."""
    bad = count_nonfinite(array)
    if bad:
        raise AssocmemError(f"{what}: {bad} of {array.size} values are not finite (NaN or inf); {fix}")


def load_npy(path: str | os.PathLike[str], *, shape: tuple[int | None, ...] | None = None,
             dtype: str | None = None, finite: bool = True) -> np.ndarray:
    """Memory-map an ``.npy`` array, checking that the file holds what its header says (and the expected shape
    and dtype, None entries matching anything) and, with ``finite``, that no value is NaN or inf (checked slice
    by slice: :func:`count_nonfinite`)."""
    path = Path(path)
    if not path.exists():
        raise AssocmemError(f"missing file: {path}; {rebuild_hint(path)}")
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as err:
        raise AssocmemError(f"corrupt array file {path} ({err}): truncated or not an .npy file; "
                            f"{rebuild_hint(path)}") from err
    wrong_shape = shape is not None and (len(shape) != array.ndim or any(
        want is not None and want != got for want, got in zip(shape, array.shape, strict=False)))
    if wrong_shape or (dtype is not None and array.dtype != np.dtype(dtype)):
        raise AssocmemError(f"{path} holds {array.dtype} {array.shape}, expected {dtype or 'any dtype'} "
                            f"{shape}; {rebuild_hint(path)}")
    if finite:
        require_finite(array, str(path), f"a diverged model or a damaged file: {rebuild_hint(path)}")
    return array


def read_table(path: str | os.PathLike[str], columns: Sequence[str] = ()) -> Any:
    """A parquet or CSV artifact as a pandas DataFrame, with the listed columns present (a CSV also whole: every
    CSV the stages write ends with a line break, so one cut mid-row is refused)."""
    import pandas as pd

    path = Path(path)
    if not path.exists():
        raise AssocmemError(f"missing file: {path}; {rebuild_hint(path)}")
    if path.suffix == ".csv" and not _ends_with_newline(path):
        raise AssocmemError(f"{path} is cut mid-row (it does not end with a line break): damaged or cut; "
                            f"{rebuild_hint(path)}")
    try:
        frame = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    except Exception as err:  # noqa: BLE001 - pyarrow and pandas raise many types for a damaged file
        raise AssocmemError(f"corrupt table {path} ({type(err).__name__}: {err}); {rebuild_hint(path)}") from err
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise AssocmemError(f"{path} lacks column(s) {missing}; {rebuild_hint(path)}")
    return frame


def _ends_with_newline(path: Path) -> bool:
    """True when ``path`` ends with a line break (or is empty, which the CSV reader itself refuses)."""
    with open(path, "rb") as handle:
        if handle.seek(0, os.SEEK_END) == 0:
            return True
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) == b"\n"


def expect_rows(frame: Any, path: str | os.PathLike[str], expected: int, why: str) -> None:
    """A table read back must hold the rows its producer wrote (``why``: what implies ``expected``); any other count
    means a damaged or cut file, refused naming it."""
    if len(frame) != expected:
        raise AssocmemError(f"{path} has {len(frame)} rows, expected {expected} ({why}): damaged or cut; "
                            f"{rebuild_hint(path)}")


def save_torch(dest: str | os.PathLike[str], obj: Any) -> None:
    """torch.save atomically and byte-reproducibly (through a file handle, so the temporary file's name never
    ends up inside the archive)."""
    import torch

    with atomic_path(dest) as tmp, open(tmp, "wb") as handle:
        try:
            torch.save(obj, handle)
        except RuntimeError as err:  # torch reports a full disk as "unexpected pos ..."
            if "unexpected pos" not in str(err):
                raise
            raise OSError(errno.ENOSPC, f"torch.save failed ({err})") from err


def load_torch(path: str | os.PathLike[str], what: str = "checkpoint") -> Any:
    """torch.load(weights_only=True) with a clear error for a missing, truncated or corrupt file."""
    import torch

    path = Path(path)
    if not path.exists():
        raise AssocmemError(f"{what} file not found: {path}; {rebuild_hint(path)}")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - zip, pickle and OS errors all mean a damaged file
        first_line = next(iter(str(err).strip().splitlines()), "")  # torch's own messages run to many lines
        raise AssocmemError(f"cannot read {what} {path}: truncated or corrupt, or not a torch file "
                            f"({type(err).__name__}: {first_line}); {rebuild_hint(path)}") from err


def write_npy(dest: str | os.PathLike[str], array: np.ndarray) -> None:
    with atomic_path(dest, suffix=".npy") as tmp:
        np.save(tmp, array)


def write_parquet(dest: str | os.PathLike[str], frame: Any) -> None:
    """Write a pandas DataFrame to parquet atomically."""
    with atomic_path(dest, suffix=".parquet") as tmp:
        frame.to_parquet(tmp, index=False)


def write_csv(dest: str | os.PathLike[str], frame: Any) -> None:
    with atomic_path(dest, suffix=".csv") as tmp:
        frame.to_csv(tmp, index=False)


def sha256_file(path: str | os.PathLike[str], chunk_size: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk_size):
            digest.update(block)
    return digest.hexdigest()


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
