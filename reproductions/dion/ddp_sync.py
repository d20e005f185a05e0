"""Dion under DDP: the reducer's gradient all-reduce is turned off, so Dion synchronizes instead.

DDP all-reduces every gradient during backward; Dion's point is to send B Q and B^T P ((m + n) r numbers
per matrix) instead of G (m n). A DDP communication hook (torch's documented way to replace the
reducer's all-reduce) that returns each bucket untouched leaves every gradient local; Dion.step then
averages the AdamW groups' gradients and the matrices' low-rank factors over the same group. Gradient
clipping (the loop's, before the step) therefore sees each rank's own gradient: the record says so.
"""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def _local_gradients(_state, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    future: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    future.set_result(bucket.buffer())
    return future


def silence(model: DistributedDataParallel) -> dist.ProcessGroup:
    """Stop `model`'s reducer from all-reducing gradients; returns its process group (Dion syncs over it)."""
    model.register_comm_hook(None, _local_gradients)
    return model.process_group
