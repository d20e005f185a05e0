"""The meters' schedule and the step clock: each meter on its own steps, the ledger on one period, timed steps only."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from suite.config import RunConfig
from suite.meters.schedule import comm_steps, last_metered_step, metered


@given(flop=st.integers(0, 5), mem=st.integers(0, 5), comm=st.integers(0, 5), period=st.integers(1, 8))
def test_each_meter_runs_on_its_steps_and_the_ledger_on_one_period(flop, mem, comm, period):
    cfg = RunConfig(method="ddp", flop_step=flop, mem_step=mem, comm_step=comm)
    steps = range(last_metered_step(cfg, period) + 3)
    on = [metered(cfg, s, period) for s in steps]
    assert [s for s in steps if on[s].flops] == [flop]
    assert [s for s in steps if on[s].memory] == [mem]
    assert [s for s in steps if on[s].comm] == list(range(comm, comm + period)) == list(comm_steps(cfg, period))
    assert last_metered_step(cfg, period) == max(s for s in steps if on[s].any)


@given(step=st.integers(0, 20), period=st.integers(1, 8))
def test_meters_off_meters_nothing(step, period):
    assert not metered(RunConfig(method="ddp", meters=False), step, period).any


def test_clock_keeps_warm_up_and_metered_steps_off_and_takes_the_median(monkeypatch):
    import suite.meters.clock as clock_module

    ticks = iter([0.0, 9.0, 10.0, 10.5, 11.0, 16.0, 20.0, 20.1, 21.0, 21.2, 22.0, 22.3])
    monkeypatch.setattr(clock_module.time, "perf_counter", lambda: next(ticks))
    clock = clock_module.StepClock(torch.device("cpu"), warmup=1)
    for on_clock in (True, False, True, True, True, True):  # warm-up 9 s, metered 0.5, then 5, 0.1, 0.2, 0.3
        with clock.step(100, on_clock=on_clock):
            pass
    assert clock.timed_steps == 4 and clock.elapsed == pytest.approx(15.1)
    assert clock.step_s() == pytest.approx(5.6 / 4)
    assert clock.median_step_s() == pytest.approx(0.25)
    assert clock.tokens_per_s() == pytest.approx(400 / 5.6)
