"""Config validation: defaults are filled, and every malformed config fails naming the key."""

from pathlib import Path

import pytest
import yaml
from helpers import ROOT

from assocmem import config as config_module
from assocmem.config import ConfigError, load_schema, run_settings
from assocmem.layout import subset_name

SCHEMA = load_schema(ROOT / "workflow" / "schemas" / "config.schema.yaml")


def validate_config(config: dict) -> dict:
    return config_module.validate_config(config, SCHEMA)


def load_config(path: Path) -> dict:
    return config_module.load_config(path, SCHEMA)


def minimal() -> dict:
    return {"experiments": {"qf": {"dataset": {"name": "question_formation"},
                                   "models": {"m": {"n_layer": 1, "d_model": 8, "n_head": 2}}}}}


def test_shipped_configs_validate():
    for name in ("config.yaml", "test.yaml", "paper.yaml", "scaling.yaml", "sweep_test.yaml", "facts_test.yaml",
                 "memorisation.yaml", "memorisation_test.yaml", "memorisation_gpu.yaml", "radius_gpt2.yaml",
                 "entropy.yaml"):
        cfg = load_config(ROOT / "config" / name)
        assert cfg["experiments"]


def test_defaults_are_filled():
    cfg = validate_config(minimal())
    exp = cfg["experiments"]["qf"]
    assert exp["subsets"]["fractions"] == [1.0, 0.1, 0.01]
    assert exp["train"]["batch_size"] == 8
    assert exp["models"]["m"]["tie_embeddings"] is True
    assert exp["dataset"]["sizes"]["train"] == 100_000
    assert cfg["seed"] == 1234


def test_input_not_mutated():
    raw = minimal()
    validate_config(raw)
    assert "subsets" not in raw["experiments"]["qf"]


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda c: c["experiments"]["qf"].update(bogus=1), "experiments.qf: unknown key"),
        (lambda c: c["experiments"]["qf"].update(subsets={"fractions": [1.5]}),
         "experiments.qf.subsets.fractions[0]: 1.5 is greater than the maximum of 1"),
        (lambda c: c["experiments"]["qf"]["dataset"].update(sizes={"train": -5}),
         "experiments.qf.dataset.sizes.train: -5 is less than the minimum of 1"),
        (lambda c: c["experiments"]["qf"]["dataset"].pop("name"),
         "experiments.qf.dataset: missing required key ('name'"),
        (lambda c: c["experiments"]["qf"]["dataset"].update(name="imagenet"),
         "experiments.qf.dataset.name: 'imagenet' is not one of"),
        (lambda c: c["experiments"]["qf"]["models"]["m"].update(n_head=3),
         "experiments.qf.models.m.n_head: must divide d_model"),
        (lambda c: c["experiments"]["qf"].update(train={"batch_size": 8, "micro_batch_size": 3}),
         "experiments.qf.train.micro_batch_size: must divide train.batch_size (8 % 3 != 0)"),
        (lambda c: (c["experiments"]["qf"].update(train={"batch_size": 8, "micro_batch_size": 4}),
                    c["experiments"]["qf"]["models"]["m"].update(train={"batch_size": 6})),
         "experiments.qf.train.micro_batch_size: must divide models.m.train.batch_size (6 % 4 != 0)"),
        (lambda c: c["experiments"]["qf"]["models"]["m"].update(train={"eval_interval": 5}),
         "experiments.qf.models.m.train: unknown key (Additional properties are not allowed ('eval_interval'"),
        (lambda c: c.update(seed="x"), "seed: 'x' is not of type 'integer'"),
    ],
)
def test_malformed_config_names_the_key(mutate, expected):
    cfg = minimal()
    mutate(cfg)
    with pytest.raises(ConfigError) as info:
        validate_config(cfg)
    assert expected in str(info.value)


