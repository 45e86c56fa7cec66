"""Tokenizers for the corpus path: tiktoken's GPT-2 BPE, a Hugging Face tokenizer, or a byte-level BPE trained
on the corpus itself (the offline stand-in).

Every tokenizer encodes *ordinary* text: a literal ``<|endoftext|>`` inside a document is encoded as text,
never as the end-of-text id, so the end-of-text id in a token stream always marks a document boundary
(nanoGPT uses ``encode_ordinary`` for the same reason).

Tokenizers are picklable (see :class:`assocmem.tokenwriter.Tokenizer`).
"""

from __future__ import annotations

import hashlib
import os
import socket
import tempfile
from collections.abc import Iterable
from itertools import islice
from pathlib import Path
from typing import Any

from assocmem.errors import AssocmemError
from assocmem.io import sha256_file, write_text
from assocmem.tokenwriter import Tokenizer

EOT_TEXT = "<|endoftext|>"
TIKTOKEN_HOST = "openaipublic.blob.core.windows.net"
_TIKTOKEN_FILES = {
    "gpt2": (
        "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/vocab.bpe",
        "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/encoder.json",
    ),
}
_PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")


CorpusTokenizer = Tokenizer  # the corpus tokenizers share the writer's interface


class TiktokenTokenizer(CorpusTokenizer):
    def _build(self) -> None:
        encoding_name = self.spec.get("encoding", "gpt2")
        self._encoding = _load_tiktoken(encoding_name, float(self.spec.get("network_timeout_s", 5.0)))
        self.name = f"tiktoken:{encoding_name}"
        self.vocab_size = int(self._encoding.n_vocab)
        self.eot_id = int(self._encoding.eot_token)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        if self.num_threads == 1:
            return [self._encoding.encode_ordinary(text) for text in texts]
        return self._encoding.encode_ordinary_batch(texts, num_threads=self.num_threads or 8)

    def decode(self, ids: list[int]) -> str:
        return self._encoding.decode(ids)


class HFTokenizer(CorpusTokenizer):
    def _build(self) -> None:
        self._tokenizer = _load_hf_tokenizer(self.spec)
        eot_token = self.spec.get("eot_token")
        tokenizer = self._tokenizer
        eot_id = tokenizer.convert_tokens_to_ids(eot_token) if eot_token else tokenizer.eos_token_id
        if eot_id is None or (eot_token and eot_id == tokenizer.unk_token_id):
            raise AssocmemError(
                f"HF tokenizer {self.spec['name']!r} has no end-of-text token (eos_token is None or "
                f"eot_token {eot_token!r} unknown); set 'eot_token' in the tokenizer spec"
            )
        revision = self.spec.get("revision")
        self.name = f"hf:{self.spec['name']}" + (f"@{revision}" if revision else "")
        self.vocab_size = len(self._tokenizer)
        self.eot_id = int(eot_id)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        options = {"add_special_tokens": False, "split_special_tokens": True, "verbose": False}
        if self.num_threads == 1:
            return [self._tokenizer(text, **options)["input_ids"] for text in texts]
        return self._tokenizer(list(texts), **options)["input_ids"]

    def decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def __getstate__(self) -> dict[str, Any]:
        # this process already downloaded the files: copies (worker processes) load them from the local cache
        return {"spec": {**self.spec, "local_files_only": True}, "num_threads": self.num_threads}


class ByteLevelBPE(CorpusTokenizer):
    def _build(self) -> None:
        from tokenizers import Tokenizer

        path = Path(_required(self.spec, "path", "bytelevel_bpe tokenizer"))
        if not path.exists():
            raise AssocmemError(
                f"byte-level BPE file {path} does not exist: train it first with "
                "get_tokenizer(spec, train_texts=...) or train_bytelevel_bpe(...)"
            )
        digest = sha256_file(path)
        expected = self.spec.get("sha256")
        if expected and expected != digest:
            raise AssocmemError(
                f"byte-level BPE file {path} changed: sha256 {digest[:12]}, expected {expected[:12]}"
            )
        self.spec["sha256"] = digest
        self._tokenizer = Tokenizer.from_file(str(path))
        self._tokenizer.encode_special_tokens = True  # ordinary encoding: "<|endoftext|>" in text stays text
        eot_token = self.spec.get("eot_token", EOT_TEXT)
        eot_id = self._tokenizer.token_to_id(eot_token)
        if eot_id is None:
            raise AssocmemError(f"byte-level BPE file {path} has no {eot_token!r} token")
        self.name = f"bytelevel_bpe:{path.name}:{digest[:12]}"
        self.vocab_size = int(self._tokenizer.get_vocab_size(with_added_tokens=True))
        self.eot_id = int(eot_id)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        if self.num_threads == 1:
            return [self._tokenizer.encode(text, add_special_tokens=False).ids for text in texts]
        encodings = self._tokenizer.encode_batch(list(texts), add_special_tokens=False)
        return [encoding.ids for encoding in encodings]

    def decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=False)


_KINDS: dict[str, type[CorpusTokenizer]] = {
    "tiktoken": TiktokenTokenizer,
    "hf": HFTokenizer,
    "bytelevel_bpe": ByteLevelBPE,
}


