"""FL+FSDP and FL+HSDP (arXiv 2609.20359), with DiLoCo and Local SGD built from the same pieces.

N ranks form K federation groups of G ranks (mesh.py). Each group trains its own copy of the model with
its own optimizer (the run's, AdamW by default, same schedule everywhere): FSDP2 `fully_shard` over the
group's sub-mesh (shard, or replicate x shard for HSDP), or DDP over the group's ranks, or nothing when a
group is one rank. Every F steps, after the optimizer step, each rank averages its shard with the same
shard in every other group (averaging.py); optimizer moments stay local unless `average_moments=true`.

Methods (all take `--set F=... G=...`; the period F is also the ledger's and the clock's period):
- fl-fsdp: groups of G sharded over all G ranks; FedAvg.
- fl-hsdp: groups of G, HSDP inside (shard S, G / S replicas); FedAvg.
- diloco: outer Nesterov SGD (outer_lr 0.7, outer_momentum 0.9) on the pseudo-gradient every F = H steps;
  inner DDP (default, G = 1) or FSDP (`inner=fsdp`).
- local-sgd: FedAvg of groups of G (default 1) ranks with DDP (or FSDP) inside.
Any of them takes `outer=none|sgd|nesterov`, `average_moments`, `data_split=split|whole`, `check=true`.

Data: `split` (the paper's runs) gives every rank its own rows of the global batch; `whole` gives each
group the whole set: rank i of every group reads the same rows, as a per-group sampler with one seed would,
so a step's distinct tokens (what the record counts) are one group's, while all K groups compute.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, contextmanager, nullcontext

import torch
from torch import nn
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel

from baselines import precision
from baselines.checkpointing import apply_activation_checkpointing
from baselines.ddp import NO_FORWARD_BUFFER_SYNC
from baselines.fsdp import gradient_sync
from reproductions.fl_fsdp.averaging import OUTER, FederatedAverager
from reproductions.fl_fsdp.formulas import ring_bytes
from reproductions.fl_fsdp.mesh import Shape, build_mesh, group_mesh, node_size, shape_of
from suite.models import blocks_of
from suite.params import Param
from suite.run.strategy import Context, Strategy

SPLITS = ("split", "whole")
INNERS = ("fsdp", "ddp")


class Federated(Strategy):
    """FedAvg of federation groups every F steps; subclasses set the wrapper inside a group and defaults."""

    name = "fl-fsdp"
    baseline = False
    inner = "fsdp"
    params = {
        "F": Param(int, 8, "steps between aggregations", low=1),
        "G": Param(int, None, "ranks per federation group (default: a node's workers)", low=1),
        "average_moments": Param(bool, False, "average the optimizer's moments too"),
        "outer": Param(str, "none", "outer optimizer on the pseudo-gradient", OUTER),
        "outer_lr": Param(float, None, "outer learning rate (default 0.7 with an outer optimizer)", low=0),
        "outer_momentum": Param(float, None, "outer momentum (default 0.9 with an outer optimizer)", low=0),
        "data_split": Param(str, "split", "split: every rank its own rows; whole: each group the whole set", SPLITS),
        "check": Param(bool, False, "check after each aggregation that the groups agree"),
        "reshard_after_forward": Param(bool, True, "FSDP2's reshard_after_forward inside a group"),
    }

    def __init__(self, cfg, variant: dict | None = None) -> None:
        super().__init__(cfg, variant)
        v = self.variant
        if v["outer"] != "none":
            v.setdefault("outer_lr", 0.7)
            v.setdefault("outer_momentum", 0.9)
        elif "outer_lr" in v or "outer_momentum" in v:
            raise ValueError("outer_lr and outer_momentum need an outer optimizer: add --set outer=nesterov (or sgd)")
        self.F = v["F"]
        self.comm_period = self.F  # the ledger and the clock cover whole aggregation periods
        self.inner_optimizer: torch.optim.Optimizer | None = None

    # ---- shape ---------------------------------------------------------------------------------------
    def shape(self, world_size: int) -> Shape:
        g = self.variant.get("G", self.default_G(world_size))
        s = g if self.inner == "fsdp" else 1
        return shape_of(world_size, g, self.variant.get("S", s), self.name)

    def default_G(self, world_size: int) -> int:
        return node_size(world_size)

    def check(self, world_size: int) -> None:
        self.shape(world_size)

    # ---- set-up and build -------------------------------------------------------------------------------
    def setup(self, ctx: Context) -> None:
        self.dims = self.shape(ctx.world_size)
        self.variant.update({"G": self.dims.G, "K": self.dims.K})
        self.mesh = build_mesh(self.dims, ctx)
        ctx.meshes["fl"] = self.mesh
        ctx.meshes["fsdp"] = group_mesh(self.mesh, self.dims)  # what a distributed optimizer shards over

    def wrap_optimizer(self, optimizer: torch.optim.Optimizer, ctx: Context) -> torch.optim.Optimizer:
        """The run's own optimizer, whose moments `average_moments` averages with the other groups'."""
        self.inner_optimizer = optimizer
        return optimizer

    def build(self, make_model: Callable[[], nn.Module], ctx: Context) -> nn.Module:
        model = make_model()
        if self.cfg.ac:
            apply_activation_checkpointing(model)
        model = self._wrap(model, ctx)
        self.averager = self.make_averager(
            model,
            self.mesh.get_group("fed"),
            self.dims.K,
            self.variant["outer"],
            self.variant.get("outer_lr", 0.7),
            self.variant.get("outer_momentum", 0.9),
            off_ledger=lambda: _ledger_off(ctx),
        )
        return model

    def make_averager(self, model: nn.Module, *args, **kwargs) -> FederatedAverager:
        """The aggregation of `model`'s parameters over the `fed` group (FederatedAverager's other arguments); a
        method that aggregates otherwise returns its own kind."""
        return FederatedAverager(list(model.parameters()), *args, **kwargs)

    @property
    def sharded(self) -> bool:
        """FSDP2 inside each group: a one-rank group has nothing to shard and trains its model unwrapped (the same
        arithmetic, tests/test_fl_fsdp_runs.py; FSDP2's hooks on one rank cost about what llama-tiny's compute does)."""
        return self.inner == "fsdp" and self.dims.G > 1

    def _wrap(self, model: nn.Module, ctx: Context) -> nn.Module:
        if self.sharded:
            kw = {
                "mesh": group_mesh(self.mesh, self.dims),
                "mp_policy": precision.fsdp_policy(self.cfg.precision),
                "reshard_after_forward": self.variant["reshard_after_forward"],
            }
            for block in blocks_of(model):
                fully_shard(block, **kw)
            fully_shard(model, **kw)
            return model.to(ctx.device)
        model = model.to(ctx.device)
        if self.dims.G == 1:
            return model
        ids = [ctx.device.index] if ctx.device.type == "cuda" else None
        group = self.mesh.get_group("replicate")
        return DistributedDataParallel(model, device_ids=ids, process_group=group, **NO_FORWARD_BUFFER_SYNC)

    # ---- the loop's hooks ---------------------------------------------------------------------------
    def micro_step(self, model: nn.Module, last: bool) -> AbstractContextManager:
        if self.sharded:
            return gradient_sync(model, last)
        if isinstance(model, DistributedDataParallel) and not last:
            return model.no_sync()
        return nullcontext()

    def autocast(self, ctx: Context) -> AbstractContextManager:
        # sharded groups use FSDP2's mixed-precision policy instead, as the fsdp baseline does
        return nullcontext() if self.sharded else precision.autocast(ctx.device, self.cfg.precision)

    def after_step(self, model: nn.Module, step: int, ctx: Context) -> None:
        if (step + 1) % self.F:
            return
        self.averager.average(check=self.variant["check"])
        if self.variant["average_moments"]:
            self.averager.average_moments(self.inner_optimizer)

    def optimizers(self) -> list[torch.optim.Optimizer]:
        outer = getattr(self, "averager", None)
        return [outer.outer] if outer is not None and outer.outer is not None else []

    def data_replica(self, ctx: Context) -> tuple[int, int]:
        if self.variant["data_split"] == "whole":
            return ctx.rank % self.dims.G, self.dims.G
        return ctx.rank, ctx.world_size

    def eval_model(self, model: nn.Module) -> nn.Module:
        """This rank's group's model: after an aggregation every group's (plans evaluate every k*F steps)."""
        return model.module if isinstance(model, DistributedDataParallel) else model

    def describe(self, ctx: Context) -> dict:
        d = self.dims
        mesh = {"fed": d.K, "replicate": d.R, "shard": d.S}
        params = sum(p.numel() for p in self.averager.params)  # DTensors report their global size
        gathered = precision.fsdp_policy(self.cfg.precision).param_dtype or torch.float32
        itemsize = gathered.itemsize if self.sharded else 4
        local = sum(t.numel() for t in self.averager.local)
        return {
            "strategy": self.name,
            "mesh": mesh,
            "fl": {
                "K": d.K,
                "G": d.G,
                "R": d.R,
                "S": d.S,
                "F": self.F,
                "inner": self.inner if d.G > 1 else "none (one rank per group)",
                "outer": self.variant["outer"],
                "outer_lr": self.variant.get("outer_lr"),
                "outer_momentum": self.variant.get("outer_momentum"),
                "average_moments": self.variant["average_moments"],
                "data_split": self.variant["data_split"],
                "averaging": "every F steps after the optimizer step: all-reduce (sum) of this rank's flat "
                "parameter shard over group fed (same place in every group), divided by K",
                "evaluation": "rank's own group's model (all groups equal right after an aggregation)",
                "averaged_bytes_per_rank": local * 4,
                "ring_bytes_per_step": _ring(self.name, self.inner, params, itemsize, d, self.F),
            },
        }


