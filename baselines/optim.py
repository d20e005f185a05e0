"""AdamW, the matched baseline optimizer: weight decay on matrices and the head, none on embeddings, norms
and biases (the groups of suite.run.optim.param_groups)."""

from __future__ import annotations

import torch
from torch import nn

from suite.config import RunConfig
from suite.run.optim import OptimizerSpec, param_groups
from suite.run.strategy import Context

DECAYED = ("matrices", "head")


def build_adamw(model: nn.Module, cfg: RunConfig, ctx: Context, params: dict) -> torch.optim.Optimizer:
    groups = param_groups(model)
    decayed = [p for g in DECAYED for p in groups[g]]
    rest = [p for g, ps in groups.items() if g not in DECAYED for p in ps]
    return torch.optim.AdamW(
        [
            {"params": decayed, "weight_decay": cfg.weight_decay, "name": "matrices"},
            {"params": rest, "weight_decay": 0.0, "name": "other"},
        ],
        lr=cfg.lr,
        betas=cfg.betas,
        foreach=True,
    )


ADAMW = OptimizerSpec(
    "adamw", build_adamw, "torch.optim.AdamW (foreach); decay on matrices and head (RunConfig lr, betas, weight_decay)"
)
