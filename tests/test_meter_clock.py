"""The meters' schedule and the step clock: each meter on its own steps, memory and the ledger over one whole
period after DDP's bucket rebuild, timed steps only, throughput over whole periods, phases apart."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from suite.config import RunConfig
from suite.meters.schedule import comm_steps, flop_steps, memory_steps


@given(flop=st.integers(0, 5), mem=st.integers(0, 5), comm=st.integers(0, 5), period=st.integers(1, 8))
def test_each_meter_runs_on_its_steps_and_memory_and_ledger_on_one_period(flop, mem, comm, period):
    cfg = RunConfig(method="ddp", flop_step=flop, mem_step=mem, comm_step=comm)
    assert list(flop_steps(cfg)) == [flop]
    assert list(memory_steps(cfg, period)) == list(range(mem, mem + period))
    assert list(comm_steps(cfg, period)) == list(range(comm, comm + period))


def test_memory_and_ledger_start_after_ddps_bucket_rebuild():
    cfg = RunConfig()
    assert comm_steps(cfg, 1)[0] >= 2 and memory_steps(cfg, 1)[0] >= 2


@given(period=st.integers(1, 8))
def test_meters_off_meters_nothing(period):
    cfg = RunConfig(method="ddp", meters=False)
    assert not (flop_steps(cfg) or memory_steps(cfg, period) or comm_steps(cfg, period))


def _fake_time(monkeypatch, durations: list[float]):
    """perf_counter advancing by each duration in turn (one per step; phases read it too: they take 0)."""
    import suite.meters.clock as clock_module

    now = [0.0]
    pending = list(durations)

    def perf_counter() -> float:
        return now[0]

    monkeypatch.setattr(clock_module.time, "perf_counter", perf_counter)

    def advance() -> None:
        now[0] += pending.pop(0)

    return clock_module, advance


def test_clock_keeps_warm_up_and_metered_steps_off_and_takes_the_median(monkeypatch):
    clock_module, advance = _fake_time(monkeypatch, [9.0, 0.5, 5.0, 0.1, 0.2, 0.3])
    clock = clock_module.StepClock(torch.device("cpu"), warmup=1)
    for index, on_clock in enumerate((True, False, True, True, True, True)):  # warm-up 9 s, metered 0.5
        with clock.step(index, 100, on_clock=on_clock):
            advance()
    assert clock.timed_steps == 4 and clock.elapsed == pytest.approx(15.1)
    assert clock.step_s() == pytest.approx(5.6 / 4)
    assert clock.median_step_s() == pytest.approx(0.25)
    assert clock.tokens_per_s() == pytest.approx(400 / 5.6)


def test_throughput_counts_whole_periods_only(monkeypatch):
    # period 4: steps 3, 7, 11 average (2 s), the others 0.5 s; warm-up 2 steps, step 4 metered
    durations = [2.0 if i % 4 == 3 else 0.5 for i in range(14)]
    clock_module, advance = _fake_time(monkeypatch, durations)
    clock = clock_module.StepClock(torch.device("cpu"), warmup=2, period=4)
    for index in range(14):
        with clock.step(index, 10, on_clock=index != 4):
            advance()
    # period 0 (steps 0-3) and 1 (4-7) lost steps; period 2 (8-11) is whole; 12-13 are a partial period
    assert clock.whole_periods() == 1
    assert clock.step_s() == pytest.approx((3 * 0.5 + 2.0) / 4)
    assert clock.tokens_per_s() == pytest.approx(40 / 3.5)
    assert clock.median_step_s() == pytest.approx(3.5 / 4)


def test_phases_are_timed_apart_and_their_medians_recorded(monkeypatch):
    import suite.meters.clock as clock_module

    ticks = iter([0.0, 0.0, 1.0, 1.0, 1.25, 1.25, 3.0])  # step start, fwd+bwd 1 s, optimizer 0.25 s, step end
    monkeypatch.setattr(clock_module.time, "perf_counter", lambda: next(ticks))
    clock = clock_module.StepClock(torch.device("cpu"), warmup=0)
    with clock.step(0, 10):
        with clock.phase("forward_backward"):
            pass
        with clock.phase("optimizer"):
            pass
    phases = clock.phase_medians()
    assert phases["forward_backward"] == pytest.approx(1.0) and phases["optimizer"] == pytest.approx(0.25)
    assert phases["aggregation"] == 0.0 and set(phases) == set(clock_module.PHASES)


def test_a_meeting_of_emulated_workers_times_the_step_from_meeting_to_meeting():
    """Emulated workers take turns; a step runs between the instants the last worker reached each edge, not over
    the turns rank 0 held (its own clock timed FL's 128 workers at 7x the process's speed)."""
    from suite.meters.clock import StepClock

    instants = iter([(10.0, 1.0), (13.5, 8.0), (20.0, 9.0), (22.0, 12.5)])
    clock = StepClock(torch.device("cpu"), warmup=0, meet=lambda: next(instants))
    for index in range(2):
        with clock.step(index, tokens=100):
            pass
    assert [(s.seconds, s.cpu_seconds) for s in clock.timed] == [(3.5, 7.0), (2.0, 3.5)]
    assert clock.elapsed == 5.5 and clock.tokens_per_s() == 200 / 5.5
