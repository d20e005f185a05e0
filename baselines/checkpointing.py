"""Activation checkpointing of every residual block, applied from outside the model.

The composable `checkpoint` marks a module in place (no wrapper), so `fully_shard` and DDP see the
same module tree with or without it; non-reentrant recomputation gives identical gradients.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

from torch import nn
from torch.distributed._composable import checkpoint

from suite.models import blocks_of


def apply_activation_checkpointing(
    model: nn.Module, recompute: Callable[[nn.Module], AbstractContextManager] | None = None
) -> nn.Module:
    """Checkpoint every block; `recompute(block)`, if given, is the context its recomputation runs in."""
    for block in blocks_of(model):
        kw = {"context_fn": lambda b=block: (nullcontext(), recompute(b))} if recompute else {}
        checkpoint(block, **kw)
    return model
