"""assocmem.autotune.measure with a fake timer: the choice follows the timer, candidates run in rotating order, the
cache answers a repeated key without timing and re-times a new shape or host, and an unreadable cache is ignored
with a warning, never fatal."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from assocmem.autotune import CACHE_ENV, choose, default_cache_file, fastest, host_key, time_candidates
from assocmem.autotune.measure import cpu_model_and_flags, rotated

HOST = {"cpu": "Test CPU", "isa": ["avx2"], "threads": 2}
SHAPE = {"rows": 1024, "dim": 64}


class FakeClock:
    """A clock that moves only when a fake candidate runs: a call of candidate ``name`` takes ``cost[name]`` seconds
    (a number, or an iterator giving each call's), and is logged."""

    def __init__(self, cost: dict[str, float | Iterator[float]]) -> None:
        self.now, self.cost, self.calls = 0.0, cost, []

    def __call__(self) -> float:
        return self.now

    def candidates(self) -> dict[str, Callable[[], None]]:
        return {name: self._runner(name) for name in self.cost}

    def _runner(self, name: str) -> Callable[[], None]:
        def run() -> None:
            self.calls.append(name)
            cost = self.cost[name]
            self.now += cost if isinstance(cost, float) else next(cost)
        return run


def forbidden() -> dict[str, Callable[[], None]]:
    def fail() -> None:
        raise AssertionError("a cached choice must not be timed again")
    return {"native": fail, "onednn": fail}


def test_the_choice_follows_the_timer(tmp_path: Path) -> None:
    for cost, expected in (({"native": 2e-3, "onednn": 1e-3}, "onednn"), ({"native": 1e-3, "onednn": 2e-3}, "native")):
        clock = FakeClock(cost)
        got = choose("op", SHAPE, clock.candidates(), host=HOST, cache_file=tmp_path / f"{expected}.json", clock=clock)
        assert (got.value, got.how) == (expected, "timed")
        assert got.seconds == pytest.approx(cost)
    assert fastest({"native": 1.0, "onednn": 1.0}) == "native"  # a tie goes to the first, the default


def test_rounds_rotate_the_order_after_the_warm_up() -> None:
    clock = FakeClock({"a": 1.0, "b": 1.0, "c": 1.0})
    samples = time_candidates(clock.candidates(), clock=clock, rounds=4, warmup=2, budget_s=0.0, limit_s=math.inf)
    assert clock.calls == [*"aabbcc", *"abc", *"bca", *"cab", *"abc"]
    assert samples == {"a": [1.0] * 4, "b": [1.0] * 4, "c": [1.0] * 4}


def test_a_sample_repeats_cheap_calls_to_fill_the_budget() -> None:
    clock = FakeClock({"a": 0.01, "b": 0.03})
    samples = time_candidates(clock.candidates(), clock=clock, rounds=5, warmup=1, budget_s=1.0)
    assert len(clock.calls) == 2 + 5 * 2 * 5  # warm-up, then 5 rounds of 5 calls each: 1 s / (5 x 0.04 s)
    assert samples["a"] == pytest.approx([0.01] * 5) and samples["b"] == pytest.approx([0.03] * 5)


def test_a_machine_that_slows_down_stops_the_rounds_at_the_limit() -> None:
    """The warm-up promises 10 ms calls (10 a sample), then each call takes 1 s: the first sample ends at the limit
    (4 s), later ones after one call, and no round starts after it once three are done."""
    clock = FakeClock({"a": iter([0.01, 0.01] + [1.0] * 100), "b": iter([0.01, 0.01] + [1.0] * 100)})
    samples = time_candidates(clock.candidates(), clock=clock, rounds=5, warmup=2, budget_s=1.0)
    assert samples == {"a": pytest.approx([1.0] * 3), "b": pytest.approx([1.0] * 3)}
    assert clock.calls == [*"aabb", *"aaaab", *"ba", *"ab"]


def test_the_median_decides_so_one_slow_spell_does_not(tmp_path: Path) -> None:
    """native's first timed call is slowed by another process (mean 2.8 s, median 1 s): native still wins."""
    clock = FakeClock({"native": iter([1.0, 1.0, 10.0, 1.0, 1.0, 1.0, 1.0]), "onednn": 1.2})
    got = choose("op", SHAPE, clock.candidates(), host=HOST, cache_file=tmp_path / "c.json", clock=clock, budget_s=0)
    assert got.value == "native" and got.seconds == pytest.approx({"native": 1.0, "onednn": 1.2})


def test_a_cached_choice_is_not_timed_again(tmp_path: Path) -> None:
    cache = tmp_path / "choices.json"
    clock = FakeClock({"native": 1e-3, "onednn": 5e-4})
    first = choose("train.gemm", SHAPE, clock.candidates(), host=HOST, cache_file=cache, clock=clock)
    second = choose("train.gemm", SHAPE, forbidden(), host=HOST, cache_file=cache, clock=clock)
    assert (first.how, second.how) == ("timed", "cache") and first.value == second.value == "onednn"
    assert second.seconds == first.seconds and second.cache == str(cache)
    entry = json.loads(cache.read_text())["entries"][0]
    assert entry["choice"] == "onednn" and entry["shape"] == SHAPE and entry["host"] == HOST
    assert entry["candidates"] == ["native", "onednn"] and len(entry["samples"]["native"]) == 5


@pytest.mark.parametrize("change", [{"shape": {**SHAPE, "rows": 2048}}, {"host": {**HOST, "threads": 1}},
                                    {"host": {**HOST, "cpu": "Other CPU"}}, {"op": "other.op"}])
def test_the_cache_is_keyed_by_host_and_shape(tmp_path: Path, change: dict) -> None:
    cache = tmp_path / "choices.json"
    clock = FakeClock({"native": 1e-3, "onednn": 5e-4})
    choose("train.gemm", SHAPE, clock.candidates(), host=HOST, cache_file=cache, clock=clock)
    clock.cost, clock.calls = {"native": 1e-3, "onednn": 3e-3}, []  # the other key answers the other way
    key = {"op": "train.gemm", "shape": SHAPE, "host": HOST, **change}
    again = choose(key["op"], key["shape"], clock.candidates(), host=key["host"], cache_file=cache, clock=clock)
    assert (again.value, again.how) == ("native", "timed") and clock.calls
    assert len(json.loads(cache.read_text())["entries"]) == 2  # both keys kept
    assert choose("train.gemm", SHAPE, forbidden(), host=HOST, cache_file=cache).value == "onednn"
    assert choose(key["op"], key["shape"], forbidden(), host=key["host"], cache_file=cache).value == "native"


def test_other_candidates_are_another_key(tmp_path: Path) -> None:
    cache = tmp_path / "choices.json"
    clock = FakeClock({"native": 1e-3, "onednn": 5e-4})
    choose("op", SHAPE, clock.candidates(), host=HOST, cache_file=cache, clock=clock)
    clock.cost = {"native": 1e-3, "mkl": 5e-4, "onednn": 5e-4}
    assert choose("op", SHAPE, clock.candidates(), host=HOST, cache_file=cache, clock=clock).how == "timed"


@pytest.mark.parametrize("content", ["{not json", "[]", '{"version": 99, "entries": []}', '{"version": 1}',
                                     b"\xff\xfe".decode("latin-1")])
def test_an_unreadable_cache_is_ignored_with_a_warning(tmp_path: Path, content: str,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    cache = tmp_path / "choices.json"
    cache.write_text(content, encoding="latin-1")
    clock = FakeClock({"native": 2e-3, "onednn": 1e-3})
    with caplog.at_level(logging.WARNING, logger="assocmem.autotune.measure"):
        got = choose("op", SHAPE, clock.candidates(), host=HOST, cache_file=cache, clock=clock)
    assert (got.value, got.how) == ("onednn", "timed")
    assert "is unreadable" in caplog.text and str(cache) in caplog.text
    assert json.loads(cache.read_text())["entries"][0]["choice"] == "onednn"  # rewritten whole


def test_malformed_entries_and_stale_choices_are_never_used(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cache = tmp_path / "choices.json"
    stale = {"op": "op", "candidates": ["native", "onednn"], "shape": SHAPE, "host": HOST, "choice": "mkl",
             "seconds": {}}
    cache.write_text(json.dumps({"version": 1, "entries": [{"op": "op"}, "junk", stale]}))
    clock = FakeClock({"native": 2e-3, "onednn": 1e-3})
    with caplog.at_level(logging.WARNING, logger="assocmem.autotune.measure"):
        got = choose("op", SHAPE, clock.candidates(), host=HOST, cache_file=cache, clock=clock)
    assert (got.value, got.how) == ("onednn", "timed") and "2 malformed entries ignored" in caplog.text
    assert [entry["choice"] for entry in json.loads(cache.read_text())["entries"]] == ["onednn"]


def test_an_unusable_cache_location_is_not_fatal(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    clock = FakeClock({"native": 2e-3, "onednn": 1e-3})
    with caplog.at_level(logging.WARNING, logger="assocmem.autotune.measure"):
        got = choose("op", SHAPE, clock.candidates(), host=HOST, cache_file=blocker / "choices.json", clock=clock)
    assert (got.value, got.how, got.cache) == ("onednn", "timed", None) and "not usable" in caplog.text


def test_the_default_cache_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "results" / ".cache"))
    assert default_cache_file() == tmp_path / "results" / ".cache" / "choices.json"
    monkeypatch.delenv(CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_file() == tmp_path / "xdg" / "assocmem" / "choices.json"


X86 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 26
model\t\t: 2
model name\t: AMD EPYC
stepping\t: 1
flags\t\t: fpu sse avx avx2 fma avx512f avx512_bf16 amx_tile sha_ni
processor\t: 1
model name\t: AMD EPYC
"""
ARM = """processor\t: 0
Features\t: fp asimd sve bf16 crc32
CPU part\t: 0xd4f
"""


def test_the_host_key_names_the_cpu_and_its_isa_extensions() -> None:
    model, flags = cpu_model_and_flags(X86)
    assert model == "AMD EPYC (vendor_id AuthenticAMD, cpu family 26, model 2, stepping 1)"
    assert flags == ["amx_tile", "avx", "avx2", "avx512_bf16", "avx512f", "fma"]
    assert cpu_model_and_flags(ARM)[1] == ["asimd", "bf16", "sve"]
    key = host_key(X86, faiss="1.0")
    assert {"cpu", "isa", "machine", "torch", "threads", "env"} <= set(key) and key["faiss"] == "1.0"


def test_the_host_key_holds_the_libraries_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    monkeypatch.setenv("UNRELATED_VARIABLE", "1")
    env = host_key(X86)["env"]
    assert env["ONEDNN_MAX_CPU_ISA"] == "AVX2" and "UNRELATED_VARIABLE" not in env


@given(st.integers(min_value=1, max_value=7), st.integers(min_value=0, max_value=50))
def test_a_rotated_order_is_a_permutation_that_puts_each_item_once_in_each_position(n: int, round_: int) -> None:
    items = [f"arm{i}" for i in range(n)]
    assert sorted(rotated(items, round_)) == sorted(items) and rotated(items, round_)[0] == items[round_ % n]
    positions = {item: {rotated(items, r).index(item) for r in range(round_, round_ + n)} for item in items}
    assert all(seen == set(range(n)) for seen in positions.values())
    assert rotated([], round_) == []