def test_missing_and_broken_files(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("experiments: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    ok = tmp_path / "ok.yaml"
    ok.write_text(yaml.safe_dump(minimal()))
    assert load_config(ok)["experiments"]["qf"]["dataset"]["source"] == "generate"


def test_subset_names():
    assert subset_name(1.0) == "pct100"
    assert subset_name(0.01) == "pct1"
    assert subset_name(0.001) == "pct0.1"


def test_per_model_train_overrides_apply_to_that_model_only():
    cfg = minimal()
    cfg["experiments"]["qf"]["models"]["deep"] = {"n_layer": 4, "d_model": 8, "n_head": 2, "train": {"lr": 5e-4}}
    exp = validate_config(cfg)["experiments"]["qf"]
    spec, train = run_settings(exp, "deep.s1")  # a sweep replicate label resolves to its model
    assert train["lr"] == 5e-4 and "train" not in spec and spec["n_layer"] == 4
    assert run_settings(exp, "m")[1]["lr"] == exp["train"]["lr"] == 1e-3
    assert train["max_steps"] == exp["train"]["max_steps"]  # everything else is the experiment's


def test_the_evaluate_stage_runs_on_the_largest_subset_of_audited_data(tmp_path):
    exp = validate_config(minimal())["experiments"]["qf"]
    assert config_module.evaluation_sets(exp) == {"fresh": "fresh_file"}
    assert config_module.evaluated_runs(exp) == [("m", 1.0)]
    assert config_module.fresh_sequences(exp["dataset"]) == 100_000  # min(100,000, the pool of 111,000)
    small = minimal()
    small["experiments"]["qf"]["dataset"]["sizes"] = {"train": 100, "dev": 10, "test": 10, "gen": 10}
    assert config_module.fresh_sequences(validate_config(small)["experiments"]["qf"]["dataset"]) == 120
    reference = tmp_path / "question.dev"
    reference.write_text("x")
    downloaded = minimal()
    downloaded["experiments"]["qf"]["dataset"].update(source="download", reference_dev=str(reference))
    assert config_module.evaluation_sets(validate_config(downloaded)["experiments"]["qf"]) == {
        "test": "raw_file:test", "reference": str(reference)}
    off = minimal()
    off["experiments"]["qf"]["dataset"]["fresh_sequences"] = 0
    assert config_module.evaluated_runs(validate_config(off)["experiments"]["qf"]) == []


def test_a_fresh_sample_larger_than_the_pool_is_refused_naming_the_key():
    cfg = minimal()
    cfg["experiments"]["qf"]["dataset"].update(sizes={"train": 100, "dev": 10, "test": 10}, fresh_sequences=500)
    with pytest.raises(ConfigError, match=r"experiments\.qf\.dataset\.fresh_sequences: 500 exceeds the iid pool"):
        validate_config(cfg)


def memorisation_config() -> dict:
    return load_config(ROOT / "config" / "memorisation_test.yaml")


@pytest.mark.parametrize(("edit", "expected"), [
    (lambda exp: exp["train"].pop("stop_at_recall"),
     "experiments.memo.train.stop_at_recall: a sweep of facts is a memorisation grid and needs the recall"),
    (lambda exp: exp.setdefault("sweep", {}).update(recall_threshold=0.99),
     "experiments.memo.sweep.recall_threshold: 0.99 must be a facts grid's and at most train.stop_at_recall (0.95)"),
    (lambda exp: exp["train"].update(stop_at_recall=1.5), "stop_at_recall"),
    (lambda exp: exp.setdefault("sweep", {}).update(interval_threshold=3.0), "interval_threshold"),
    (lambda exp: exp["train"].update(max_epochs=0), "max_epochs"),
])
def test_memorisation_keys_are_checked_before_any_job(edit, expected):
    raw = yaml.safe_load((ROOT / "config" / "memorisation_test.yaml").read_text())
    edit(raw["experiments"]["memo"])
    with pytest.raises(ConfigError, match=None) as err:
        validate_config(raw)
    assert expected in str(err.value)


def test_an_interval_threshold_is_refused_outside_facts_and_defaults_to_chi_square():
    raw = yaml.safe_load((ROOT / "config" / "test.yaml").read_text())
    exp = next(iter(raw["experiments"].values()))
    exp.setdefault("sweep", {})["interval_threshold"] = 5.0
    with pytest.raises(ConfigError, match=r"sweep\.interval_threshold: the two-budget interval is a memorisation"):
        validate_config(raw)
    assert memorisation_config()["experiments"]["memo"]["sweep"]["interval_threshold"] is None


def test_recall_is_refused_outside_facts():
    raw = yaml.safe_load((ROOT / "config" / "test.yaml").read_text())
    next(iter(raw["experiments"].values()))["train"]["stop_at_recall"] = 0.9
    with pytest.raises(ConfigError, match="stop_at_recall: recall is measured on facts"):
        validate_config(raw)


def test_the_memorisation_configs_validate_with_their_stated_design():
    """config/memorisation.yaml as its header states: the N range covers the square of the D range, >= 3 seeds."""
    cfg = load_config(ROOT / "config" / "memorisation.yaml")
    exp = cfg["experiments"]["memorisation"]
    assert exp["sweep"]["seeds"] >= 3 and exp["sweep"]["recall_threshold"] <= exp["train"]["stop_at_recall"]
    assert exp["dataset"]["name"] == "facts" and memorisation_config()["experiments"]["memo"]["sweep"]["seeds"] == 2
    from assocmem.facts.tokenize import vocabulary
    from assocmem.model import DecoderLM, ModelConfig

    facts = exp["dataset"]["facts"]
    vocab = len(vocabulary(facts["key_vocab"], facts["value_vocab"]))
    n = [DecoderLM(ModelConfig.from_dict(spec, vocab_size=vocab)).num_parameters() for spec in exp["models"].values()]
    d = [facts["count"] * fraction for fraction in exp["subsets"]["fractions"]]
    assert max(n) / min(n) >= (max(d) / min(d)) ** 2
    assert (min(n), max(n)) == (798, 58848)  # as the config's comments state


def test_the_gpu_memorisation_grid_covers_the_square_of_its_d_range():
    from assocmem.facts.tokenize import vocabulary
    from assocmem.model import DecoderLM, ModelConfig

    exp = load_config(ROOT / "config" / "memorisation_gpu.yaml")["experiments"]["memorisation_gpu"]
    facts = exp["dataset"]["facts"]
    vocab = len(vocabulary(facts["key_vocab"], facts["value_vocab"]))
    n = [DecoderLM(ModelConfig.from_dict(spec, vocab_size=vocab)).num_parameters() for spec in exp["models"].values()]
    d = [facts["count"] * fraction for fraction in exp["subsets"]["fractions"]]
    assert max(n) / min(n) >= (max(d) / min(d)) ** 2 and exp["sweep"]["seeds"] >= 3


@pytest.mark.parametrize(("line", "expected"), [
    ("lr: .nan", "experiments.qf.train.lr: nan is not a finite number"),
    ("lr: .inf", "experiments.qf.train.lr: inf is not a finite number"),
    ("max_steps: 1.0e+21", "experiments.qf.train.max_steps: 1e+21 is greater than the maximum of 1000000000"),
    ("batch_size: 1.0e+12", "experiments.qf.train.batch_size: 1000000000000.0 is greater than the maximum of"),
], ids=["nan", "inf", "1e21 steps", "1e12 batch"])
def test_non_finite_and_implausible_numbers_are_refused_naming_the_key(tmp_path, line, expected):
    """Issue 39: `.nan` passed validation and failed in a traceback that named no key; `.inf` trained 60 NaN steps;
    `max_steps: 1e21` was accepted (ETA 2.4e15 h)."""
    config = minimal()
    config["experiments"]["qf"]["train"] = yaml.safe_load(f"{{{line}}}")
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))  # `.nan`, `.inf`, `1.0e+21` as a user writes them
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert expected in str(info.value)


