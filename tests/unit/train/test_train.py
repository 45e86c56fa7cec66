import math

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import make_token_dir

from assocmem.errors import AssocmemError
from assocmem.model import ModelConfig
from assocmem.tables import check_train_tables, metric_rows
from assocmem.tokenstore import TokenStore, data_fingerprint
from assocmem.train import (
    IGNORE,
    SequenceBatches,
    TrainJob,
    TrainSettings,
    evaluate,
    fixed_batches,
    job_fingerprint,
    load_model,
    lr_at,
    to_lm_batch,
)
from assocmem.train.loop import on_device
from assocmem.train.loss import summed_nll


def settings(**kw) -> TrainSettings:
    base = dict(batch_size=4, micro_batch_size=None, max_steps=12, lr=3e-3, min_lr_ratio=0.1, warmup_steps=3,
                weight_decay=0.01, beta1=0.9, beta2=0.99, grad_clip=1.0, eval_interval=4, eval_batches=1,
                checkpoint_interval=5, device="cpu")
    return TrainSettings(**{**base, **kw})


def make_job(tmp_path, run_name="run", seed=3, **kw) -> TrainJob:
    token_dir = tmp_path / "tokens"
    if not token_dir.exists():
        token_dir = make_token_dir(tmp_path, repeat=4)
    train = TokenStore(token_dir, "train")
    dev = TokenStore(token_dir, "dev")
    s = settings(**kw)
    cfg = ModelConfig(vocab_size=train.vocab_size, n_layer=1, d_model=16, n_head=2, d_ff=32, max_len=20)
    return TrainJob(run_dir=tmp_path / run_name, model_config=cfg, settings=s,
                    train_batches=SequenceBatches(train, 0, len(train), s.batch_size, seed=seed),
                    eval_sets={"val": fixed_batches(dev, np.arange(len(dev)), 4)}, seed=seed, tokens_per_sequence=12,
                    fingerprint=job_fingerprint(cfg, s, seed, data_fingerprint(train)))


def test_lr_schedule():
    s = settings(max_steps=100, warmup_steps=10, lr=1.0, min_lr_ratio=0.1)
    assert lr_at(0, s) == pytest.approx(0.1)
    assert lr_at(9, s) == pytest.approx(1.0)
    assert lr_at(10, s) == pytest.approx(1.0)
    assert lr_at(100, s) == pytest.approx(0.1)
    assert lr_at(55, s) == pytest.approx(0.1 + 0.45 * (1 + math.cos(math.pi * 0.5)))


def test_batches_are_step_deterministic_and_cover_epochs(tmp_path):
    token_dir = make_token_dir(tmp_path)
    store = TokenStore(token_dir, "train")
    source = SequenceBatches(store, 0, 8, 4, seed=1)
    assert torch.equal(source.batch(5)[0], source.batch(5)[0])
    rows = source.rows(0) + source.rows(1)
    assert sorted(rows) == list(range(8))  # one epoch visits every sequence once


def test_lm_batch_masks_padding():
    inputs, targets = to_lm_batch(np.array([[2, 5, 6, 3, 0, 0]]))
    assert inputs.tolist() == [[2, 5, 6, 3, 0]]
    assert targets.tolist() == [[5, 6, 3, IGNORE, IGNORE]]


def test_lm_batch_scores_only_from_loss_from():
    """A store's loss_from (facts: the first value token) leaves the tokens before it as context; 0 and 1 score
    every token after the first, as before."""
    padded = np.array([[2, 7, 8, 4, 9, 3], [2, 7, 8, 4, 3, 0]])
    assert to_lm_batch(padded, loss_from=4)[1].tolist() == [[IGNORE, IGNORE, IGNORE, 9, 3],
                                                            [IGNORE, IGNORE, IGNORE, 3, IGNORE]]
    for loss_from in (0, 1):
        assert torch.equal(to_lm_batch(padded, loss_from=loss_from)[1], to_lm_batch(padded)[1])