def get_tokenizer(spec: dict[str, Any], *, train_texts: Iterable[str] | None = None) -> CorpusTokenizer:
    """Build the tokenizer described by ``spec``.

    spec keys -- ``kind``: "tiktoken" (``encoding``, default "gpt2"; ``network_timeout_s``), "hf" (``name``,
    ``revision``, ``local_files_only``, ``cache_dir``, ``eot_token``) or "bytelevel_bpe" (``path`` of the JSON
    file, ``vocab_size``, ``min_frequency``, ``train_docs``, ``eot_token``). A bytelevel_bpe whose file is
    missing is trained on ``train_texts`` (the first ``train_docs`` of them, if set) and saved to ``path``.
    """
    kind = spec.get("kind")
    if kind not in _KINDS:
        raise AssocmemError(f"tokenizer spec key 'kind' is {kind!r}; expected one of {sorted(_KINDS)}")
    if kind == "bytelevel_bpe" and train_texts is not None:
        path = Path(_required(spec, "path", "bytelevel_bpe tokenizer"))
        if not path.exists():
            limit = spec.get("train_docs")
            texts = islice(train_texts, int(limit)) if limit else train_texts
            train_bytelevel_bpe(
                texts, path, vocab_size=int(spec.get("vocab_size", 8192)),
                min_frequency=int(spec.get("min_frequency", 2)), eot_token=spec.get("eot_token", EOT_TEXT),
            )
    return _KINDS[kind](spec)


def train_bytelevel_bpe(
    texts: Iterable[str], path: str | os.PathLike[str], *, vocab_size: int, min_frequency: int = 2,
    eot_token: str = EOT_TEXT,
) -> Path:
    """Train a GPT-2-style byte-level BPE on ``texts`` and save it (atomically) as a tokenizers JSON file.

    The end-of-text token gets id 0. Training is deterministic for identical input (the trainer breaks count
    ties by the pair itself), so the same corpus gives the same file.
    """
    from tokenizers import ByteLevelBPETokenizer

    tokenizer = ByteLevelBPETokenizer(add_prefix_space=False)
    tokenizer.train_from_iterator(
        texts, vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=[eot_token],
        show_progress=False,
    )
    write_text(path, tokenizer.to_str(pretty=True))
    return Path(path)


def _required(spec: dict[str, Any], key: str, what: str) -> Any:
    if not spec.get(key):
        raise AssocmemError(f"{what} spec needs key {key!r}")
    return spec[key]


def tiktoken_cache_dir() -> Path:
    """The directory tiktoken reads cached BPE files from (same rule as tiktoken.load.read_file_cached)."""
    for variable in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if variable in os.environ:
            return Path(os.environ[variable])
    return Path(tempfile.gettempdir()) / "data-gym-cache"


def _tiktoken_files_cached(encoding_name: str) -> bool:
    urls = _TIKTOKEN_FILES.get(encoding_name)
    if urls is None:
        return False
    cache = tiktoken_cache_dir()
    return all((cache / hashlib.sha1(url.encode()).hexdigest()).exists() for url in urls)


def _host_unreachable_reason(host: str, timeout_s: float) -> str | None:
    """None if ``host:443`` accepts a TCP connection within the timeout, else why not."""
    if any(os.environ.get(variable) for variable in _PROXY_VARIABLES):
        return None  # behind a proxy a direct connection says nothing; let tiktoken try
    try:
        with socket.create_connection((host, 443), timeout=timeout_s):
            return None
    except OSError as err:
        return f"{type(err).__name__}: {err}"


def _load_tiktoken(encoding_name: str, timeout_s: float) -> Any:
    import tiktoken

    advice = (
        f"Run once with network access, or copy the cached files into {tiktoken_cache_dir()} "
        "(TIKTOKEN_CACHE_DIR), or use tokenizer kind 'bytelevel_bpe' (trained on the corpus, fully offline)."
    )
    if not _tiktoken_files_cached(encoding_name):
        reason = _host_unreachable_reason(TIKTOKEN_HOST, timeout_s)
        if reason is not None:
            raise AssocmemError(
                f"tiktoken encoding {encoding_name!r} is not available offline: its BPE files are not in "
                f"the tiktoken cache {tiktoken_cache_dir()} and {TIKTOKEN_HOST} cannot be reached "
                f"({reason}). {advice}"
            )
    try:
        return tiktoken.get_encoding(encoding_name)
    except Exception as err:  # noqa: BLE001 - any download/parse failure gets the same advice
        raise AssocmemError(
            f"tiktoken encoding {encoding_name!r} could not be loaded ({type(err).__name__}: {err}). {advice}"
        ) from err


def _load_hf_tokenizer(spec: dict[str, Any]) -> Any:
    from transformers import AutoTokenizer

    name = _required(spec, "name", "hf tokenizer")
    local_only = bool(spec.get("local_files_only", False))
    try:
        return AutoTokenizer.from_pretrained(
            name, revision=spec.get("revision"), local_files_only=local_only, cache_dir=spec.get("cache_dir"),
            trust_remote_code=False,
        )
    except (OSError, ValueError) as err:
        offline = local_only or os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0", "false", "False")
        where = "offline (local_files_only / HF_HUB_OFFLINE) and not cached" if offline else "unavailable"
        raise AssocmemError(
            f"HF tokenizer {name!r} (spec key 'name', cache_dir={spec.get('cache_dir')}) is {where}: "
            f"{type(err).__name__}: {err}. Download it once with network access, point 'name' at a local "
            "directory, or use tokenizer kind 'bytelevel_bpe'."
        ) from err
