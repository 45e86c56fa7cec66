"""The report's run header (assocmem.report.header): when and from what the report was built, and the toy banner."""

from __future__ import annotations

import subprocess

from assocmem.report.header import TOY_BANNER, RunHeader, config_state, git_state, run_header


def test_the_header_names_date_commit_config_host_and_packages(tmp_path):
    config_file = tmp_path / "my config.yaml"
    config_file.write_text("seed: 1\n")
    header = run_header({"report": {}}, [{"path": str(config_file), "sha256": ""}], ["cpu"],
                        {"torch": "2.13.0", "python": "3.11.7"})
    rows = dict(header.rows)
    assert set(rows) == {"built", "code", "config", "host", "packages"} and header.banner is None
    assert rows["built"].endswith("UTC") and "my config.yaml (sha256 " in rows["config"]
    assert "runs on cpu" in rows["host"] and "torch 2.13.0" in rows["packages"] and "faiss-cpu n/a" in rows["packages"]


def test_a_toy_config_gets_the_banner_in_both_pages():
    header = run_header({"report": {"toy": True}}, [], [], {})
    assert header.banner == TOY_BANNER
    assert TOY_BANNER in header.markdown() and "class='toy-banner'" in header.html()
    assert config_state([]) == "config/config.yaml (the default)"


def test_the_html_header_escapes_what_it_shows():
    header = RunHeader((("config", "<b>x</b> & y"),))
    assert "&lt;b&gt;x&lt;/b&gt; &amp; y" in header.html()


def test_git_state_reads_the_commit_and_the_dirty_flag(tmp_path):
    assert git_state(tmp_path) == "not a git checkout"
    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)
    git("init", "-q")
    (tmp_path / "src").mkdir()
    for name in ("src/f.py", "Snakefile", "README.md"):
        (tmp_path / name).write_text("a")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "c")
    clean = git_state(tmp_path)
    assert clean.startswith("git ") and len(clean.split()[1]) == 12 and "uncommitted" not in clean
    (tmp_path / "README.md").write_text("b")  # the docs are not the code that ran
    assert git_state(tmp_path) == clean
    for name in ("src/f.py", "Snakefile"):
        (tmp_path / name).write_text("b")
        assert git_state(tmp_path) == clean + " (uncommitted changes)"
        git("checkout", "--", name)


def test_the_config_files_come_from_the_workflow_environment(monkeypatch):
    from assocmem.report.header import config_files_of_the_run

    monkeypatch.setenv("ASSOCMEM_CONFIG_FILES", '[{"path": "config/test.yaml", "sha256": "ab"}, "my {odd} file.yaml"]')
    assert config_files_of_the_run() == [{"path": "config/test.yaml", "sha256": "ab"},
                                         {"path": "my {odd} file.yaml", "sha256": ""}]
    monkeypatch.setenv("ASSOCMEM_CONFIG_FILES", "not json")
    assert config_files_of_the_run() == []
    monkeypatch.delenv("ASSOCMEM_CONFIG_FILES")
    assert config_files_of_the_run() == []


def test_the_config_is_named_by_its_digest_when_the_run_started(tmp_path):
    """Issue 39: a config file edited while the run trains (the run keeps the text it started with) is named by the
    sha256 it had at the start, with a note that it changed since."""
    from assocmem.io import sha256_file

    path = tmp_path / "run.yaml"
    path.write_text("train: {lr: 0.001}\n")
    at_start = sha256_file(path)
    assert config_state([{"path": str(path), "sha256": at_start}]) == f"{path} (sha256 {at_start[:12]})"
    path.write_text("train: {lr: 0.1}\n")
    assert config_state([{"path": str(path), "sha256": at_start}]) == (
        f"{path} (sha256 {at_start[:12]} when the run started; now sha256 {sha256_file(path)[:12]}: the run used the "
        "text it started with)")
