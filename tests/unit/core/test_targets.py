"""Targets on the command line checked against the config before any job (assocmem.targets), and the
``assocmem run`` reordering of a target written after ``--configfile``."""

from __future__ import annotations

import pytest

from assocmem import layout, targets
from assocmem.cli import targets_out_of_configfile

EXPERIMENTS = {"qf": targets.Experiment(models=("tiny",), subsets=("pct100", "pct10")),
               "web": targets.Experiment(models=("small",), subsets=("pct100",), pretrained=("gpt2",))}
RULES = ("all", "train", "report")


def outputs(results: str = "results") -> list[str]:
    files = [str(layout.path(results, name, exp="qf", model="tiny", subset=subset))
             for subset in ("pct100", "pct10") for name in layout.RUN_ARTIFACTS]
    files += [str(layout.path(results, "evaluation", exp="qf", model="tiny", subset="pct100"))]
    files += [str(layout.path(results, "acts_meta", exp="web", model="gpt2", subset="pretrained"))]
    return files + [str(layout.path(results, "report_figures"))]


def problem(target: str, results: str = "results") -> str | None:
    return targets.target_problem(target, results_dir=results, outputs=outputs(results), experiments=EXPERIMENTS,
                                  rules=RULES)


@pytest.mark.parametrize("target", ["results/qf/train/tiny/pct10/model.pt", "train", "all",
                                    "results/report/figures/curves.png",
                                    "results/web/activations/gpt2/pretrained/meta.json",
                                    "elsewhere/file.txt"])
def test_what_the_config_makes_passes(target) -> None:
    assert problem(target) is None


@pytest.mark.parametrize(("target", "expected"), [
    ("results/qf/train/L2/pct1/model.pt", "no model 'L2' in experiment 'qf'; models: tiny"),
    ("results/qf/train/tiny/pct1/model.pt",
     "no subset 'pct1' for model 'tiny' in experiment 'qf'; subsets: pct100, pct10"),
    ("results/qx/train/tiny/pct1/model.pt", "no experiment 'qx' in this config; experiments: qf, web"),
    ("results/web/activations/gpt2/pct100/meta.json", "no subset 'pct100' for model 'gpt2'"),
    ("results/qf/data/subsets/pct5/meta.json", "no subset 'pct5' in experiment 'qf'; subsets: pct100, pct10"),
    ("results/qf/train/tiny/pct100/modl.pt", "outputs in results/qf/train/tiny/pct100: best.pt, eval_rows.parquet"),
    ("results/qf/eval/tiny/pct10/eval.json", "makes that file only as: results/qf/eval/tiny/pct100/eval.json"),
    ("results/qf/train/tiny/pct100", "a directory; name a file in it: best.pt"),
    ("results/zzz", "outputs live under results/<qf|report|web>/..."),
    ("reprt", "no rule or output of that name; rules: all, report, train"),
])
def test_a_wrong_name_is_one_line_listing_the_valid_ones(target, expected) -> None:
    message = problem(target)
    assert message is not None and expected in message and "\n" not in message
    assert message.startswith(f"target '{target}'")


def test_an_absolute_results_directory_and_target(tmp_path) -> None:
    results = str(tmp_path / "out")
    assert problem(str(tmp_path / "out/qf/train/tiny/pct10/model.pt"), results) is None
    assert "no model 'L9'" in problem(str(tmp_path / "out/qf/train/L9/pct10/model.pt"), results)


def test_check_targets_keeps_only_problems() -> None:
    found = targets.check_targets(["all", "results/qf/train/L2/pct1/model.pt"], results_dir="results",
                                  outputs=outputs(), experiments=EXPERIMENTS, rules=RULES)
    assert len(found) == 1 and "L2" in found[0]


@pytest.mark.parametrize(("argv", "expected"), [
    (["/usr/bin/snakemake", "-n", "a.txt", "--configfile=c.yaml", "b.txt"], ["a.txt", "b.txt"]),
    (["/x/site-packages/snakemake/__main__.py", "--cores", "2", "t"], ["t"]),
    (["/x/bin/pytest", "tests"], []),  # not the snakemake command: its arguments are not targets
    (["/usr/bin/snakemake", "--no-such-option-xyz"], []),
])
def test_targets_are_read_from_a_snakemake_command_line(argv, expected) -> None:
    assert targets.snakemake_cli_targets(argv) == expected


def test_assocmem_run_takes_a_target_after_configfile_as_a_target(capsys) -> None:
    args = ["--cores", "2", "--configfile", "config/test.yaml", "results/qf/train/tiny/pct10/model.pt", "-n"]
    assert targets_out_of_configfile(args) == ["results/qf/train/tiny/pct10/model.pt", "--cores", "2",
                                               "--configfile", "config/test.yaml", "-n"]
    assert "taken as a target" in capsys.readouterr().err
    kept = ["--configfile", "a.yaml", "b.json", "c.yml", "--cores", "1", "report"]
    assert targets_out_of_configfile(kept) == kept

