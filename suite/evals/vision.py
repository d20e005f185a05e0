"""Top-1 accuracy of an image classifier on the held-out split, in the form of an lm-eval score."""

from __future__ import annotations

import math

import torch
from torch import nn

from suite.data.images import ImageData


@torch.no_grad()
def image_accuracy(
    model: nn.Module, data: ImageData, device: torch.device, batches: int | None = None, batch_size: int = 256
) -> dict:
    """{metric, value, stderr, n, source} over the first batches * batch_size val images, or all of them.

    stderr is the standard error of the mean of per-image hits, the formula lm-eval uses for acc.
    """
    n = len(data.val_labels) if batches is None else batches * batch_size
    if not 2 <= n <= len(data.val_labels) or batch_size < 1:
        raise ValueError(
            f"{n} images asked for; the val split of {data.name} holds {len(data.val_labels)} "
            "and a standard error needs at least 2: lower batches or batch_size"
        )
    ((images, labels),) = data.val_batches(1, n)
    was = model.training
    model.eval()
    try:
        hits = sum(
            int((model(x.to(device)).argmax(-1).cpu() == y).sum())
            for x, y in zip(images.split(batch_size), labels.split(batch_size))
        )
    finally:
        model.train(was)
    acc = hits / n
    return {
        "metric": "acc",
        "value": acc,
        "stderr": math.sqrt(acc * (1 - acc) / (n - 1)),
        "n": n,
        "source": f"top-1 on the val split of {data.name}",
    }
