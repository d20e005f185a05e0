"""ZeRO-1: DDP's replicated parameters and all-reduced gradients, the optimizer state sharded over the ranks.

torch's ZeroRedundancyOptimizer wraps the run's own optimizer (its class, parameter groups and settings): each
rank keeps the state of, and steps, only the parameters assigned to it (greedily by size), then broadcasts them
to the others. Between DDP (everything replicated) and FSDP2 (parameters, gradients and state sharded).
"""

from __future__ import annotations

import inspect

import torch
from torch.distributed.optim import ZeroRedundancyOptimizer

from baselines.ddp import DDP
from suite.run.strategy import Context


def _group_settings(group: dict) -> dict:
    return {k: v for k, v in group.items() if k != "params"}


def _constructor_defaults(optimizer: torch.optim.Optimizer) -> dict:
    """The optimizer's defaults its constructor takes (AdamW's defaults hold a flag its constructor refuses)."""
    accepted = inspect.signature(type(optimizer)).parameters
    return {k: v for k, v in optimizer.defaults.items() if k in accepted}


class Zero1(DDP):
    name = "zero1"

    def check(self, world_size: int) -> None:
        super().check(world_size)
        if self.cfg.checkpoint_every:
            raise ValueError("zero1 does not save checkpoints yet (its state is sharded); drop --checkpoint-every")

    def wrap_optimizer(self, optimizer: torch.optim.Optimizer, ctx: Context) -> torch.optim.Optimizer:
        groups = [{"params": g["params"], **_group_settings(g)} for g in optimizer.param_groups]
        # the wrapped optimizer holds no state yet (AdamW's is made on its first step): nothing is thrown away
        group = ctx.process_groups["replicate"]
        settings = _constructor_defaults(optimizer)
        return ZeroRedundancyOptimizer(groups, optimizer_class=type(optimizer), process_group=group, **settings)

    def describe(self, ctx: Context) -> dict:
        return {**super().describe(ctx), "strategy": self.name, "optimizer_shards": ctx.world_size}
