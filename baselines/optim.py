"""AdamW over named parameter groups, with linear warm-up then a constant learning rate.

Matrices (2-D and more, except embeddings) get weight decay; embeddings, norms and biases do not.
The group names are what later optimizers (Muon, Dion) split on: matrices go to them, the rest to AdamW.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.optim.lr_scheduler import LRScheduler

from suite.config import RunConfig

OPTIMIZERS = ("adamw",)


def check(name: str) -> None:
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; choose one of: {', '.join(OPTIMIZERS)}")


def param_groups(model: nn.Module) -> dict[str, list[nn.Parameter]]:
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    groups: dict[str, list[nn.Parameter]] = {"matrices": [], "other": []}
    for p in model.parameters():
        if p.requires_grad:
            groups["matrices" if p.ndim >= 2 and id(p) not in embeddings else "other"].append(p)
    return groups


def build_optimizer(model: nn.Module, cfg: RunConfig) -> tuple[torch.optim.Optimizer, LRScheduler]:
    check(cfg.optimizer)
    groups = param_groups(model)
    opt = torch.optim.AdamW(
        [
            {"params": groups["matrices"], "weight_decay": cfg.weight_decay, "name": "matrices"},
            {"params": groups["other"], "weight_decay": 0.0, "name": "other"},
        ],
        lr=cfg.lr,
        betas=cfg.betas,
        foreach=True,
    )
    warmup = max(cfg.warmup_steps, 1)
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / warmup))
    return opt, schedule
