"""DDP: every rank holds the whole model; gradients are all-reduced in buckets during backward."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

from torch import nn
from torch.nn.parallel import DistributedDataParallel

from baselines import fp8, precision
from baselines.checkpointing import apply_activation_checkpointing
from suite.run.strategy import Context, Strategy

# Buffers here are constants (RoPE tables) or running statistics read only by rank 0's evaluation;
# broadcasting them every forward would add traffic that is not DDP's gradient all-reduce. The flag
# was renamed in torch 2.14; users on GPU nodes may bring an older torch.
NO_FORWARD_BUFFER_SYNC = (
    {"forward_sync_buffers": False}
    if "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters
    else {"broadcast_buffers": False}
)


class DDP(Strategy):
    name = "ddp"
    precisions = ("fp32", "bf16", "fp16", "fp8")
    eval_on_every_rank = False  # the module itself: every rank holds the same one

    def check(self, world_size: int) -> None:
        if self.cfg.precision == "fp8" and (missing := fp8.missing_dtypes()):
            raise ValueError(f"--precision fp8 needs torch.{missing[0]}, which this torch lacks; use fp32 or bf16")

    def setup(self, ctx: Context) -> None:
        ctx.label_group(None, "replicate")

    def build(self, make_model: Callable[[], nn.Module], ctx: Context) -> nn.Module:
        model = make_model().to(ctx.device)
        if self.cfg.precision == "fp8":
            fp8.apply_fp8(model)
        if self.cfg.ac:
            apply_activation_checkpointing(model)
        ids = [ctx.device.index] if ctx.device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids, **NO_FORWARD_BUFFER_SYNC)

    def micro_step(self, model: nn.Module, last: bool) -> AbstractContextManager:
        return nullcontext() if last else model.no_sync()

    def autocast(self, ctx: Context) -> AbstractContextManager:
        return precision.autocast(ctx.device, self.cfg.precision)

    def grad_scaler(self, ctx: Context):
        return precision.grad_scaler(ctx.device, self.cfg.precision)

    def eval_model(self, model: nn.Module) -> nn.Module:
        return model.module

    def describe(self, ctx: Context) -> dict:
        note = {"precision_note": fp8.NOTE} if self.cfg.precision == "fp8" else {}
        return {"strategy": "ddp", "mesh": {"replicate": ctx.world_size}, **note}
