"""Meters over whole, steady periods, in real gloo runs: DDP's steady call count, a periodic method's slow
step in tokens/s, an outer optimizer's state under optimizer, and the phases of a step."""

from __future__ import annotations

import pytest

from tests.period_method import PERIOD

pytestmark = pytest.mark.slow

SMALL = ["--set", "micro_batch=4", "--set", "seq_len=64"]
PERIODIC = {"SUITE_REPRODUCTIONS": "tests.period_method"}
# 16 steps: warm-up 0-1, meters on 0 and 2-5, so steps 8-15 are two whole timed periods
PERIOD_TOKENS = str(16 * 2 * 4 * 64)


def _calls(rec: dict) -> int:
    return sum(op["count"] for op in rec["comm"]["per_rank"][0]["ops"]) // rec["comm"]["steps"]


def test_ddp_call_count_is_the_steady_states(runs):
    tiny = ["--nproc", "2", "--set", "micro_batch=1", "--set", "seq_len=32", "--set", "eval_every=100"]
    default = runs("ddp", "--model", "llama-50m", "--tokens", str(4 * 2 * 32), *tiny)
    later = runs("ddp", "--model", "llama-50m", "--tokens", str(6 * 2 * 32), "--set", "comm_step=5", *tiny)
    assert default["comm"]["method"].count("counted on steps 2-2") == 1
    assert _calls(default) == _calls(later) > 1


def test_a_periodic_methods_slow_step_shows_in_tokens_per_s(runs):
    sleep = 1.0
    rec = runs(
        "test-periodic", "--nproc", "2", "--tokens", PERIOD_TOKENS, "--set", f"sleep_s={sleep}", *SMALL, env=PERIODIC
    )
    tp = rec["throughput"]
    assert tp["period"] == PERIOD and tp["whole_periods"] == 2 and rec["comm"]["steps"] == PERIOD
    typical = sum(tp["phases_s_median"].values())  # medians: the three steps of a period that do not sleep
    assert tp["step_s"] - typical == pytest.approx(sleep / PERIOD, rel=0.4)
    assert tp["tokens_per_s"] == pytest.approx(rec["parallel"]["global_batch_tokens"] / tp["step_s"])


def test_an_outer_optimizers_state_is_counted_as_optimizer(runs):
    args = ["--nproc", "2", "--tokens", PERIOD_TOKENS, *SMALL]
    plain = runs("test-periodic", *args, env=PERIODIC)
    outer = runs("test-periodic", *args, "--set", "outer=true", env=PERIODIC)
    params = plain["memory"]["per_rank"][0]["params"]
    assert outer["optimizer"]["outer"] == ["SGD"]
    # the momentum buffer is one more copy of the parameters
    gained = outer["memory"]["per_rank"][0]["optimizer"] - plain["memory"]["per_rank"][0]["optimizer"]
    assert gained >= params


def test_phases_are_recorded_and_timed_steps_ran_at_the_allocators_defaults(runs):
    rec = runs("ddp", "--nproc", "2", "--tokens", PERIOD_TOKENS, *SMALL)
    assert rec["env"]["allocator"] == {}
    phases = rec["throughput"]["phases_s_median"]
    assert set(phases) == {"forward_backward", "aggregation", "optimizer", "after_step"}
    assert phases["forward_backward"] > phases["optimizer"] > 0
