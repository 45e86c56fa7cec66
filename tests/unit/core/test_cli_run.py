"""`assocmem run --set a.b.c=VALUE`: dotted config overrides, validated like the config, handed to Snakemake as
the merged config's file (assocmem.overrides). Snakemake itself is not run here (tests/e2e/test_overrides.py
dry-runs it once)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from helpers import ROOT

from assocmem import cli
from assocmem.config import ConfigError, load_config, load_schema
from assocmem.overrides import OverrideError, merge, parse_override, split_set_args

SCHEMA = load_schema(ROOT / "workflow" / "schemas" / "config.schema.yaml")
TEST_CONFIG = ROOT / "config" / "test.yaml"


def argv(workdir: Path, *args: str) -> list[str]:
    return cli.snakemake_argv(["-s", str(ROOT / "Snakefile"), "--directory", str(workdir), *args])[0]


def written_config(args: list[str]) -> tuple[Path, dict]:
    assert args[-2] == "--configfile"
    path = Path(args[-1])
    return path, yaml.safe_load(path.read_text())


def test_set_arguments_are_taken_out_of_snakemake_args() -> None:
    rest, sets = split_set_args(["-n", "--set", "a.b=1", "--cores", "1", "--set=c=[1, 2]", "--set-threads", "x=2"])
    assert rest == ["-n", "--cores", "1", "--set-threads", "x=2"]  # Snakemake's own --set-* options pass through
    assert sets == ["a.b=1", "c=[1, 2]"]
    with pytest.raises(OverrideError, match="--set needs KEY=VALUE"):
        split_set_args(["-n", "--set"])


@pytest.mark.parametrize(("text", "value"), [("a.b=80", 80), ("a.b=0.5", 0.5), ("a.b=[1, 2]", [1, 2]),
                                             ("a.b=true", True), ("a.b=null", None), ("a.b=cpu", "cpu"),
                                             ("a.b='80'", "80"), ("a.b=x=y", "x=y")])
def test_values_are_read_as_yaml(text: str, value) -> None:
    assert parse_override(text) == (["a", "b"], value)


@pytest.mark.parametrize("text", ["nokey", "a..b=1", "=1", "a.=1"])
def test_a_malformed_override_is_refused(text: str) -> None:
    with pytest.raises(OverrideError, match="expected a dotted KEY=VALUE"):
        parse_override(text)


def test_the_merged_config_is_passed_as_the_last_configfile(tmp_path) -> None:
    args = argv(tmp_path, "-n", "--configfile", str(TEST_CONFIG), "--set", "experiments.qf.train.max_steps=80",
                "--set", "experiments.qf.models.tiny.n_head=4", "--set=results_dir=out dir")
    path, config = written_config(args)
    assert path.parent == tmp_path / ".snakemake" / "assocmem" and path.name.startswith("overrides-")
    assert args[:-2] == ["-s", str(ROOT / "Snakefile"), "--directory", str(tmp_path), "-n", "--configfile",
                         str(TEST_CONFIG)]
    original = yaml.safe_load(TEST_CONFIG.read_text())
    expected = merge(original, {"results_dir": "out dir"})
    expected["experiments"]["qf"]["train"]["max_steps"] = 80
    expected["experiments"]["qf"]["models"]["tiny"]["n_head"] = 4
    assert config == expected  # the whole config (a --configfile replaces the default one), not only the changes
    assert load_config(path, SCHEMA)["experiments"]["qf"]["train"]["max_steps"] == 80
    assert argv(tmp_path, "-n", "--configfile", str(TEST_CONFIG), "--set", "experiments.qf.train.max_steps=80",
                "--set", "experiments.qf.models.tiny.n_head=4", "--set=results_dir=out dir") == args  # same file


def test_without_a_configfile_the_default_config_is_overridden(tmp_path) -> None:
    _, config = written_config(argv(tmp_path, "-n", "--set", "seed=5"))
    assert config == {**yaml.safe_load((ROOT / "config" / "config.yaml").read_text()), "seed": 5}


def test_config_files_merge_like_snakemake() -> None:
    base = {"seed": 1, "experiments": {"qf": {"train": {"lr": 0.1, "max_steps": 5}}}}
    assert merge(base, {"experiments": {"qf": {"train": {"lr": 0.2}}}, "results_dir": "r"}) == {
        "seed": 1, "results_dir": "r", "experiments": {"qf": {"train": {"lr": 0.2, "max_steps": 5}}}}
    assert base["experiments"]["qf"]["train"]["lr"] == 0.1


def test_no_set_changes_nothing(tmp_path) -> None:
    assert argv(tmp_path, "-n", "--configfile", str(TEST_CONFIG)) == [
        "-s", str(ROOT / "Snakefile"), "--directory", str(tmp_path), "-n", "--configfile", str(TEST_CONFIG)]
    assert not (tmp_path / ".snakemake").exists()


@pytest.mark.parametrize(("override", "message"), [
    ("experiments.qf.train.max_stepz=80",
     "--set experiments.qf.train.max_stepz: unknown key 'max_stepz' under experiments.qf.train (did you mean "
     "'max_steps'?"),
    ("bogus=1", "--set bogus: unknown key 'bogus' under the top level (allowed: seed, results_dir"),
    ("experiments.nope.train.max_steps=1", "--set experiments.nope.train.max_steps: the config has no "
                                           "experiments.nope (it has: qf)"),
    ("seed.x=1", "--set seed.x: seed is 7, not a mapping of keys"),
    ("experiments.qf.models.tiny.n_layer.x=1", "experiments.qf.models.tiny.n_layer is 2, not a mapping"),
    ("experiments.qf.train.max_steps=[1", "the value '[1' is not valid YAML"),
])
def test_an_unknown_path_fails_with_one_line_naming_it(tmp_path, override: str, message: str) -> None:
    with pytest.raises(OverrideError) as caught:
        argv(tmp_path, "--configfile", str(TEST_CONFIG), "--set", override)
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert not (tmp_path / ".snakemake").exists()


@pytest.mark.parametrize(("override", "message"), [
    ("experiments.qf.train.max_steps=abc", "experiments.qf.train.max_steps: 'abc' is not of type 'integer'"),
    ("experiments.qf.train.max_steps=0", "experiments.qf.train.max_steps: 0 is less than the minimum"),
    ("seed=-1", "seed: -1 is less than the minimum of 0"),
    ("experiments.qf.models.tiny.n_head=5", "experiments.qf.models.tiny.n_head: must divide d_model"),
    # issue 39: a non-finite number, a negative fraction and no model at all, each named
    ("experiments.qf.train.lr=.nan", "experiments.qf.train.lr: nan is not a finite number"),
    ("experiments.qf.subsets.fractions=[-0.5]", "experiments.qf.subsets.fractions[0]: -0.5 is less than or equal"),
    ("experiments.qf.models={}", "experiments.qf.models: no model to train"),
])
def test_a_wrong_value_fails_validation_naming_the_dotted_key(tmp_path, override: str, message: str) -> None:
    with pytest.raises(ConfigError, match="the config after --set") as caught:
        argv(tmp_path, "--configfile", str(TEST_CONFIG), "--set", override)
    assert message in str(caught.value)


def test_assocmem_run_prints_one_line_and_exits_2(tmp_path, capsys) -> None:
    code = cli.main(["run", "-s", str(ROOT / "Snakefile"), "--directory", str(tmp_path), "--configfile",
                     str(TEST_CONFIG), "--set", "experiments.qf.train.max_stepz=80"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("assocmem run: error: --set experiments.qf.train.max_stepz: unknown key")
    assert len(err.splitlines()) == 1
