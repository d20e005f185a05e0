"""Compositions on a 2-D mesh, as torchtitan builds them: FSDP2 over tensor parallelism, and a pipeline of
FSDP2-sharded stages. At 4 workers each is 2 x 2; only the FSDP dimension's ranks are data replicas."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard

from baselines import precision
from baselines.checkpointing import apply_activation_checkpointing
from baselines.pp import Pipeline
from baselines.tp import TensorParallel, apply_tp, check_degree
from suite.models import blocks_of
from suite.params import Param
from suite.run.strategy import Context, local_tensor


def _check_grid(name: str, world_size: int, inner: int) -> None:
    if inner < 2 or world_size % inner or world_size // inner < 2:
        raise ValueError(
            f"{name} needs a 2-D mesh of at least 2 x 2: {world_size} workers cannot be split into groups of "
            f"{inner}; use --nproc {2 * max(inner, 2)}"
        )


def _shard(module: nn.Module, mesh: DeviceMesh, precision_mode: str) -> None:
    kw = {"mesh": mesh, "mp_policy": precision.fsdp_policy(precision_mode)}
    for block in blocks_of(module):
        fully_shard(block, **kw)
    fully_shard(module, **kw)


class FsdpTp(TensorParallel):
    """Tensor parallelism inside groups of `tp` ranks, FSDP2 across them (mesh dp x tp)."""

    name = "fsdp-tp"
    params = {"tp": Param(int, 2, "tensor-parallel degree (ranks per tensor-parallel group)", low=2)}

    def check(self, world_size: int) -> None:
        _check_grid(self.name, world_size, self.variant["tp"])
        check_degree(self.cfg.model, self.variant["tp"])
        if self.cfg.checkpoint_every:
            raise ValueError(f"{self.name} does not save checkpoints yet; drop --checkpoint-every")

    def setup(self, ctx: Context) -> None:
        tp = self.variant["tp"]
        self.mesh = init_device_mesh(ctx.device.type, (ctx.world_size // tp, tp), mesh_dim_names=("dp", "tp"))
        ctx.meshes["fsdp"] = self.mesh["dp"]
        ctx.meshes["tp"] = self.mesh["tp"]
        for dim in ("dp", "tp"):
            ctx.label_group(self.mesh.get_group(dim), dim)

    def build(self, make_model: Callable[[], nn.Module], ctx: Context) -> nn.Module:
        model = make_model().to(ctx.device)
        if self.cfg.ac:
            apply_activation_checkpointing(model)
        apply_tp(model, self.mesh["tp"], sequence_parallel=False)
        _shard(model, self.mesh["dp"], self.cfg.precision)
        # FSDP2 warns that the root returns a view: the tensor-parallel head hands back its replicated DTensor's
        # local tensor, which is a view. The warning is about an in-place op on it dropping FSDP2's pre-backward
        # hook; every loss of the suite reads the logits out of place, so there is none to drop.
        warnings.filterwarnings("ignore", r"FSDP2-wrapped module .* returned a view tensor", UserWarning)
        # DTensor logs that the gradient norm's two partial mesh dimensions take two all-reduces where a flattened
        # mesh would take one: advice on a composition this baseline measures as torchtitan builds it (the ledger
        # counts both all-reduces), not a fault a user can act on.
        logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)
        return model

    def forward_backward(self, model, x, y, loss_fn, backward) -> torch.Tensor:
        loss = loss_fn(model, x, y)
        backward(loss)
        return local_tensor(loss.detach())

    def data_replica(self, ctx: Context) -> tuple[int, int]:
        return self.mesh.get_local_rank("dp"), self.mesh.size(0)

    def describe(self, ctx: Context) -> dict:
        return {"strategy": self.name, "mesh": dict(zip(self.mesh.mesh_dim_names, self.mesh.shape))}

    def autocast(self, ctx: Context) -> AbstractContextManager:
        return nullcontext()  # FSDP2's policy casts (bf16)


class PpFsdp(Pipeline):
    """A pipeline of `stages` stages, each stage's module FSDP2-sharded over the data-parallel ranks (pp x dp)."""

    name = "pp-fsdp"
    params = {**Pipeline.params, "stages": Param(int, 2, "pipeline stages", low=2)}

    def stages(self, world_size: int) -> int:
        return self.variant["stages"]

    def check(self, world_size: int) -> None:
        _check_grid(self.name, world_size, self.stages(world_size))
        if self.virtual() > 1:  # two FSDP2 roots per rank, which the memory meter does not track as FSDP2 yet
            raise ValueError("pp-fsdp runs one stage per rank; use --set schedule=1f1b, or pp for interleaved")
        super().check(world_size)

    def make_mesh(self, ctx: Context) -> DeviceMesh:
        P = self.stages(ctx.world_size)
        return init_device_mesh(ctx.device.type, (P, ctx.world_size // P), mesh_dim_names=("pp", "dp"))

    def setup(self, ctx: Context) -> None:
        super().setup(ctx)
        ctx.meshes["fsdp"] = self.mesh["dp"]
        ctx.label_group(None, "world")  # the gradient norm sums every rank's shards

    def build(self, make_model: Callable[[], nn.Module], ctx: Context) -> nn.Module:
        (stage,) = self.make_stages(make_model, ctx)
        _shard(stage, self.mesh["dp"], self.cfg.precision)
        self.wrap_schedule(stage, ctx)
        return stage

    def clip_grad_norm(self, model: nn.Module, max_norm: float, ctx: Context) -> None:
        grads = [local_tensor(p.grad) for p in model.parameters() if p.grad is not None]
        squares = torch.stack([g.float().pow(2).sum() for g in grads]).sum()
        dist.all_reduce(squares)  # every parameter is one stage's, sharded over its dp group
        norm = squares.sqrt()
        for p in model.parameters():
            if p.grad is not None:
                local_tensor(p.grad).mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0))

    def data_replica(self, ctx: Context) -> tuple[int, int]:
        return self.mesh.get_local_rank("dp"), self.mesh.size(1)
