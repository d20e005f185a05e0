"""Which meters run on which step.

Every meter runs on its own few steps, kept off the clock: the FLOP counter on `flop_step`, the memory
tracker on `mem_step`, the communication ledger on one period of the method's communication pattern
starting at `comm_step`. Each is a TorchDispatchMode or hooks every tensor, and running one on every step
would slow the timed steps by about 10% (measured by the bench pair meters/no-meters); every step of one
period issues the same collectives, so one period gives the per-step bytes exactly. The training loop
and the estimator both read this schedule, so an estimate meters the same steps a real run does.
"""

from __future__ import annotations

from dataclasses import dataclass

from suite.config import RunConfig


@dataclass(frozen=True)
class Metered:
    flops: bool
    memory: bool
    comm: bool

    @property
    def any(self) -> bool:
        return self.flops or self.memory or self.comm


def comm_steps(cfg: RunConfig, period: int) -> range:
    """The steps the communication ledger counts."""
    return range(cfg.comm_step, cfg.comm_step + max(period, 1))


def metered(cfg: RunConfig, step: int, period: int) -> Metered:
    """Which meters run on `step` of a run whose strategy repeats its communication every `period` steps."""
    if not cfg.meters:
        return Metered(False, False, False)
    return Metered(step == cfg.flop_step, step == cfg.mem_step, step in comm_steps(cfg, period))


def last_metered_step(cfg: RunConfig, period: int) -> int:
    return max(cfg.flop_step, cfg.mem_step, comm_steps(cfg, period)[-1])