def test_training_reduces_loss_and_writes_outputs(tmp_path):
    summary = make_job(tmp_path, max_steps=40, eval_interval=10).run()
    metrics = pd.read_csv(tmp_path / "run" / "metrics.csv")
    assert metrics["step"].tolist() == [10, 20, 30, 40]
    assert metrics["train_loss"].iloc[-1] < metrics["train_loss"].iloc[0]
    assert {"val_ce", "train_loss", "lr"} <= set(metrics.columns)
    assert not {"tokens_per_s", "mfu"} & set(metrics.columns)  # wall-clock numbers live in timing.csv
    timing = pd.read_csv(tmp_path / "run" / "timing.csv")
    assert timing["step"].tolist() == [10, 20, 30, 40] and 0 < timing["mfu"].iloc[-1] < 1
    assert summary["steps"] == 40 and summary["best_step"] in (10, 20, 30, 40) and not summary["stopped_early"]
    assert not (tmp_path / "run" / "checkpoint.pt").exists()  # removed once model.pt is written
    model = load_model(tmp_path / "run" / "model.pt")
    assert model.num_parameters() == summary["n_params"]


def test_eval_rows_are_the_final_models_per_row_losses_on_the_validation_batches(tmp_path):
    """The convergence tolerance rests on these rows: their token-weighted mean is the final val CE."""
    job = make_job(tmp_path, max_steps=8, eval_interval=4)
    job.run()
    rows = pd.read_parquet(tmp_path / "run" / "eval_rows.parquet")
    model, (inputs, targets) = load_model(tmp_path / "run" / "model.pt"), job.eval_sets["val"][0]
    with torch.no_grad():
        log_probs = torch.log_softmax(model(inputs), dim=-1)
    expected = [-sum(float(log_probs[r, i, t]) for i, t in enumerate(row) if t != IGNORE)
                for r, row in enumerate(targets.tolist())]
    np.testing.assert_allclose(rows["nll"].to_numpy()[:len(expected)], expected, rtol=1e-5)
    assert rows["tokens"].tolist()[:len(expected)] == (targets != IGNORE).sum(dim=1).tolist()
    assert rows["row"].tolist() == list(range(len(rows)))
    final_val = pd.read_csv(tmp_path / "run" / "metrics.csv")["val_ce"].iloc[-1]
    assert rows["nll"].sum() / rows["tokens"].sum() == pytest.approx(final_val, rel=1e-6)


def test_the_validation_ce_summed_on_the_device_is_the_sum_of_each_batch_read_on_the_host(tmp_path):
    """evaluate() adds the batches' NLLs on the device, reading the total once: the same float64 additions, in the
    same order, as reading each batch's NLL and adding on the host (before, one host sync per batch)."""
    job = make_job(tmp_path, max_steps=4, eval_interval=4, eval_batches=3)
    job.run()
    model, batches = load_model(tmp_path / "run" / "model.pt"), job.eval_sets["val"]
    assert len(batches) >= 2  # the dev split holds two
    no_autocast = lambda: torch.autocast("cpu", enabled=False)  # noqa: E731
    total, count = 0.0, 0
    with torch.no_grad():
        for inputs, targets in batches:
            total += float(summed_nll(model, inputs, targets))
            count += int((targets != IGNORE).sum())
    assert evaluate(model, batches, torch.device("cpu"), no_autocast) == total / count
    assert on_device(batches, torch.device("cpu")) is batches  # nothing to upload on a CPU


