"""The meters' schedule: each meter on its own steps, the ledger on exactly one period, nothing with meters off."""

from __future__ import annotations

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
