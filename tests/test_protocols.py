"""Budgets: exactly one, positive; stopping is monotone in what has been used."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from suite.run.protocols import Progress, Protocol, from_args


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


def test_cosine_decay_follows_the_budget_spent_and_constant_stays_flat():
    import torch

    from suite.config import RunConfig
    from suite.run.optim import lr_schedule

    spent = {"now": 0.0}
    param = torch.nn.Parameter(torch.zeros(1))

    def lrs(cfg: RunConfig, fractions: list[float]) -> list[float]:
        opt = torch.optim.SGD([param], lr=1.0)
        schedule = lr_schedule(opt, cfg, lambda: spent["now"])
        out = []
        for f in fractions:
            spent["now"] = f
            opt.step()
            schedule.step()
            out.append(opt.param_groups[0]["lr"])
        return out

    cosine = lrs(RunConfig(warmup_steps=1, lr_decay="cosine", min_lr_ratio=0.1), [0.0, 0.5, 1.0])
    assert cosine == pytest.approx([1.0, 0.55, 0.1])
    assert lrs(RunConfig(warmup_steps=1), [0.0, 0.5, 1.0]) == [1.0, 1.0, 1.0]


@pytest.mark.parametrize(
    "sets, fix",
    [(["lr_decay=linear"], "unknown lr_decay"), (["lr_decay=cosine", "min_lr_ratio=2"], "min_lr_ratio must be")],
)
def test_bad_schedules_are_one_line_errors(sets, fix, capsys):
    from suite.cli import main

    argv = ["run", "ddp", "--tokens", "1000"] + [a for s in sets for a in ("--set", s)]
    assert main(argv) == 2 and fix in capsys.readouterr().err


def test_cosine_decay_cannot_follow_wall_time(capsys):
    from suite.cli import main

    assert main(["run", "ddp", "--time", "10", "--set", "lr_decay=cosine"]) == 2
    assert "not --time" in capsys.readouterr().err
