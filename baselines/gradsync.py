"""Averaging replicated parameters' gradients over a group with one all-reduce of a flat buffer."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors


def average_gradients(grads: list[torch.Tensor], group: dist.ProcessGroup) -> None:
    """Replace each of `grads` by its mean over `group` (one call: the ledger sees one all-reduce per step)."""
    if not grads:
        return
    flat = _flatten_dense_tensors(grads)
    dist.all_reduce(flat, group=group)
    flat /= dist.get_world_size(group)
    for grad, mean in zip(grads, _unflatten_dense_tensors(flat, grads), strict=True):
        grad.copy_(mean)
