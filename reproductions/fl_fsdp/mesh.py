"""Federation groups as a DeviceMesh: (fed, shard) for FL+FSDP, (fed, replicate, shard) for FL+HSDP.

N ranks form K = N / G groups of G consecutive ranks (torchrun numbers ranks node by node, so a group of
a node's size is one node). Inside a group the model is sharded over S ranks and replicated over R = G / S
of them (R = 1: FL+FSDP). The `fed` dimension joins the ranks with the same place in every group: the
averaging group, whose members hold the same shard of their group's model.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from suite.run.strategy import Context

INTRA, INTER = "intra-group", "inter-group"


@dataclass(frozen=True)
class Shape:
    """K groups of G = R x S ranks: R replicas of the model sharded over S ranks in each group."""

    K: int
    R: int
    S: int

    @property
    def G(self) -> int:
        return self.R * self.S

    @property
    def world(self) -> int:
        return self.K * self.G


def node_size(world_size: int) -> int:
    """The ranks of one node (torchrun's LOCAL_WORLD_SIZE), or half the world on one machine."""
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    return local if local < world_size else max(world_size // 2, 1)


def shape_of(world_size: int, G: int | None, S: int | None, method: str) -> Shape:
    """The mesh shape of `world_size` ranks in groups of G sharded over S, or a ValueError naming the fix.

    Defaults: G is a node (or half the machine); S is G (FL+FSDP) or half of G (FL+HSDP: two replicas).
    """
    g = node_size(world_size) if G is None else G
    s = g if S is None else S
    if g < 1 or world_size % g or world_size // g < 2:
        raise ValueError(
            f"{method} needs at least 2 federation groups of G ranks: {world_size} ranks cannot form groups of "
            f"G={g}; use --set G=N with N dividing --nproc and at most half of it (e.g. --nproc 4 --set G=2)"
        )
    if s < 1 or g % s:
        raise ValueError(
            f"{method}: the shard size S={s} must divide the group size G={g}; use --set S=N with N dividing G"
        )
    return Shape(world_size // g, g // s, s)


def build_mesh(shape: Shape, ctx: Context) -> DeviceMesh:
    """The (fed, replicate, shard) mesh of this run, its groups labelled for the ledger with their tier."""
    mesh = init_device_mesh(ctx.device.type, (shape.K, shape.R, shape.S), mesh_dim_names=("fed", "replicate", "shard"))
    for dim, tier in (("shard", INTRA), ("replicate", INTRA), ("fed", INTER)):
        ctx.label_group(mesh.get_group(dim), dim, tier)
    return mesh


def group_mesh(mesh: DeviceMesh, shape: Shape) -> DeviceMesh:
    """The sub-mesh one group shards its model over: (shard) or (replicate, shard) when R > 1."""
    return mesh["replicate", "shard"] if shape.R > 1 else mesh["shard"]