def _ring(name: str, inner: str, params: int, itemsize: int, d: Shape, f: int) -> dict | None:
    """formulas.py's per-tier wire bytes for the FL methods (b = gathered bytes per element), else None."""
    if inner != "fsdp":
        return None
    method = "fl-hsdp" if d.R > 1 else "fl-fsdp"
    out = ring_bytes(method, params, itemsize, d.world, d.G, d.S, f, b_reduce=4, b_param=4)
    return {
        **out,
        "formula": f"reproductions/fl_fsdp/formulas.py, {method}, P={params}, gathered b={itemsize}, "
        "reduced and averaged 4",
    }


@contextmanager
def _ledger_off(ctx: Context):
    enabled = ctx.ledger.enabled
    ctx.ledger.enabled = False
    try:
        yield
    finally:
        ctx.ledger.enabled = enabled


class FLHSDP(Federated):
    """Groups of G ranks, HSDP inside: sharded over S ranks, G / S replicas; FedAvg across groups."""

    name = "fl-hsdp"
    params = {
        **Federated.params,
        "S": Param(int, None, "ranks one model is sharded over inside a group (default G / 2)", low=1),
    }

    def default_G(self, world_size: int) -> int:
        return max(world_size // 2, 1)

    def shape(self, world_size: int) -> Shape:
        g = self.variant.get("G", self.default_G(world_size))
        return shape_of(world_size, g, self.variant.get("S", max(g // 2, 1)), self.name)


class _Relative(Federated):
    """DiLoCo and Local SGD: DDP inside a group (default one rank per group), or FSDP with inner=fsdp."""

    params = {**Federated.params, "inner": Param(str, "ddp", "the wrapper inside a group", INNERS)}

    def __init__(self, cfg, variant: dict | None = None) -> None:
        super().__init__(cfg, variant)
        self.inner = self.variant["inner"]

    def default_G(self, world_size: int) -> int:
        return 1


class DiLoCo(_Relative):
    """H = F inner steps of the run's optimizer, then outer Nesterov SGD (lr 0.7, momentum 0.9) on the
    pseudo-gradient theta_prev - mean(theta_i)."""

    name = "diloco"
    params = {**_Relative.params, "outer": Param(str, "nesterov", "outer optimizer on the pseudo-gradient", OUTER)}


class LocalSGD(_Relative):
    """Plain parameter averaging every F steps of groups of G ranks (default 1) with DDP inside."""

    name = "local-sgd"
