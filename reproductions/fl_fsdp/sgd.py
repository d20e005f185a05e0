"""Plain SGD (torch.optim.SGD, no momentum unless `--set sgd_momentum=...`): Local SGD's inner optimizer,
and the one under which FedAvg with F = 1 is exactly synchronous data parallel (tests/test_fl_fsdp_*.py)."""

from __future__ import annotations

import torch
from torch import nn

from suite.config import RunConfig
from suite.params import Param
from suite.run.optim import OptimizerSpec
from suite.run.strategy import Context


def build_sgd(model: nn.Module, cfg: RunConfig, ctx: Context, params: dict) -> torch.optim.Optimizer:
    return torch.optim.SGD(
        [p for p in model.parameters() if p.requires_grad], lr=cfg.lr, momentum=params["sgd_momentum"]
    )


SGD = OptimizerSpec(
    "sgd",
    build_sgd,
    "torch.optim.SGD (RunConfig lr; sgd_momentum, default 0)",
    {"sgd_momentum": Param(float, 0.0, "momentum", low=0, high=1, high_open=True)},
)
