"""DDP: every rank holds the whole model; gradients are all-reduced in buckets during backward."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Callable

from torch import nn
from torch.nn.parallel import DistributedDataParallel

from baselines import precision
from baselines.checkpointing import apply_activation_checkpointing
from suite.strategy import Context, Strategy, register


@register
class DDP(Strategy):
    name = "ddp"

    def setup(self, ctx: Context) -> None:
        ctx.label_group(None, "replicate")

    def build(self, make_model: Callable[[], nn.Module], ctx: Context) -> nn.Module:
        model = make_model().to(ctx.device)
        if self.cfg.ac:
            apply_activation_checkpointing(model)
        ids = [ctx.device.index] if ctx.device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids)

    def micro_step(self, model: nn.Module, last: bool) -> AbstractContextManager:
        return nullcontext() if last else model.no_sync()

    def autocast(self, ctx: Context) -> AbstractContextManager:
        return precision.autocast(ctx.device, self.cfg.precision)

    def eval_model(self, model: nn.Module) -> nn.Module:
        return model.module

    def describe(self, ctx: Context) -> dict:
        return {"strategy": "ddp", "mesh": {"replicate": ctx.world_size}}
