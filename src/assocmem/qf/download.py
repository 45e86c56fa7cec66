"""Fetch McCoy et al.'s question-formation files into a cache, sha256-checked.

``MCCOY_URLS`` point at data/question.{train,dev,test,gen} on the master branch of
tommccoy1/rnn-hierarchical-biases. question.dev and question.gen are pinned to the copies we hold
(1,000 and 10,000 lines), question.test to the hash published with the issue that asked for pinning.

question.train has no pin. McCoy's README says every task is split across .train/.dev/.test/.gen files in
``data/``, and third-party code fetches ``master/data/question.train`` by that raw URL (e.g. the rau
toolkit's README; sebschu/multilingual-transformations describes it as 100,000 training examples), but
the indexed copies of the repository we could search list no question.train (they also omit other large
files), and this machine cannot reach GitHub. So no hash can be known here: it is trusted on first use,
with a warning and the observed hash in the manifest; pin it in ``dataset.download.sha256`` afterwards.
100,000 lines give about 2.3M LM tokens (23.4 per example on McCoy's dev), matching the paper's "2M tokens".
"""

from __future__ import annotations

import hashlib
import http.client
import logging
import os
import urllib.error
import urllib.request
from pathlib import Path

from assocmem.errors import AssocmemError
from assocmem.io import atomic_path, sha256_file

log = logging.getLogger(__name__)

MCCOY_BASE_URL = "https://raw.githubusercontent.com/tommccoy1/rnn-hierarchical-biases/master/data"
MCCOY_URLS: dict[str, str] = {
    f"question.{split}": f"{MCCOY_BASE_URL}/question.{split}" for split in ("train", "dev", "test", "gen")
}
MCCOY_SHA256: dict[str, str | None] = {
    "question.train": None,  # not obtainable offline: trust on first use (see the module docstring)
    "question.dev": "bfa06ca46316917089e97c3c3f653fa3d1e786c9a0fa51b52d491bb0f471fdcb",
    "question.test": "498cd58830b732b6f5f40ad32f67a8f0d84dd73ad59c5035ec7c78bde75f280e",
    "question.gen": "037ae76f30c2df9779f02ff7245b6e798a79a264d456f9511839aafebc02e817",
}
_CHUNK = 1 << 16


def _offline_error(name: str, url: str, dest: Path, err: BaseException) -> AssocmemError:
    return AssocmemError(
        f"could not download {name} from {url}: {err}. This machine seems to be offline. Either set "
        f"dataset.source: generate in the config (the grammar ships with the package), or place the file "
        f"by hand at {dest}"
    )


def _download_one(name: str, url: str, expected: str | None, dest: Path, timeout: float) -> str:
    """Stream ``url`` to a temp file next to ``dest``, check its sha256, rename; return the hash."""
    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response, atomic_path(dest) as tmp:
            with open(tmp, "wb") as handle:
                while block := response.read(_CHUNK):
                    digest.update(block)
                    handle.write(block)
            observed = digest.hexdigest()
            if expected is not None and observed != expected:
                # Raising inside atomic_path deletes the temp file; dest is left untouched.
                raise AssocmemError(
                    f"sha256 mismatch for {name} downloaded from {url}: expected {expected}, "
                    f"observed {observed}; the downloaded file was deleted"
                )
    except urllib.error.HTTPError as err:
        raise AssocmemError(f"could not download {name} from {url}: HTTP {err.code} {err.reason}") from err
    except (urllib.error.URLError, http.client.HTTPException, TimeoutError, ConnectionError) as err:
        raise _offline_error(name, url, dest, err) from err
    return observed


def download_files(urls: dict[str, str], sha256: dict[str, str | None], cache_dir: str | os.PathLike[str],
                   *, timeout: float = 30) -> dict:
    """Download ``urls`` (name -> URL) into ``cache_dir``; return a manifest keyed by name.

    A file already cached with the expected hash is not fetched again. A None (or missing) hash means
    trust on first use: the file is kept, a warning is logged and the observed hash is reported. Each
    manifest entry holds url, path, sha256, status ("cached" or "downloaded") and trusted_on_first_use.
    Raises AssocmemError on hash mismatch (the bad file is deleted), HTTP errors, or no network.
    """
    cache = Path(cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    manifest = {}
    for name, url in urls.items():
        expected = sha256.get(name)
        dest = cache / name
        status = "cached"
        if dest.is_file() and expected is not None and sha256_file(dest) == expected:
            observed = expected
        elif dest.is_file() and expected is None:
            observed = sha256_file(dest)
        else:
            observed = _download_one(name, url, expected, dest, timeout)
            status = "downloaded"
        if expected is None:
            log.warning("no pinned sha256 for %s; trusting on first use: %s", name, observed)
        manifest[name] = {"url": url, "path": str(dest), "sha256": observed, "status": status,
                          "trusted_on_first_use": expected is None}
    return manifest


def fetch_qf(download: dict, out_dir: Path) -> dict:
    """Download (or take from the cache) McCoy's files named in the config's ``download`` section and copy
    them into ``out_dir``; returns the manifest entries (per file: url, path, sha256, status)."""
    import shutil

    urls = download["urls"] or MCCOY_URLS
    hashes = {**MCCOY_SHA256, **download["sha256"]}
    downloaded = download_files(urls, hashes, Path(download["cache_dir"]), timeout=download["timeout_s"])
    for name, entry in downloaded.items():
        with atomic_path(Path(out_dir) / name) as tmp:
            shutil.copyfile(entry["path"], tmp)
    return {"files": downloaded, "sha256": {name: entry["sha256"] for name, entry in downloaded.items()}}
