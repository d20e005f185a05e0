"""Which steps the built-in meters run on, all off the clock.

Steps 0 and 1 are warm-up (DDP runs step 0 with one bucket for the whole model and rebuilds its buckets
after it, broadcasting once on step 1), so the memory tracker and the communication ledger start on step
2 (`mem_step`, `comm_step`), where every step of a period issues the steady state's collectives, and
each covers one whole period of the method's communication pattern (Strategy.comm_period): memory is
the maximum over the period, bytes and calls are the period's totals. The FLOP counter runs on
`flop_step` (0: every step has the same shapes). Both windows may overlap: the tracker and the ledger
observe without interfering. Running a meter on every step would slow the timed steps (each is a
TorchDispatchMode or hooks every tensor), so timed steps run with none.
"""

from __future__ import annotations

from suite.config import RunConfig


def flop_steps(cfg: RunConfig) -> range:
    return range(cfg.flop_step, cfg.flop_step + 1) if cfg.meters else range(0)


def memory_steps(cfg: RunConfig, period: int) -> range:
    return range(cfg.mem_step, cfg.mem_step + max(period, 1)) if cfg.meters else range(0)


def comm_steps(cfg: RunConfig, period: int) -> range:
    """The steps the communication ledger counts: one whole period from `comm_step`."""
    return range(cfg.comm_step, cfg.comm_step + max(period, 1)) if cfg.meters else range(0)
