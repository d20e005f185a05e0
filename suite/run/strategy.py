"""The narrow interface between the one training loop and a way of splitting or synchronising training.

A strategy (a baseline such as DDP or FSDP2, or a paper's method) decides only the points listed in
docs/architecture.md: process groups, which parameters exist on this rank and how they are wrapped, the forward
path, gradient aggregation that no wrapper does, the optimizer, what happens after the optimizer step,
which data each rank reads, which model is evaluated, and what the record says about it. The loop, the
meters and the record are fixed (AlgoPerf's split between a submission and its workload).

Three hooks let a strategy replace a piece of the step where a wrapper cannot do its work from outside:
`forward_backward` (a pipeline runs its own schedule over the micro-batch), `wrap_optimizer` (ZeRO-1 shards
the run's optimizer) and `grad_scaler` (fp16's loss scaling: the loop scales the loss before backward,
unscales before clipping and lets the scaler skip a step whose gradients are not finite).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor

from suite.config import RunConfig
from suite.extensions import declared
from suite.meters.comm import CommLedger
from suite.params import Param, parse_params
from suite.run import emulate


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """This rank's part of a tensor: the local shard of a DTensor, or the tensor itself."""
    return t.to_local() if isinstance(t, DTensor) else t


@dataclass
class Context:
    """What a strategy may use: this rank's place, its device and the ledger (to label groups)."""

    cfg: RunConfig
    rank: int
    world_size: int
    device: torch.device
    ledger: CommLedger
    groups: list[dict] = field(default_factory=list)
    # what an optimizer may need: the labelled process groups by name, and any mesh the strategy made
    process_groups: dict[str, dist.ProcessGroup] = field(default_factory=dict)
    meshes: dict[str, DeviceMesh] = field(default_factory=dict)

    def label_group(self, group: dist.ProcessGroup | None, name: str, tier: str | None = None) -> None:
        """Name a process group (and its tier) in the communication ledger and the record."""
        label = self.ledger.label_group(group, name, tier)
        self.groups.append({"name": name, "size": label.size, "tier": label.tier, "ranks": list(label.ranks)})
        self.process_groups[name] = group or dist.group.WORLD

    def cpu_group(self) -> dist.ProcessGroup:
        """A new group of every rank for CPU tensors (checks, off NCCL): gloo, or the emulated workers' own group
        (suite/run/emulate.py cpu_backend)."""
        return dist.new_group(backend=emulate.cpu_backend())


class Strategy(ABC):
    """Default behaviour of every hook: a single replica per rank with plain data parallel data."""

    name: str = ""
    baseline: bool = True
    # typed parameters (suite.params): `--set KEY=VALUE` and plans' variants are parsed and checked by them
    params: dict[str, Param] = {}
    # steps after which the method's communication repeats (e.g. averaging every H steps): the ledger
    # counts one whole period, so per-step bytes are the period's total over its length
    comm_period: int = 1
    # the --precision modes the method implements; any other is refused before launch
    precisions: tuple[str, ...] = ("fp32", "bf16")
    # why `estimate` cannot run the method's step on fake tensors and the fake process group ("": it can)
    not_estimable: str = ""
    # whether the evaluation model's forward needs every rank (a sharded or pipelined model); where it does not,
    # rank 0 evaluates alone and sends the others its loss: the run records rank 0's, and the other ranks' forwards
    # were work thrown away (issue 31)
    eval_on_every_rank: bool = True

    def __init__(self, cfg: RunConfig, variant: dict | None = None) -> None:
        if cfg.precision not in self.precisions:
            raise ValueError(
                f"method {self.name} runs in {', '.join(self.precisions)}, not {cfg.precision}; "
                f"use --precision {self.precisions[0]} or a method that takes {cfg.precision} (ddp)"
            )
        self.cfg = cfg
        given = parse_params(f"method {self.name}", self.params, cfg.variant if variant is None else variant)
        # declared defaults are filled in, so a run that names a default is the same arm as one that leaves it out
        self.variant = {k: p.default for k, p in self.params.items() if p.default is not None} | given

    def check(self, world_size: int) -> None:
        """Raise ValueError (naming the fix) when this method cannot run on `world_size` workers."""

    def setup(self, ctx: Context) -> None:
        """Create and label process groups and meshes."""
        ctx.label_group(None, "world")

    @abstractmethod
    def build(self, make_model: Callable[[], nn.Module], ctx: Context) -> nn.Module:
        """Which parameters exist on this rank, and their wrapping."""

    def micro_step(self, model: nn.Module, last: bool) -> AbstractContextManager:
        """Context for one micro-batch's forward and backward (gradient sync only on the last one)."""
        return nullcontext()

    def autocast(self, ctx: Context) -> AbstractContextManager:
        return nullcontext()

    def forward_backward(
        self,
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        loss_fn: Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor],
        backward: Callable[[torch.Tensor], None],
    ) -> torch.Tensor:
        """One micro-batch's forward and backward; returns its loss, detached. `loss_fn(model, x, y)` is the
        task's loss under the strategy's autocast, already divided by the accumulation steps; `backward(loss)`
        applies the loss scale, if any. A pipeline replaces this with its schedule; the loss it returns is the
        same on every rank (sent from the last stage)."""
        loss = loss_fn(model, x, y)
        backward(loss)
        return loss.detach()

    def wrap_optimizer(self, optimizer: torch.optim.Optimizer, ctx: Context) -> torch.optim.Optimizer:
        """The optimizer the loop steps: the run's own, or a wrapper over it (ZeRO-1 shards its state)."""
        return optimizer

    def grad_scaler(self, ctx: Context) -> torch.amp.GradScaler | None:
        """A loss scaler (fp16), or None: no scaling."""
        return None

    def after_backward(self, model: nn.Module, ctx: Context) -> None:
        """Gradient aggregation that no wrapper does."""

    def clip_grad_norm(self, model: nn.Module, max_norm: float, ctx: Context) -> None:
        """Clip by the norm of the whole model's gradient; a strategy whose ranks hold different parts
        of the model must compute that norm across ranks, or the holders of one part would diverge."""
        nn.utils.clip_grad_norm_(model.parameters(), max_norm, foreach=True)

    def after_step(self, model: nn.Module, step: int, ctx: Context) -> None:
        """Periodic averaging or outer optimizers."""

    def optimizers(self) -> list[torch.optim.Optimizer]:
        """Optimizers the strategy owns besides the run's own (an outer optimizer): the memory meter sees them."""
        return []

    def data_replica(self, ctx: Context) -> tuple[int, int]:
        """(index of this rank's data replica, number of replicas): which rows of the global batch it reads."""
        return ctx.rank, ctx.world_size

    def eval_model(self, model: nn.Module) -> nn.Module:
        return model

    def describe(self, ctx: Context) -> dict:
        """`strategy` and `mesh` fields of the record's `parallel` section."""
        return {"strategy": self.name, "mesh": {"world": ctx.world_size}}


def methods() -> dict[str, type[Strategy]]:
    """Every method the reproductions declare (suite.extensions), by name."""
    return {name: cls for name, (cls, _) in declared("methods").items()}


def get_strategy(cfg: RunConfig, variant: dict | None = None) -> Strategy:
    """The method of `cfg`, checking `variant` (default: cfg.variant) as its parameters."""
    known = methods()
    if cfg.method not in known:
        raise ValueError(f"unknown method {cfg.method!r}; choose one of: {', '.join(sorted(known))}")
    return known[cfg.method](cfg, cfg.variant if variant is None else variant)