@pytest.mark.parametrize(("edit", "expected"), [
    (lambda m: m.update(d_model=1048576), "experiments.qf.models.m.d_model: 1048576 is greater than the maximum"),
    (lambda m: m.update(n_layer=10**6), "experiments.qf.models.m.n_layer: 1000000 is greater than the maximum"),
], ids=["d_model 2^20", "a million layers"])
def test_implausible_model_sizes_are_refused_naming_the_key(edit, expected):
    cfg = minimal()
    edit(cfg["experiments"]["qf"]["models"]["m"])
    with pytest.raises(ConfigError, match=expected):
        validate_config(cfg)


def test_an_experiment_without_models_is_refused():
    """Issue 39: `models: {}` ran and the report showed the usual verdict counts, without a word."""
    cfg = minimal()
    cfg["experiments"]["qf"]["models"] = {}
    with pytest.raises(ConfigError, match=r"experiments.qf.models: no model to train \(and no pretrained one\)"):
        validate_config(cfg)


def test_radius_config_samples_each_gpt2_width_three_times_independently():
    """config/radius_gpt2.yaml (issue 38): GPT-2 small, medium and large, each on three chunk samples (distinct
    replicates, hence distinct chunk seeds), the paper's 80K chunks of 256 tokens, last layer, nothing trained."""
    exp = load_config(ROOT / "config" / "radius_gpt2.yaml")["experiments"]["owt"]
    by_model: dict[str, list[int]] = {}
    for spec in exp["pretrained"].values():
        by_model.setdefault(spec["name"], []).append(spec["replicate"])
    assert {name: sorted(reps) for name, reps in by_model.items()} == {
        name: [0, 1, 2] for name in ("gpt2", "gpt2-medium", "gpt2-large")}
    assert not exp["models"] and exp["neighbours"]["method"] == "exact"
    assert (exp["activations"]["n_chunks"], exp["activations"]["chunk_len"], exp["activations"]["layers"]) == (
        80_000, 256, "last")
