"""End-to-end: the whole Snakemake DAG on config/test.yaml in a temporary directory."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import yaml
from conftest import NOT_SCIENCE, ROOT, snakemake
from helpers import planned_rules

pytestmark = pytest.mark.e2e


@pytest.fixture
def finished_run(tiny_copy) -> Path:
    return tiny_copy


def test_report_artifacts(finished_run):
    report = finished_run / "results" / "report"
    for name in ("index.html", "report.md", "checks.json"):
        assert (report / name).stat().st_size > 1000, name
    figures = {p.name for p in (report / "figures").iterdir()}
    for stem in ("training_curves_qf", "nn_by_layer_qf", "nn_qf_tiny_pct100", "fig1_landscapes",
                 "eq12_ball_integral"):
        assert {f"{stem}.png", f"{stem}.pdf"} <= figures
    html = (report / "index.html").read_text()
    assert "data:image/png;base64," in html and "<img src=\"figures/" not in html  # self-contained
    assert not (finished_run / "results" / ".assocmem-run.json").exists()  # the run released its results_dir
    # issue 29: the run header (commit, this config file, host, packages), the toy banner, the regime column
    markdown = (report / "report.md").read_text()
    for page in (html, markdown):
        assert "Toy configuration" in page and "config/test.yaml (sha256 " in page and "torch 2." in page
        assert "| regime |" in markdown and "converged" in page


def test_checks_hold_real_numbers(finished_run):
    checks = json.loads((finished_run / "results" / "report" / "checks.json").read_text())["checks"]
    ids = {c["id"] for c in checks}
    assert {"prop1", "radius", "prop2", "prop3", "eq8", "eq12", "lemma5", "prop4", "loss_floor",
            "overfit", "literature", "fig1"} <= ids
    verdicts = {"reproduced", "refuted", "corrected", "not-testable"}
    for check in checks:
        assert check["verdict"] in verdicts
        numeric = [v for v in check["numbers"].values() if isinstance(v, int | float) and not isinstance(v, bool)]
        assert numeric and any(math.isfinite(v) and v != 0 for v in numeric), check["id"]
    prop1 = next(c for c in checks if c["id"] == "prop1")
    assert any(k.startswith("tiny/pct100/final_ln") for k in prop1["numbers"])  # evaluated on real activations


def test_floor_and_training_outputs(finished_run):
    results = finished_run / "results" / "qf"
    floor = json.loads((results / "data" / "floor.json").read_text())
    assert 0.5 < floor["train"]["floor_nats_per_token"] < 2.0
    metrics = (results / "train" / "tiny" / "pct10" / "metrics.csv").read_text().splitlines()
    assert metrics[0].startswith("step,") and len(metrics) == 4  # header + 3 evals (60 steps / 20)


def test_library_choices_are_recorded_beside_the_science(finished_run):
    """train.gemm and neighbours.cpu_engine auto: the choice and how it was made in each job's timing.json (the tiny
    model's products are all under oneDNN's threshold and its searches small, so nothing is timed or cached)."""
    results = finished_run / "results" / "qf"
    train = json.loads((results / "train" / "tiny" / "pct100" / "timing.json").read_text())
    assert train["gemm"] == train["gemm_choice"]["value"] == "native"
    assert train["gemm_choice"]["how"] in ("identical", "unavailable")
    search = json.loads((results / "neighbours" / "tiny" / "pct100" / "timing.json").read_text())["cpu_engine"]
    assert (search["value"], search["how"]) in (("faiss", "small"), ("faiss", "unavailable"))
    assert not (finished_run / "results" / ".cache" / "choices.json").exists()


def provenance_stages(report_md: str) -> list[str]:
    """The stage column of the report's provenance timing table."""
    table = report_md.split("| stage | wall time (s) | peak RSS (MB) |\n", 1)[1].split("\n\n", 1)[0]
    return [line.split(" | ")[0].removeprefix("| ") for line in table.splitlines()[1:]]


def test_report_provenance_times_exactly_the_current_jobs(finished_run):
    """Every job of the config but the report itself (whose timing is written after it), each once, and nothing
    else: a benchmark left by a job the config no longer has is not read."""
    benchmarks = finished_run / "results" / "benchmarks"
    jobs = {path.relative_to(benchmarks).with_suffix("").as_posix() for path in benchmarks.rglob("*.tsv")}
    stages = provenance_stages((finished_run / "results" / "report" / "report.md").read_text())
    assert len(stages) == len(set(stages)) == 13 and set(stages) == jobs - {"report"}
    (benchmarks / "qf" / "train_tiny_pct50.tsv").write_text((benchmarks / "qf" / "tokenize.tsv").read_text())
    snakemake(finished_run, "--cores", "1", "--forcerun", "report")
    assert provenance_stages((finished_run / "results" / "report" / "report.md").read_text()) == stages


