"""A bench-only slowdown, for measuring the gate's power: every training step of the matching runs burns extra CPU.

    BENCH_SLOWDOWN=0.15            every run of the suite's loop: the shared loop 15% slower
    BENCH_SLOWDOWN=fsdp:0.15       only runs of method fsdp (any composition): one method 15% slower

The bench harness (benchmarks/measure.py) adds this module to SUITE_REPRODUCTIONS of the launches it makes
when BENCH_SLOWDOWN is set, so each worker imports it through the suite's ordinary discovery of out-of-tree
reproductions; it declares no method and, on import, wraps the one training step of suite/run/train.py. After a
step of t CPU seconds the wrapper spins until the process has used fraction x t more: extra work inside the
step clock, as a regression would add (a sleep would add wall time but no CPU time). The bare loop
(benchmarks/bare_loop.py) is not the suite's loop and is never slowed. Nothing else imports this module.
"""

from __future__ import annotations

import functools
import os
import time

from suite.extensions import Reproduction
from suite.run import train

ENV = "BENCH_SLOWDOWN"


def parse(text: str) -> tuple[str | None, float]:
    """(method or None for every method, fraction) from BENCH_SLOWDOWN's value."""
    method, _, fraction = text.rpartition(":")
    try:
        value = float(fraction)
    except ValueError:
        raise ValueError(f"{ENV}={text!r}: expected FRACTION or METHOD:FRACTION, e.g. 0.15 or fsdp:0.15") from None
    if not 0 < value <= 10:
        raise ValueError(f"{ENV}={text!r}: the fraction must be in (0, 10], e.g. 0.15")
    return method or None, value


def burn(cpu_seconds: float) -> None:
    """Spin until this process has used `cpu_seconds` more CPU time."""
    end = time.process_time() + cpu_seconds
    while time.process_time() < end:
        pass


def slowed(step, fraction: float, method: str | None):
    @functools.wraps(step)
    def train_step(self, index, clock):
        start = time.process_time()
        loss = step(self, index, clock)
        if method is None or self.cfg.method == method:
            burn(fraction * (time.process_time() - start))
        return loss

    return train_step


def install(text: str) -> None:
    method, fraction = parse(text)
    if not getattr(train.Worker.train_step, "bench_slowdown", False):
        train.Worker.train_step = slowed(train.Worker.train_step, fraction, method)
        train.Worker.train_step.bench_slowdown = True


if os.environ.get(ENV):
    install(os.environ[ENV])

REPRODUCTION = Reproduction("bench-slowdown", "a bench-only slowdown of the training step (benchmarks/slowdown.py)")
