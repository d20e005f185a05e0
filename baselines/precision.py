"""Mixed precision as a composable option: autocast for replicated models, FSDP2's policy for sharded ones.

fp16 autocasts to float16 and scales the loss (torch.amp.GradScaler, through Strategy.grad_scaler); fp8 is
emulated (baselines/fp8.py). Only methods whose ranks hold whole replicas take them (DDP, ZeRO-1): a scaler's
skip decision there is the same on every rank, since the gradients are.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

import torch
from torch.distributed.fsdp import MixedPrecisionPolicy


def autocast(device: torch.device, precision: str) -> AbstractContextManager:
    """bf16 compute with fp32 master weights and fp32 gradient all-reduce (DDP's usual recipe)."""
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    if precision == "fp16":
        return torch.autocast(device.type, dtype=torch.float16)
    return nullcontext()


def grad_scaler(device: torch.device, precision: str) -> torch.amp.GradScaler | None:
    """fp16's dynamic loss scale (torch's defaults: 2**16, halved on an overflow, doubled after 2000 good steps)."""
    return torch.amp.GradScaler(device.type) if precision == "fp16" else None


def fsdp_policy(precision: str) -> MixedPrecisionPolicy:
    """bf16 parameters for all-gather and compute, fp32 gradient reduction (torchtitan's default)."""
    if precision == "bf16":
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    return MixedPrecisionPolicy()
