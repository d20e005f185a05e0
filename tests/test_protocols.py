"""Budgets: exactly one, positive; stopping is monotone in what has been used."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from suite.protocols import Progress, Protocol, from_args


@pytest.mark.parametrize(
    "kw, match",
    [
        ({}, "exactly one budget"),
        ({"tokens": 10, "time_s": 5}, "exactly one budget"),
        ({"tokens": -5}, "positive"),
        ({"flops": 0}, "positive"),
        ({"target": 2.0, "max_tokens": 0}, "positive"),
    ],
)
def test_bad_budgets(kw, match):
    args = {"tokens": None, "flops": None, "time_s": None, "target": None, "max_tokens": 1000, **kw}
    with pytest.raises(ValueError, match=match):
        from_args(**args)


@given(
    kind=st.sampled_from(["tokens", "flops", "time"]),
    budget=st.floats(1, 1e12),
    used=st.floats(0, 2e12),
    more=st.floats(0, 1e12),
)
def test_done_is_monotone(kind, budget, used, more):
    proto = Protocol(kind, budget)

    def progress(x):
        return Progress(
            1, int(x) if kind == "tokens" else 0, x if kind == "flops" else 0.0, x if kind == "time" else 0.0, None
        )

    if proto.done(progress(used)):
        assert proto.done(progress(used + more))
    assert proto.done(progress(budget + 1)) and proto.reached(progress(budget + 1))


@given(target=st.floats(0.1, 10), loss=st.floats(0.01, 20), tokens=st.integers(0, 10_000))
def test_target_stops_at_target_or_cap(target, loss, tokens):
    proto = Protocol("target", 5_000, target=target)
    p = Progress(1, tokens, 0.0, 0.0, loss)
    assert proto.reached(p) == (loss <= target)
    assert proto.done(p) == (loss <= target or tokens >= 5_000)
    assert proto.describe(p)["reached"] == (loss <= target)
