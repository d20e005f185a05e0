"""Microbenchmark items: one optimizer step on one matrix, for the step-time-against-size figure.

`optimizer_step(device, optimizer, rows, cols, rank_fraction)` builds the optimizer on a single
rows x cols weight with a fixed gradient, takes one step off the clock (Dion draws Q and allocates its
state there), and returns the step to time (suite/plan/micro.py times it, counts its FLOPs and memory). The
returned numbers are this matrix's rank and the bytes of optimizer state it holds, measured on the state
tensors after the step.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from baselines.muon import Muon
from reproductions.dion.dion import Dion, rank_of

OPTIMIZERS = ("adamw", "muon", "dion")


def _build(optimizer: str, x: nn.Parameter, rank_fraction: float) -> torch.optim.Optimizer:
    if optimizer == "adamw":
        return torch.optim.AdamW([x], lr=1e-3, foreach=True)
    if optimizer == "muon":
        return Muon([x], lr=0.02)
    if optimizer == "dion":
        return Dion([x], lr=0.02, rank_fraction=rank_fraction)
    raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {optimizer!r}")


def optimizer_step(
    device: torch.device, optimizer: str, rows: int, cols: int, rank_fraction: float = 1.0
) -> Callable[[], dict]:
    gen = torch.Generator().manual_seed(0)
    x = nn.Parameter(torch.randn(rows, cols, generator=gen).to(device))
    grad = torch.randn(rows, cols, generator=gen).to(device)
    torch.manual_seed(0)
    opt = _build(optimizer, x, rank_fraction)

    def step() -> dict:
        x.grad = grad
        opt.step()
        state = [t for s in opt.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
        return {
            "rank": rank_of((rows, cols), rank_fraction) if optimizer == "dion" else min(rows, cols),
            "state_bytes": sum(t.numel() * t.element_size() for t in state),
        }

    step()
    return step