def report_files(report: Path) -> dict[str, bytes]:
    """Every file of the report, its build time removed (the header's "built" row); its stamp aside (it records the
    files' times and the threads the build ran on)."""
    files = {path.relative_to(report).as_posix(): path.read_bytes() for path in report.rglob("*")
             if path.is_file() and path.name != "provenance.json"}
    return {name: re.sub(rb"\| built \| [^|]* \||<td>[^<]* UTC</td>", b"", data) if name.endswith((".md", ".html"))
            else data for name, data in files.items()}


def test_the_report_is_the_same_drawn_in_forked_writers_or_in_place(finished_run):
    """The tiny run's report (2 cores: its figures drawn and written by forked children, the theory figures from
    the start, the claims judged around the runs' figures) against the same report on 1 core (every figure drawn
    and written in place, in order): the same bytes but the build time."""
    report = finished_run / "results" / "report"
    forked = report_files(report)
    snakemake(finished_run, "--cores", "1", "--forcerun", "report")
    in_place = report_files(report)
    assert forked.keys() == in_place.keys() and sum(name.endswith(".pdf") for name in forked) >= 5
    assert [name for name in forked if forked[name] != in_place[name]] == []


def test_second_invocation_is_a_noop(finished_run):
    before = science_file_times(finished_run / "results")
    result = snakemake(finished_run, "--cores", "2")
    assert "Nothing to be done" in result.stdout + result.stderr
    assert science_file_times(finished_run / "results") == before  # no job ran, no artifact was rewritten


def science_file_times(results: Path) -> dict[str, int]:
    files = (path for path in results.rglob("*") if path.is_file())
    return {path.relative_to(results).as_posix(): path.stat().st_mtime_ns for path in files
            if not any(part in path.relative_to(results).as_posix() for part in NOT_SCIENCE)}


def test_changing_a_training_key_reruns_only_training_and_descendants(finished_run, tmp_path):
    config = yaml.safe_load((ROOT / "config" / "test.yaml").read_text())
    config["experiments"]["qf"]["train"]["lr"] = 1e-3
    changed = tmp_path / "changed.yaml"
    changed.write_text(yaml.safe_dump(config))
    plan = planned_rules(snakemake(finished_run, "-n", "--cores", "2", config=changed))
    assert plan == {"train", "activations", "neighbours", "evaluate", "report"}


def test_forcerun_and_single_target(finished_run):
    plan = planned_rules(snakemake(finished_run, "-n", "--cores", "1", "--forcerun", "neighbours"))
    assert plan == {"neighbours", "report"}
    target = "results/qf/data/subsets/pct10/meta.json"
    assert planned_rules(snakemake(finished_run, "-n", "--cores", "1", target)) == set()


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda c: c["experiments"]["qf"]["subsets"].update(fractions=[1.5]),
         "experiments.qf.subsets.fractions[0]"),
        (lambda c: c["experiments"]["qf"].update(unknown_key=1), "unknown_key"),
        (lambda c: c["experiments"]["qf"]["dataset"]["sizes"].update(train=-1),
         "experiments.qf.dataset.sizes.train"),
        (lambda c: c["experiments"]["qf"]["dataset"].pop("name"), "'name' is a required property"),
    ],
)
def test_malformed_config_fails_before_any_job(tmp_path, mutate, expected):
    config = yaml.safe_load((ROOT / "config" / "test.yaml").read_text())
    mutate(config)
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(config))
    result = snakemake(tmp_path, "--cores", "1", config=bad, check=False, timeout=120)
    assert result.returncode != 0
    assert expected in result.stdout + result.stderr
    assert not (tmp_path / "results").exists()


def test_terminal_is_short_and_names_each_job_with_its_log(tiny_run_terminal):
    """The default profile keeps Snakemake's output short: each job is one line naming it and its log (the rules'
    `message:`), not a block listing every input (the `all` rule's alone was 2,813 characters)."""
    _, terminal = tiny_run_terminal
    lines = terminal.splitlines()
    assert max(len(line) for line in lines) <= 160, max(lines, key=len)
    assert not [line for line in lines if line.lstrip().startswith(("input:", "output:", "reason:", "Reason:"))]
    started = [line for line in lines if re.match(r"Job \d+: ", line)]
    assert any(line.endswith("train: qf tiny/pct100 (log: results/logs/qf/train_tiny_pct100.log)")
               for line in started), started
    jobs = [line for line in started if "(log: results/logs/" in line]
    assert len(jobs) == len(started) - 1  # every job but `all`
    assert sum(line.startswith("assocmem: ") for line in lines) >= len(jobs)


def test_a_failing_job_shows_its_rule_log_and_error(tiny_copy):
    """Short output must not hide a failure: Snakemake's "Error in rule" block and the failed log stay."""
    shard = tiny_copy / "results/qf/data/tokens/train_00000.bin"
    shard.write_bytes(shard.read_bytes()[:100])
    result = snakemake(tiny_copy, "--cores", "1", "--forcerun", "subsets", check=False, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "Error in rule subsets:" in output, output[-3000:]
    assert "Logfile results/logs/qf/subsets_pct" in output, output[-3000:]
    assert "corrupt token store: shard results/qf/data/tokens/train_00000.bin" in output, output[-3000:]
