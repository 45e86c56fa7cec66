"""The App. D row's table of trained runs (``params_inputs``): a config of several experiments that each train a
model of one name (config/entropy.yaml: L2 on three datasets) names each run with its experiment, instead of
stopping the report on a duplicate label."""

from __future__ import annotations

from types import SimpleNamespace

from assocmem.report.claims.literature import params, params_inputs


def _run(exp: str, model: str, vocab: int) -> SimpleNamespace:
    summary = {"n_params": 1000 + vocab, "subset": {"n_tokens": 5000},
               "model_config": {"vocab_size": vocab, "max_len": 64, "d_model": 8, "n_layer": 1, "d_ff": 32,
                                "tie_embeddings": True}}
    return SimpleNamespace(exp=exp, model=model, subset="pct100", label=f"{model}/pct100", summary=summary)


def test_runs_of_one_name_in_several_experiments_are_named_by_their_experiment() -> None:
    runs = [_run("h05", "L2", 72), _run("h10", "L2", 72), _run("h15", "L2", 120)]
    table = params_inputs(SimpleNamespace(trained_runs=runs))
    assert table["model"].tolist() == ["h05:L2/pct100", "h10:L2/pct100", "h15:L2/pct100"]
    assert params(table)["verdict"] in {"corrected", "refuted", "reproduced"}


def test_one_experiments_runs_keep_their_plain_labels() -> None:
    runs = [_run("qf", "L2", 72), _run("qf", "L4", 72)]
    assert params_inputs(SimpleNamespace(trained_runs=runs))["model"].tolist() == ["L2/pct100", "L4/pct100"]
