"""Cluster topologies: GPUs per node and, per tier, the bandwidth and latency one GPU sees.

Preset numbers are vendor link rates (per direction), not measurements; a projection prints the
topology it used, and `suite.sim.loopback` fits a tier to timings measured on this machine instead.
Across nodes NCCL runs one ring per NIC (rail-optimised), so a group with r ranks on each node moves
data over min(r, NICs per node) NICs of every node; inside a node it moves at the GPU's link rate.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

GB = 1e9


@dataclass(frozen=True)
class Tier:
    """One level of the network: `bandwidth` in bytes/s per direction, `latency` (alpha) in seconds."""

    name: str
    bandwidth: float
    latency: float

    def __post_init__(self) -> None:
        if self.bandwidth <= 0 or self.latency < 0:
            raise ValueError(
                f"tier {self.name}: bandwidth must be > 0 and latency >= 0, got {self.bandwidth} and {self.latency}"
            )


@dataclass(frozen=True)
class Topology:
    """Nodes of `gpus_per_node` GPUs; `intra` is one GPU's link inside a node, `inter` one NIC."""

    name: str
    gpus_per_node: int
    nics_per_node: int
    intra: Tier
    inter: Tier
    gpu: str
    peak_flops: float | None
    source: str

    def __post_init__(self) -> None:
        if self.gpus_per_node < 1 or self.nics_per_node < 1:
            raise ValueError(f"topology {self.name}: gpus_per_node and nics_per_node must be >= 1")

    def node_of(self, rank: int) -> int:
        return rank // self.gpus_per_node

    def link(self, ranks: list[int]) -> tuple[str, float, float]:
        """(tier name, bandwidth, latency) a collective over `ranks` runs at."""
        per_node: dict[int, int] = {}
        for r in ranks:
            per_node[self.node_of(r)] = per_node.get(self.node_of(r), 0) + 1
        if len(per_node) <= 1:
            return self.intra.name, self.intra.bandwidth, self.intra.latency
        rails = min(min(per_node.values()), self.nics_per_node)
        return self.inter.name, rails * self.inter.bandwidth, self.inter.latency

    def describe(self) -> dict:
        return asdict(self)


def packed_ranks(size: int, tier: str, gpus_per_node: int) -> list[int]:
    """Ranks of a group known only by size and tier label: one node if intra-node, else spread evenly."""
    if tier == "intra-node" or size <= 1:
        return list(range(size))
    nodes = max(2, math.ceil(size / gpus_per_node))
    per_node = math.ceil(size / nodes)
    return [node * gpus_per_node + i for node in range(nodes) for i in range(per_node)][:size]


PRESETS: dict[str, Topology] = {
    t.name: t
    for t in (
        Topology(
            "4xA100-nvlink-4x200gbIB",
            gpus_per_node=4,
            nics_per_node=4,
            intra=Tier("nvlink3", 300 * GB, 3e-6),
            inter=Tier("ib-hdr-200g", 25 * GB, 8e-6),
            gpu="NVIDIA A100-SXM4-80GB",
            peak_flops=312e12,
            source="A100 SXM4: NVLink 3 600 GB/s both ways, 312 TFLOP/s dense bf16; HDR InfiniBand "
            "200 Gb/s per NIC; latencies typical of NCCL (a few microseconds)",
        ),
        Topology(
            "8xH100-nvlink4-8x400gbIB",
            gpus_per_node=8,
            nics_per_node=8,
            intra=Tier("nvlink4", 450 * GB, 3e-6),
            inter=Tier("ib-ndr-400g", 50 * GB, 8e-6),
            gpu="NVIDIA H100 80GB HBM3",
            peak_flops=989e12,
            source="H100 SXM5: NVLink 4 900 GB/s both ways, 989 TFLOP/s dense bf16; NDR InfiniBand "
            "400 Gb/s per NIC; latencies typical of NCCL (a few microseconds)",
        ),
    )
}


def get_topology(name: str) -> Topology:
    if name not in PRESETS:
        raise ValueError(f"unknown topology {name!r}; choose one of: {', '.join(PRESETS)}")
    return PRESETS[name]
