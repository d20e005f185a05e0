"""Activation checkpointing of every residual block, applied from outside the model.

The composable `checkpoint` marks a module in place (no wrapper), so `fully_shard` and DDP see the
same module tree with or without it; non-reentrant recomputation gives identical gradients.
"""

from __future__ import annotations

from torch import nn
from torch.distributed._composable import checkpoint

from suite.models import blocks_of


def apply_activation_checkpointing(model: nn.Module) -> nn.Module:
    for block in blocks_of(model):
        checkpoint(block)
    return model
