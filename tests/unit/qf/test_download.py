"""download_files against a loopback HTTP server (no internet needed)."""

from __future__ import annotations

import hashlib
import http.server
import logging
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import SHARED

from assocmem.errors import AssocmemError
from assocmem.qf.download import MCCOY_SHA256, MCCOY_URLS, download_files, fetch_qf

SHARED_DEV = SHARED / "data" / "question_formation" / "question.dev"
PAYLOAD = b"the yak doesn't swim . decl\tthe yak doesn't swim .\n" * 100
PAYLOAD_SHA = hashlib.sha256(PAYLOAD).hexdigest()


class _Server:
    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files
        self.requests: list[str] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server API)
                server.requests.append(self.path)
                body = server.files.get(self.path)
                if body is None:
                    self.send_error(404, "Not Found")
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02},
                                       daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"


@pytest.fixture
def server() -> Iterator[_Server]:
    srv = _Server({"/data/question.dev": PAYLOAD})
    srv.thread.start()
    yield srv
    srv.httpd.shutdown()
    srv.httpd.server_close()


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _no_temp_files(directory: Path) -> bool:
    return not [p for p in directory.iterdir() if p.name.startswith(".")]


def test_download_success_verifies_hash(server: _Server, tmp_path: Path) -> None:
    urls = {"question.dev": server.url("/data/question.dev")}
    manifest = download_files(urls, {"question.dev": PAYLOAD_SHA}, tmp_path)
    entry = manifest["question.dev"]
    assert (tmp_path / "question.dev").read_bytes() == PAYLOAD
    assert entry["sha256"] == PAYLOAD_SHA
    assert entry["status"] == "downloaded"
    assert entry["trusted_on_first_use"] is False
    assert server.requests == ["/data/question.dev"]
    assert _no_temp_files(tmp_path)


def test_cache_hit_makes_no_request(server: _Server, tmp_path: Path) -> None:
    urls = {"question.dev": server.url("/data/question.dev")}
    download_files(urls, {"question.dev": PAYLOAD_SHA}, tmp_path)
    again = download_files(urls, {"question.dev": PAYLOAD_SHA}, tmp_path)
    assert again["question.dev"]["status"] == "cached"
    assert len(server.requests) == 1


def test_cached_file_with_wrong_hash_is_fetched_again(server: _Server, tmp_path: Path) -> None:
    (tmp_path / "question.dev").write_bytes(b"corrupt")
    manifest = download_files({"question.dev": server.url("/data/question.dev")},
                              {"question.dev": PAYLOAD_SHA}, tmp_path)
    assert manifest["question.dev"]["status"] == "downloaded"
    assert (tmp_path / "question.dev").read_bytes() == PAYLOAD


def test_trust_on_first_use_records_hash_and_warns(server: _Server, tmp_path: Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    urls = {"question.dev": server.url("/data/question.dev")}
    with caplog.at_level(logging.WARNING, logger="assocmem.qf.download"):
        manifest = download_files(urls, {"question.dev": None}, tmp_path)
    assert manifest["question.dev"]["sha256"] == PAYLOAD_SHA
    assert manifest["question.dev"]["trusted_on_first_use"] is True
    assert any("trusting on first use" in r.getMessage() for r in caplog.records)
    assert download_files(urls, {}, tmp_path)["question.dev"]["status"] == "cached"


def test_hash_mismatch_deletes_file_and_names_both_hashes(server: _Server, tmp_path: Path) -> None:
    wrong = "0" * 64
    with pytest.raises(AssocmemError) as info:
        download_files({"question.dev": server.url("/data/question.dev")}, {"question.dev": wrong}, tmp_path)
    message = str(info.value)
    assert "question.dev" in message and wrong in message and PAYLOAD_SHA in message
    assert not (tmp_path / "question.dev").exists()
    assert _no_temp_files(tmp_path)


def test_http_404_is_reported(server: _Server, tmp_path: Path) -> None:
    with pytest.raises(AssocmemError, match="404"):
        download_files({"question.gen": server.url("/data/question.gen")}, {"question.gen": None}, tmp_path)
    assert not (tmp_path / "question.gen").exists()
    assert _no_temp_files(tmp_path)


def test_unreachable_host_says_offline_and_how_to_fix(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/data/question.dev"
    with pytest.raises(AssocmemError) as info:
        download_files({"question.dev": url}, {"question.dev": None}, tmp_path, timeout=5)
    message = str(info.value)
    assert "offline" in message
    assert "dataset.source: generate" in message
    assert str(tmp_path / "question.dev") in message
    assert _no_temp_files(tmp_path)


def test_mccoy_defaults_cover_four_splits() -> None:
    assert set(MCCOY_URLS) == {f"question.{s}" for s in ("train", "dev", "test", "gen")}
    assert all(u.startswith("https://raw.githubusercontent.com/tommccoy1/rnn-hierarchical-biases/")
               for u in MCCOY_URLS.values())
    # Every file with a knowable hash is pinned; question.train is trusted on first use (see the module).
    assert [k for k, v in MCCOY_SHA256.items() if v is None] == ["question.train"]
    assert MCCOY_SHA256["question.test"] == "498cd58830b732b6f5f40ad32f67a8f0d84dd73ad59c5035ec7c78bde75f280e"


@pytest.mark.parametrize("name", ["question.dev", "question.gen"])
def test_pinned_hashes_match_shared_copies(name: str) -> None:
    path = SHARED_DEV.parent / name
    if not path.is_file():
        pytest.skip(f"../shared {name} not present")
    assert hashlib.sha256(path.read_bytes()).hexdigest() == MCCOY_SHA256[name]


def test_fetch_qf_warns_only_for_the_unpinned_train_file(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    files = {f"/data/question.{s}": PAYLOAD for s in ("train", "dev")}
    srv = _Server(files)
    srv.thread.start()
    try:
        download = {"urls": {f"question.{s}": srv.url(f"/data/question.{s}") for s in ("train", "dev")},
                    "sha256": {"question.dev": PAYLOAD_SHA}, "cache_dir": str(tmp_path / "cache"), "timeout_s": 5}
        with caplog.at_level(logging.WARNING, logger="assocmem.qf.download"):
            result = fetch_qf(download, tmp_path / "out")
    finally:
        srv.httpd.shutdown()
        srv.httpd.server_close()
    warned = [r.getMessage() for r in caplog.records if "trusting on first use" in r.getMessage()]
    assert len(warned) == 1 and "question.train" in warned[0]
    assert result["files"]["question.train"]["trusted_on_first_use"]
    assert not result["files"]["question.dev"]["trusted_on_first_use"]
    assert (tmp_path / "out" / "question.train").read_bytes() == PAYLOAD
