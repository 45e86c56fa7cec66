"""Tests for assocmem.corpus.bpe: the offline byte-level BPE, a local Hugging Face tokenizer, and the errors
for tokenizers that cannot be had offline (tiktoken gpt2, HF hub names)."""

from __future__ import annotations

import pickle
import random
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from assocmem.corpus import bpe
from assocmem.corpus.bpe import EOT_TEXT, get_tokenizer, train_bytelevel_bpe
from assocmem.errors import AssocmemError

LETTERS = "abcdefghijklmnopqrstuvwxyz"


def make_texts(n: int = 400, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    words = ["".join(rng.choice(LETTERS) for _ in range(rng.randint(2, 8))) for _ in range(300)]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(5, 60))) + "." for _ in range(n)]


@pytest.fixture(scope="module")
def bytelevel(tmp_path_factory: pytest.TempPathFactory) -> bpe.CorpusTokenizer:
    path = tmp_path_factory.mktemp("bpe") / "tok.json"
    return get_tokenizer({"kind": "bytelevel_bpe", "path": str(path), "vocab_size": 600},
                         train_texts=iter(make_texts()))


def test_bytelevel_is_trained_saved_and_reloaded(bytelevel):
    path = Path(bytelevel.spec["path"])
    assert path.exists()
    assert bytelevel.eot_id == 0 and bytelevel.vocab_size == 600
    assert bytelevel.name.startswith("bytelevel_bpe:tok.json:")
    reloaded = get_tokenizer({"kind": "bytelevel_bpe", "path": str(path)})
    texts = make_texts(20, seed=1)
    assert reloaded.encode_batch(texts) == bytelevel.encode_batch(texts)
    assert reloaded.name == bytelevel.name


def test_bytelevel_training_is_deterministic_across_processes(tmp_path):
    texts = make_texts(300, seed=2)
    first = train_bytelevel_bpe(texts, tmp_path / "a.json", vocab_size=500)
    code = (
        "import sys; from assocmem.corpus.bpe import train_bytelevel_bpe; "
        "from tests_texts import texts; train_bytelevel_bpe(texts, sys.argv[1], vocab_size=500)"
    )
    (tmp_path / "tests_texts.py").write_text(f"texts = {texts!r}\n")
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "b.json")], check=True, cwd=tmp_path)
    assert first.read_bytes() == (tmp_path / "b.json").read_bytes()


def test_encode_batch_appends_nothing_and_treats_eot_text_as_text(bytelevel):
    ids = bytelevel.encode_batch([f"abc {EOT_TEXT} def", ""])
    assert ids[1] == []
    assert bytelevel.eot_id not in ids[0]
    assert bytelevel.decode(ids[0]) == f"abc {EOT_TEXT} def"


def test_sequential_batched_and_unpickled_encodings_agree(bytelevel):
    texts = make_texts(50, seed=3)
    batched = bytelevel.encode_batch(texts)
    assert bytelevel.with_threads(1).encode_batch(texts) == batched
    clone = pickle.loads(pickle.dumps(bytelevel))
    assert clone.encode_batch(texts) == batched
    assert all(isinstance(token, int) for ids in batched for token in ids)


@settings(max_examples=80, deadline=None)
@given(text=st.text(max_size=200))
def test_bytelevel_round_trips_any_text(bytelevel, text):
    (ids,) = bytelevel.encode_batch([text])
    assert all(0 <= token < bytelevel.vocab_size for token in ids)
    assert bytelevel.decode(ids) == text


def test_bytelevel_errors_name_the_file(tmp_path, bytelevel):
    with pytest.raises(AssocmemError, match=r"missing\.json does not exist"):
        get_tokenizer({"kind": "bytelevel_bpe", "path": str(tmp_path / "missing.json")})
    with pytest.raises(AssocmemError, match=r"changed: sha256"):
        get_tokenizer({"kind": "bytelevel_bpe", "path": bytelevel.spec["path"], "sha256": "0" * 64})
    with pytest.raises(AssocmemError, match="'kind' is 'sentencepiece'"):
        get_tokenizer({"kind": "sentencepiece"})


def test_tiktoken_without_cache_or_network_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty-cache"))
    for variable in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(bpe, "TIKTOKEN_HOST", "tiktoken-host.invalid")  # never resolves (RFC 6761)
    with pytest.raises(AssocmemError) as info:
        get_tokenizer({"kind": "tiktoken", "encoding": "gpt2", "network_timeout_s": 1})
    message = str(info.value)
    assert "'gpt2' is not available offline" in message
    assert str(tmp_path / "empty-cache") in message
    assert "bytelevel_bpe" in message


def test_tiktoken_cache_dir_follows_tiktoken_rules(tmp_path, monkeypatch):
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    monkeypatch.setenv("DATA_GYM_CACHE_DIR", str(tmp_path))
    assert bpe.tiktoken_cache_dir() == tmp_path
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "t"))
    assert bpe.tiktoken_cache_dir() == tmp_path / "t"


@pytest.fixture(scope="module")
def hf_directory(bytelevel, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    directory = tmp_path_factory.mktemp("hf-tokenizer")
    backend = Tokenizer.from_file(bytelevel.spec["path"])
    PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=EOT_TEXT).save_pretrained(directory)
    return directory


def test_hf_tokenizer_from_a_local_directory_matches_its_backend(bytelevel, hf_directory):
    tokenizer = get_tokenizer({"kind": "hf", "name": str(hf_directory), "local_files_only": True})
    texts = make_texts(30, seed=4) + [f"x {EOT_TEXT} y"]
    assert tokenizer.eot_id == bytelevel.eot_id and tokenizer.vocab_size == bytelevel.vocab_size
    assert tokenizer.encode_batch(texts) == bytelevel.encode_batch(texts)
    assert tokenizer.with_threads(1).encode_batch(texts) == bytelevel.encode_batch(texts)
    clone = pickle.loads(pickle.dumps(tokenizer))
    assert clone.spec["local_files_only"] is True  # copies never go back to the network
    assert clone.encode_batch(texts[:3]) == bytelevel.encode_batch(texts[:3])


def test_hf_tokenizer_missing_offline_says_so(tmp_path):
    spec = {"kind": "hf", "name": "gpt2", "local_files_only": True, "cache_dir": str(tmp_path / "empty")}
    with pytest.raises(AssocmemError) as info:
        get_tokenizer(spec)
    message = str(info.value)
    assert "'gpt2'" in message and "offline" in message and "bytelevel_bpe" in message
