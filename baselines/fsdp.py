"""FSDP2 (`fully_shard` per block and at the root) and HSDP (the same over a replicate x shard mesh)."""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractContextManager, contextmanager

from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard

from baselines import precision
from baselines.checkpointing import apply_activation_checkpointing
from suite.models import blocks_of
from suite.params import Param
from suite.run.strategy import Context, Strategy


@contextmanager
def gradient_sync(model: nn.Module, enabled: bool):
    model.set_requires_gradient_sync(enabled)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)


class FSDP(Strategy):
    """Parameters, gradients and optimizer state sharded over all ranks; blocks re-gathered in backward."""

    name = "fsdp"
    params = {
        "reshard_after_forward": Param(bool, True, "free each block's gathered parameters after its forward"),
        # FSDP2 all-gathers the next block during backward by default; off, like a method that cannot prefetch
        # (SDP+FSDP), so the two compare with one set of wrapper settings
        "backward_prefetch": Param(bool, True, "all-gather the next block during backward"),
    }

    def make_mesh(self, ctx: Context) -> DeviceMesh:
        return init_device_mesh(ctx.device.type, (ctx.world_size,), mesh_dim_names=("shard",))

    def setup(self, ctx: Context) -> None:
        self.mesh = self.make_mesh(ctx)
        ctx.meshes["fsdp"] = self.mesh  # a distributed optimizer (Dion, Muon) works over the same shards
        for dim in self.mesh.mesh_dim_names:
            ctx.label_group(self.mesh.get_group(dim), dim)

    def build(self, make_model: Callable[[], nn.Module], ctx: Context) -> nn.Module:
        model = make_model()
        if self.cfg.ac:
            apply_activation_checkpointing(model)
        kw = {
            "mesh": self.mesh,
            "mp_policy": precision.fsdp_policy(self.cfg.precision),
            "reshard_after_forward": self.variant["reshard_after_forward"],
        }
        for block in blocks_of(model):
            fully_shard(block, **kw)
        fully_shard(model, **kw)
        if not self.variant["backward_prefetch"]:
            for module in (*blocks_of(model), model):
                module.set_modules_to_backward_prefetch([module])  # itself, already unsharded: no prefetch
        return model.to(ctx.device)

    def micro_step(self, model: nn.Module, last: bool) -> AbstractContextManager:
        return gradient_sync(model, last)

    def describe(self, ctx: Context) -> dict:
        return {
            "strategy": self.name,
            "mesh": dict(zip(self.mesh.mesh_dim_names, self.mesh.shape)),
            "reshard_after_forward": self.variant["reshard_after_forward"],
            "backward_prefetch": self.variant["backward_prefetch"],
        }


class HSDP(FSDP):
    """Shard inside groups of `shard` ranks (a node, by default), replicate across them."""

    name = "hsdp"
    params = {
        **FSDP.params,
        "shard": Param(int, None, "ranks per shard group (default: the node's workers, or half the workers)", low=1),
    }

    def shard_size(self, world_size: int) -> int:
        if "shard" in self.variant:
            return self.variant["shard"]
        local = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
        return local if local < world_size else max(world_size // 2, 1)

    def check(self, world_size: int) -> None:
        shard = self.shard_size(world_size)
        if shard < 2 or world_size % shard or world_size // shard < 2:
            raise ValueError(
                f"hsdp needs a replicate x shard mesh: {world_size} workers cannot be split into groups of "
                f"{shard} (at least 2 per group, at least 2 groups); use --nproc 4 (2 x 2) or --set shard=S with "
                f"S >= 2 dividing --nproc and at most half of it"
            )

    def make_mesh(self, ctx: Context) -> DeviceMesh:
        self.check(ctx.world_size)
        shard = self.shard_size(ctx.world_size)
        return init_device_mesh(
            ctx.device.type, (ctx.world_size // shard, shard), mesh_dim_names=("replicate", "shard")
        )
