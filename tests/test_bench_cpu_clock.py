"""CPU time per step (suite/meters/clock.py) and the bench-only slowdown (benchmarks/slowdown.py)."""

from __future__ import annotations

import time

import pytest
import torch

from benchmarks import slowdown
from suite.meters import clock as clock_module


def test_clock_keeps_each_steps_cpu_time_beside_its_wall_time(monkeypatch):
    wall, cpu = [0.0], [0.0]
    monkeypatch.setattr(clock_module.time, "perf_counter", lambda: wall[0])
    monkeypatch.setattr(clock_module.time, "process_time", lambda: cpu[0])
    clock = clock_module.StepClock(torch.device("cpu"), warmup=1)
    # warm-up, then three steps: waiting for a busy core adds wall time (2.0) but no CPU time
    for index, (w, c) in enumerate([(5.0, 5.0), (1.0, 0.5), (2.0, 0.5), (1.0, 0.7)]):
        with clock.step(index, 10):
            wall[0] += w
            cpu[0] += c
    assert clock.median_step_s() == pytest.approx(1.0)
    assert clock.median_cpu_step_s() == pytest.approx(0.5)
    summary = clock.cpu_summary()
    assert summary["cpu_step_s_per_rank"] == [pytest.approx(0.5)] and summary["cpu_step_s_median"] == pytest.approx(0.5)


def test_clock_without_timed_steps_has_no_cpu_time():
    summary = clock_module.StepClock(torch.device("cpu"), warmup=3).cpu_summary()
    assert summary["cpu_step_s_per_rank"] == [None] and summary["cpu_step_s_median"] is None


@pytest.mark.parametrize("text, parsed", [("0.15", (None, 0.15)), ("fsdp:0.15", ("fsdp", 0.15))])
def test_slowdown_reads_a_fraction_for_every_method_or_one(text, parsed):
    assert slowdown.parse(text) == parsed


@pytest.mark.parametrize("text", ["fast", "fsdp:0", "fsdp:-1", "x:"])
def test_slowdown_rejects_bad_values_naming_the_form(text):
    with pytest.raises(ValueError, match="0.15"):
        slowdown.parse(text)


class FakeWorker:
    def __init__(self, method: str) -> None:
        self.cfg = type("Cfg", (), {"method": method})()

    def train_step(self, index, clock):
        slowdown.burn(0.02)
        return index


@pytest.mark.parametrize("method, factor", [("fsdp", 1.5), ("ddp", 1.0)])
def test_slowed_step_burns_the_fraction_of_its_own_cpu_time_for_the_named_method(method, factor):
    step = slowdown.slowed(FakeWorker.train_step, 0.5, "fsdp")
    start = time.process_time()
    assert step(FakeWorker(method), 7, None) == 7
    assert time.process_time() - start == pytest.approx(0.02 * factor, rel=0.25)
