"""Optimizers are plug-ins, like methods: a reproduction declares an OptimizerSpec, `--optimizer NAME` picks it.

An optimizer is built after the strategy has built and wrapped this rank's model, with the strategy's
context (its labelled process groups and meshes), so a distributed optimizer (Dion, Muon under FSDP2)
can find the groups it communicates over. Its parameters come through `--set KEY=VALUE` like a method's:
the keys it declares are taken out of the run's variant before the method checks the rest.

Parameters are split into named groups here, once for every optimizer: matrix-shaped weights go to
matrix optimizers (Muon, Dion), embeddings, the output head, norms and biases to an element-wise one
(AdamW); the record lists the groups. The learning-rate schedule belongs to the loop, not to the
optimizer: linear warm-up, then constant, on every group of every optimizer.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR, LRScheduler

from suite.config import RunConfig
from suite.extensions import declared
from suite.params import Param, parse_params
from suite.run.strategy import local_tensor

GROUPS = ("matrices", "embeddings", "head", "norms", "biases", "other")
_NORMS = (nn.LayerNorm, nn.RMSNorm, nn.GroupNorm, nn.modules.batchnorm._BatchNorm)


@dataclass(frozen=True)
class OptimizerSpec:
    """`build(model, cfg, ctx, params)` returns the torch.optim.Optimizer over this rank's parameters.

    `params` declares each parameter the optimizer takes through `--set` (suite.params.Param); `build` receives
    them parsed, with the declared defaults filled in. `check(cfg)`, where given, raises ValueError naming the fix
    for a run it cannot step (before any worker starts).
    """

    name: str
    build: Callable
    description: str = ""
    params: dict[str, Param] = field(default_factory=dict)
    check: Callable[[RunConfig], None] | None = None


def optimizers() -> dict[str, OptimizerSpec]:
    return {name: spec for name, (spec, _) in declared("optimizers").items()}


def get_spec(name: str) -> OptimizerSpec:
    known = optimizers()
    if name not in known:
        raise ValueError(f"unknown optimizer {name!r}; choose one of: {', '.join(sorted(known))}")
    return known[name]


def split_variant(cfg: RunConfig) -> tuple[dict, dict]:
    """(method parameters, optimizer parameters) of cfg.variant: the optimizer's own keys go to it, parsed, once the
    optimizer's own check (OptimizerSpec.check) has passed."""
    spec = get_spec(cfg.optimizer)
    if spec.check is not None:
        spec.check(cfg)
    method = {k: v for k, v in cfg.variant.items() if k not in spec.params}
    given = parse_params(
        f"optimizer {spec.name}", spec.params, {k: v for k, v in cfg.variant.items() if k in spec.params}
    )
    return method, {k: p.default for k, p in spec.params.items() if p.default is not None} | given


def _head(model: nn.Module) -> nn.Module | None:
    """The output layer: the last Linear registered (LLaMA's `output`, ResNet's `fc`, Swin's `head`)."""
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    return linears[-1] if linears else None


def param_groups(model: nn.Module) -> dict[str, list[nn.Parameter]]:
    """This rank's trainable parameters by role (GROUPS); a tied head counts as the embedding it is."""
    role: dict[int, str] = {}
    for module in model.modules():
        if isinstance(module, nn.Embedding):
            role[id(module.weight)] = "embeddings"
        elif isinstance(module, _NORMS):
            role.update({id(p): "norms" for p in module.parameters(recurse=False)})
    head = _head(model)
    if head is not None and id(head.weight) not in role:
        role[id(head.weight)] = "head"
    groups: dict[str, list[nn.Parameter]] = {g: [] for g in GROUPS}
    seen: set[int] = set()
    for p in model.parameters():
        if not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        default = "matrices" if p.ndim >= 2 else "biases" if p.ndim == 1 else "other"
        groups[role.get(id(p), default)].append(p)
    return groups


def describe_groups(groups: dict[str, list[nn.Parameter]]) -> dict[str, dict]:
    """The record's view of the groups: tensors and elements of each (this rank's, local shards)."""
    return {
        name: {"tensors": len(ps), "numel": sum(local_tensor(p).numel() for p in ps)}
        for name, ps in groups.items()
        if ps
    }


def lr_schedule(
    optimizer: torch.optim.Optimizer, cfg: RunConfig, spent: Callable[[], float] = lambda: 0.0
) -> LRScheduler:
    """Linear warmup, then constant or cosine down to min_lr_ratio over the budget.

    `spent` is the fraction of the budget used so far (the loop's protocol): an arm that trains longer under
    an equal-FLOPs budget decays over its own longer run, so every arm ends its schedule where it stops."""
    warmup = max(cfg.warmup_steps, 1)

    def factor(step: int) -> float:
        ramp = min(1.0, (step + 1) / warmup)
        if cfg.lr_decay == "constant":
            return ramp
        return ramp * cosine_factor(spent(), cfg.min_lr_ratio)

    return LambdaLR(optimizer, factor)


def cosine_factor(spent: float, min_lr_ratio: float) -> float:
    """The cosine schedule's learning rate over the peak once `spent` of the budget is used (clipped to [0, 1])."""
    cosine = 0.5 * (1 + math.cos(math.pi * min(max(spent, 0.0), 1.0)))
    return min_lr_ratio + (1 - min_lr_ratio) * cosine