def test_killed_run_resumes_to_identical_result(tmp_path):
    reference = make_job(tmp_path, "uninterrupted")
    reference.run()

    def kill_at_7(step: int) -> None:
        if step == 7:
            raise KeyboardInterrupt("simulated kill")

    interrupted = make_job(tmp_path, "resumed")
    with pytest.raises(KeyboardInterrupt):
        interrupted.run(on_step=kill_at_7)
    assert (tmp_path / "resumed" / "checkpoint.pt").exists()
    assert not (tmp_path / "resumed" / "model.pt").exists()  # no complete-looking output after a kill
    make_job(tmp_path, "resumed").run()
    a = torch.load(tmp_path / "uninterrupted" / "model.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "resumed" / "model.pt", weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    ma = pd.read_csv(tmp_path / "uninterrupted" / "metrics.csv")
    mb = pd.read_csv(tmp_path / "resumed" / "metrics.csv")
    pd.testing.assert_frame_equal(ma[["step", "train_loss", "val_ce"]], mb[["step", "train_loss", "val_ce"]])


def test_gradient_accumulation_matches_full_batch(tmp_path):
    make_job(tmp_path, "full", max_steps=5).run()
    make_job(tmp_path, "micro", max_steps=5, micro_batch_size=2).run()
    a = torch.load(tmp_path / "full" / "model.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "micro" / "model.pt", weights_only=True)["model"]
    assert all(torch.allclose(a[k], b[k], atol=1e-5) for k in a)


def test_corrupt_checkpoint_is_logged_and_the_run_starts_fresh(tmp_path, caplog):
    make_job(tmp_path, "fresh").run()
    job = make_job(tmp_path)
    job.run_dir.mkdir(parents=True)
    (job.run_dir / "checkpoint.pt").write_bytes(b"garbage")
    job.run()
    assert "checkpoint.pt is unreadable" in caplog.text
    a = torch.load(tmp_path / "fresh" / "model.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "run" / "model.pt", weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def kill_at(step_to_kill: int):
    def hook(step: int) -> None:
        if step == step_to_kill:
            raise KeyboardInterrupt("simulated kill")
    return hook


@pytest.mark.parametrize("change", [{"lr": 1e-3}, {"max_steps": 16}, {"seed": 4}])
def test_a_checkpoint_of_another_config_is_never_resumed(tmp_path, caplog, change):
    """Kill a run, change lr / max_steps / seed, rerun in the same directory: the result equals a fresh run."""
    with pytest.raises(KeyboardInterrupt):
        make_job(tmp_path, "run").run(on_step=kill_at(7))
    for name in ("run", "fresh"):
        make_job(tmp_path, name, **change).run()
    assert "written for another configuration" in caplog.text
    a = torch.load(tmp_path / "fresh" / "model.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "run" / "model.pt", weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_early_stopping_stops_after_patience_and_resumes_the_same(tmp_path):
    from assocmem.train import early_stop_reached

    rows = [{"val_ce": v} for v in (3.0, 2.5, 2.6, 2.55, 2.7)]
    assert early_stop_reached(rows[:4], patience=2, min_delta=0.0)  # 2.6, 2.55: no gain on 2.5
    assert not early_stop_reached(rows[:4], patience=3, min_delta=0.0)
    assert early_stop_reached(rows, patience=3, min_delta=0.0)
    assert not early_stop_reached(rows, patience=None, min_delta=0.0)
    assert early_stop_reached([{"val_ce": 3.0}, {"val_ce": 2.99}], patience=1, min_delta=0.05)
    summary = make_job(tmp_path, "es", max_steps=400, eval_interval=4, lr=0.05,
                       early_stopping_patience=2).run()
    assert summary["stopped_early"] and summary["steps"] < 400
    metrics = pd.read_csv(tmp_path / "es" / "metrics.csv")
    assert metrics["step"].iloc[-1] == summary["steps"]
    assert metrics["val_ce"].iloc[-2:].min() > metrics["val_ce"].iloc[:-2].min()


def test_model_files_are_byte_identical_across_runs(tmp_path):
    make_job(tmp_path, "a").run()
    make_job(tmp_path, "b").run()
    assert (tmp_path / "a" / "model.pt").read_bytes() == (tmp_path / "b" / "model.pt").read_bytes()


def test_missing_and_corrupt_model_files_are_named(tmp_path):
    with pytest.raises(AssocmemError, match="model file not found.*none.pt"):
        load_model(tmp_path / "none.pt")
    make_job(tmp_path).run()
    path = tmp_path / "run" / "model.pt"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(AssocmemError, match=r"cannot read model .*model.pt: truncated or corrupt"):
        load_model(path)
    path.write_bytes(data[:100] + bytes(b ^ 0x55 for b in data[100:200]) + data[200:])
    with pytest.raises(AssocmemError, match=r"cannot read model .*model.pt"):
        load_model(path)


def test_best_pt_holds_the_weights_at_the_lowest_validation_ce(tmp_path, monkeypatch):
    """Early stopping after a rise: best.pt is the model at the best evaluation, model.pt the final one."""
    from assocmem.train import loop as train_module

    values = iter([3.0, 2.0, 2.5, 2.7])
    monkeypatch.setattr(train_module, "evaluate", lambda *a, **k: next(values))
    job = make_job(tmp_path, max_steps=16, eval_interval=4, eval_batches=1)
    job.eval_sets = {"val": job.eval_sets["val"]}
    job.run()
    best = torch.load(tmp_path / "run" / "best.pt", weights_only=True)
    final = torch.load(tmp_path / "run" / "model.pt", weights_only=True)
    assert best["step"] == 8 and final["step"] == 16
    assert any(not torch.equal(best["model"][k], final["model"][k]) for k in best["model"])
    assert load_model(tmp_path / "run" / "best.pt").num_parameters() == load_model(tmp_path / "run" /
                                                                                       "model.pt").num_parameters()


def test_stale_best_weights_do_not_survive_a_fresh_start(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "best.inprogress.pt").write_bytes(b"left by another job")
    make_job(tmp_path, max_steps=4, eval_interval=2).run()
    assert torch.load(tmp_path / "run" / "best.pt", weights_only=True)["step"] in (2, 4)
    assert not (tmp_path / "run" / "best.inprogress.pt").exists()


def test_a_killed_run_ends_with_the_same_best_pt_after_its_outputs_were_deleted(tmp_path):
    """Snakemake deletes a killed job's outputs (best.pt among them) before rerunning it; the best weights so far
    live beside the checkpoint, so the resumed run ends with the best.pt of an uninterrupted one."""
    make_job(tmp_path, "whole", max_steps=12, eval_interval=2, checkpoint_interval=5).run()

    def crash(step: int) -> None:
        if step == 7:
            raise KeyboardInterrupt

    job = make_job(tmp_path, "killed", max_steps=12, eval_interval=2, checkpoint_interval=5)
    with pytest.raises(KeyboardInterrupt):
        job.run(on_step=crash)
    assert (tmp_path / "killed" / "best.inprogress.pt").exists() and not (tmp_path / "killed" / "best.pt").exists()
    make_job(tmp_path, "killed", max_steps=12, eval_interval=2, checkpoint_interval=5).run()
    assert (tmp_path / "killed" / "best.pt").read_bytes() == (tmp_path / "whole" / "best.pt").read_bytes()


@pytest.mark.parametrize(("max_steps", "patience"), [(10, None), (12, None), (400, 2)],
                         ids=["last step off the interval", "last step on it", "stopped early"])
def test_metrics_and_eval_rows_hold_the_rows_their_readers_expect(tmp_path, max_steps, patience):
    """assocmem.tables restates when metrics rows are written and records the eval rows: hold it to the trainer."""
    summary = make_job(tmp_path, max_steps=max_steps, eval_interval=4, lr=0.05,
                       early_stopping_patience=patience).run()

    def at(name: str):
        return tmp_path / "run" / {"metrics": "metrics.csv", "eval_rows": "eval_rows.parquet"}.get(name, name)

    metrics, rows = pd.read_csv(at("metrics")), pd.read_parquet(at("eval_rows"))
    assert len(metrics) == metric_rows(summary["steps"], 4) and summary["eval_rows"] == len(rows) > 0
    assert summary["stopped_early"] == (patience is not None)
    check_train_tables(metrics, rows, summary, 4, at)
    with pytest.raises(AssocmemError, match=r"metrics\.csv has \d+ rows, expected \d+ \(an evaluation every 4 steps"):
        check_train_tables(metrics.iloc[:-1], rows, summary, 4, at)
    with pytest.raises(AssocmemError, match=r"eval_rows\.parquet has \d+ rows, expected \d+ \(the validation rows"):
        check_train_tables(metrics, rows.iloc[1:], summary, 4, at)


def test_a_run_starts_its_device_before_it_builds_the_model(tmp_path, monkeypatch):
    """Its CUDA start is timed and logged (assocmem.runtime.cuda_start; a no-op on the CPU, called all the same)."""
    import assocmem.train.loop as loop
    import assocmem.train.stacked as stacked
    from assocmem.train.stacked import StackedTraining

    started = []
    monkeypatch.setattr(loop, "cuda_ready", started.append)
    monkeypatch.setattr(stacked, "cuda_ready", started.append)
    make_job(tmp_path, max_steps=2).run()
    StackedTraining([make_job(tmp_path, f"stacked{seed}", seed, max_steps=2) for seed in (1, 2)])
    assert started == [torch.device("cpu"), torch.device("cpu")]
