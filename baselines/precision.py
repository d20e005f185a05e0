"""Mixed precision as a composable option: autocast for replicated models, FSDP2's policy for sharded ones."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

import torch
from torch.distributed.fsdp import MixedPrecisionPolicy


def autocast(device: torch.device, precision: str) -> AbstractContextManager:
    """bf16 compute with fp32 master weights and fp32 gradient all-reduce (DDP's usual recipe)."""
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return nullcontext()


def fsdp_policy(precision: str) -> MixedPrecisionPolicy:
    """bf16 parameters for all-gather and compute, fp32 gradient reduction (torchtitan's default)."""
    if precision == "bf16":
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    return MixedPrecisionPolicy()
