"""train.gemm: auto chooses F.linear or oneDNN by timing the job's own Linear products (a fake timer decides here),
keeps the answer per host and shape, leaves explicit choices, GPU runs and below-threshold shapes untimed, and a
resumed run keeps the backend it started with; the trainer records the choice in timing.json."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from helpers import FakeTimer, fake_timer_installer

from assocmem.autotune import gemm as gemm_choice
from assocmem.autotune.gemm import choose_gemm, linear_layers, linear_passes
from assocmem.gemm import ONEDNN_MIN_MACS, onednn_available
from assocmem.model import DecoderLM, ModelConfig

CPU = torch.device("cpu")
needs_onednn = pytest.mark.skipif(not onednn_available(), reason="this torch build has no oneDNN")


def model(d_model: int = 64, n_layer: int = 2, vocab: int = 80) -> DecoderLM:
    return DecoderLM(ModelConfig(vocab_size=vocab, n_layer=n_layer, d_model=d_model, n_head=4, d_ff=4 * d_model,
                                 max_len=40))


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Callable[[dict[str, float]], FakeTimer]:
    return fake_timer_installer(monkeypatch, gemm_choice, "linear_passes")


def test_linear_layers_are_the_models_shapes_with_their_counts() -> None:
    assert linear_layers(model()) == [(64, 64, True, 2), (64, 80, False, 1), (64, 192, True, 2), (64, 256, True, 2),
                                      (256, 64, True, 2)]


@needs_onednn
@pytest.mark.parametrize(("cost", "expected"), [({"native": 2e-3, "onednn": 1e-3}, "onednn"),
                                                ({"native": 1e-3, "onednn": 2e-3}, "native")])
def test_auto_takes_the_faster_backend_and_keeps_it(fake, tmp_path: Path, cost: dict, expected: str) -> None:
    timer, cache = fake(cost), tmp_path / "choices.json"
    got = choose_gemm("auto", CPU, model(), 1024, cache_file=cache, clock=timer)
    assert (got.value, got.how) == (expected, "timed") and timer.shapes[0][0] == 1024
    assert got.shape["layers"][0] == [64, 64, True, 2] and got.host["threads"] == torch.get_num_threads()
    timer.cost = {"native": cost["onednn"], "onednn": cost["native"]}  # a re-timing would now answer the other way
    timer.calls.clear()
    again = choose_gemm("auto", CPU, model(), 1024, cache_file=cache, clock=timer)
    assert (again.value, again.how, timer.calls) == (expected, "cache", [])  # the first timing decides on this host
    other = choose_gemm("auto", CPU, model(), 2048, cache_file=cache, clock=timer)  # another shape: timed again
    assert other.how == "timed" and other.value != expected and timer.calls


@needs_onednn
def test_explicit_choices_gpu_runs_and_small_products_are_not_timed(fake, tmp_path: Path) -> None:
    timer, cache = fake({"native": 1.0, "onednn": 2.0}), tmp_path / "choices.json"
    for choice in ("native", "onednn"):
        assert choose_gemm(choice, CPU, model(), 1024, cache_file=cache, clock=timer).record()["how"] == "explicit"
    assert choose_gemm("auto", torch.device("cuda"), model(), 1024, cache_file=cache).value == "native"
    small = model(d_model=16, vocab=20)
    rows = ONEDNN_MIN_MACS // (16 * 64) - 1  # every product below the threshold: onednn_linear runs F.linear
    got = choose_gemm("auto", CPU, small, rows, cache_file=cache, clock=timer)
    assert (got.value, got.how) == ("native", "identical")
    assert choose_gemm("auto", CPU, model(), 1024, resumed="onednn", cache_file=cache).how == "checkpoint"
    assert timer.calls == [] and not cache.exists()
    with pytest.raises(ValueError, match="train.gemm: 'mkl' is not one of auto, native, onednn"):
        choose_gemm("mkl", CPU, model(), 1024, cache_file=cache)


@needs_onednn
def test_a_compiled_run_leaves_the_products_to_inductor(fake, tmp_path: Path) -> None:
    """Inductor cannot lower the oneDNN op (a compiled run with it failed in lowering): under train.compile, auto is
    native, untimed, and an explicit onednn is refused with the keys to change; so is onednn under bf16, whose
    products autocast takes over."""
    timer, cache = fake({"native": 2.0, "onednn": 1.0}), tmp_path / "choices.json"
    got = choose_gemm("auto", CPU, model(), 1024, cache_file=cache, clock=timer, compiled=True)
    assert (got.value, got.how) == ("native", "compile") and timer.calls == []
    with pytest.raises(ValueError, match="train.gemm: onednn .* not under train.compile"):
        choose_gemm("onednn", CPU, model(), 1024, cache_file=cache, compiled=True)
    with pytest.raises(ValueError, match="train.gemm: onednn .* not under train.precision: bf16"):
        choose_gemm("onednn", CPU, model(), 1024, cache_file=cache, precision="bf16")


def test_auto_is_native_without_onednn(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("assocmem.gemm.onednn_available", lambda: False)
    got = choose_gemm("auto", CPU, model(), 1024, cache_file=tmp_path / "choices.json")
    assert (got.value, got.how) == ("native", "unavailable")


@needs_onednn
def test_the_real_passes_run_and_leave_the_rng_alone() -> None:
    layers = linear_layers(model(d_model=32, n_layer=1, vocab=40))
    passes = linear_passes(256, layers)
    torch.manual_seed(5)
    state = torch.get_rng_state()
    for name in ("native", "onednn"):
        passes[name]()
    assert torch.equal(torch.get_rng_state(), state)


@needs_onednn
def test_a_real_timing_records_both_backends(tmp_path: Path) -> None:
    got = choose_gemm("auto", CPU, model(d_model=32, n_layer=1), 512, cache_file=tmp_path / "c.json", budget_s=0.05)
    assert got.how == "timed" and set(got.seconds) == {"native", "onednn"} and min(got.seconds.values()) > 0
    assert got.value in got.seconds
    assert json.loads((tmp_path / "c.json").read_text())["entries"][0]["choice"] == got.value


def test_the_trainer_records_the_choice_in_timing_json(tmp_path: Path) -> None:
    from test_train import make_job

    summary = make_job(tmp_path, max_steps=4, eval_interval=2).run()
    timing = json.loads((tmp_path / "run" / "timing.json").read_text())
    assert timing["gemm"] == summary["gemm"] == timing["gemm_choice"]["value"] == "native"
    assert timing["gemm_choice"]["how"] == ("identical" if onednn_available() else "unavailable")
    assert "gemm_choice" not in summary  # timings stay out of the science artifacts


@needs_onednn
def test_a_resumed_run_keeps_the_backend_its_checkpoint_trained_with(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The first attempt's timing chose onednn; had the cache gone (or the job moved to another host type), the
    resumed run still trains on onednn, so it ends where an uninterrupted run would."""
    from test_train import make_job

    from assocmem.autotune import Choice
    from assocmem.train import loop as train

    real = train.choose_gemm
    monkeypatch.setattr(train, "choose_gemm", lambda *args, **kwargs: Choice("onednn", "timed"))

    def kill_at_7(step: int) -> None:
        if step == 7:
            raise KeyboardInterrupt("simulated kill")

    with pytest.raises(KeyboardInterrupt):
        make_job(tmp_path).run(on_step=kill_at_7)
    monkeypatch.setattr(train, "choose_gemm", real)
    make_job(tmp_path).run()
    timing = json.loads((tmp_path / "run" / "timing.json").read_text())
    assert (timing["gemm"], timing["gemm_choice"]["how"]) == ("onednn", "checkpoint")
