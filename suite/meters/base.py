"""Meters are plug-ins: each says which steps it runs on, wraps them, and writes its own record section.

The training loop (suite.run.train) and the estimator (suite.estimate) drive the same meters through
`Metering`, so a section is built by one piece of code whether the step was real or fake. The built-in
meters (FLOPs, memory, communication: suite/meters/builtin.py) and any a reproduction declares
(suite.extensions.Reproduction.meters) run on every run they apply to, always off the clock: a step
that any meter wraps is not timed.

A meter's life in one rank: `steps()` says where it runs; `wrap(step)` is entered around each of those
steps; `after(step)` runs once the step is done; `local()` is this rank's result (plain data: it is
gathered across ranks, or returned from an estimating process); `section(per_rank, record, weight)` (a
class method, run once, on rank 0 or by the estimator) writes the record from the ranks' results:
`per_rank` maps each listed rank to its result, `weight` says how many ranks each listed one stands for
(1 in a measured run; an estimate steps one rank for many identical ones).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from suite.config import RunConfig
from suite.meters.comm import CommLedger


@dataclass
class MeterContext:
    """What a meter may read: the run's settings, the strategy's communication period and this rank's objects."""

    cfg: RunConfig
    period: int
    device: torch.device
    ledger: CommLedger
    model: Callable[[], nn.Module]  # the run's model as the strategy wrapped it (DDP, FSDP2), once built
    optimizers: Callable[[], list[torch.optim.Optimizer]]  # every optimizer the run owns, outer ones too


class Meter(ABC):
    name: str = ""

    def __init__(self, ctx: MeterContext) -> None:
        self.ctx = ctx

    @classmethod
    def applies(cls, cfg: RunConfig) -> bool:
        """Whether this meter runs on `cfg` (a reproduction's meter may apply to its own runs only)."""
        return True

    @abstractmethod
    def steps(self) -> range:
        """The steps this meter wraps (off the clock)."""

    def wrap(self, step: int) -> AbstractContextManager:
        return nullcontext()

    def after(self, step: int) -> None:
        """Called once a wrapped step is done (e.g. to keep the maximum over a period)."""

    @abstractmethod
    def local(self) -> Any:
        """This rank's result: plain data, None when the meter never ran."""

    @classmethod
    @abstractmethod
    def section(cls, per_rank: dict[int, Any], record: dict, weight: dict[int, int]) -> None:
        """Write this meter's part of `record` from the listed ranks' `local()`."""


class Metering:
    """The meters of one rank's run."""

    def __init__(self, meters: list[Meter]) -> None:
        self.meters = meters
        self._restored: dict[str, Any] = {}

    def meter(self, name: str) -> Meter | None:
        """The meter that writes section `name`, if it runs on this run."""
        return next((m for m in self.meters if m.name == name), None)

    def active(self, step: int) -> list[Meter]:
        return [m for m in self.meters if step in m.steps()]

    @contextmanager
    def step(self, step: int) -> Iterator[list[Meter]]:
        """Wrap one step in every meter that runs on it; yields those meters."""
        active = self.active(step)
        with ExitStack() as stack:
            for meter in active:
                stack.enter_context(meter.wrap(step))
            yield active
        for meter in active:
            meter.after(step)

    def last_step(self) -> int:
        """The last step any meter runs on (-1 without meters)."""
        return max((m.steps()[-1] for m in self.meters if len(m.steps())), default=-1)

    def results(self) -> dict[str, Any]:
        return {m.name: self._restored[m.name] if m.name in self._restored else m.local() for m in self.meters}

    def straddles(self, step: int) -> bool:
        """Whether a meter has run on some steps before `step` and runs on more from it (a checkpoint taken
        there could not restore that meter's half-done result)."""
        return any(m.steps().start < step < m.steps().stop for m in self.meters if len(m.steps()))

    def restore(self, saved: dict[str, Any], step: int) -> None:
        """After a resume at `step`: the results saved then stand for the meters that had finished by then."""
        self._restored = {m.name: saved.get(m.name) for m in self.meters if len(m.steps()) and m.steps()[-1] < step}

    def types(self) -> list[type[Meter]]:
        return [type(m) for m in self.meters]


def write_sections(
    types: list[type[Meter]], per_rank: dict[int, dict[str, Any]], record: dict, weight: dict[int, int] | None = None
) -> None:
    """Every meter's section of `record`, from each listed rank's `Metering.results()`."""
    weight = weight or dict.fromkeys(per_rank, 1)
    for meter in types:
        meter.section({rank: results.get(meter.name) for rank, results in per_rank.items()}, record, weight)
