"""Merging as DiLoCo's aggregation (the IsoLoCo idea): fl-fsdp's DiLoCo with the groups' task vectors merged by task
arithmetic or TIES-Merging (merge.py) instead of averaged, before the outer step.

Every F steps each rank gathers its shard from every group (all_gather over `fed`: K shards arrive where the mean
needs an all-reduce of one), takes each group's task vector against the anchor (theta_i - theta_prev), merges them
with merge.py's functions over this rank's shard, and gives the outer optimizer the pseudo-gradient theta_prev -
merged. TIES keeps the top-k% magnitudes of a task vector within the shard, not over the whole model as the TIES code
does (a whole-model threshold would need every shard's magnitudes on every rank); with one group per rank and no
sharding inside a group (DiLoCo's default), the shard is the whole model. At task-arithmetic lambda 1/K the merge is
the mean: DiLoCo itself (tests/test_merged_diloco.py).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch._utils import _flatten_dense_tensors

from reproductions.fl_fsdp.averaging import FederatedAverager
from reproductions.fl_fsdp.method import DiLoCo
from reproductions.merging.merge import task_arithmetic, ties_merging
from suite.params import Param

MERGES = ("task-arithmetic", "ties")


def merged_point(anchor: torch.Tensor, shards: list[torch.Tensor], merge: str, lam: float, density: float):
    """The merge of `shards` (one flat shard per group) against `anchor`: anchor + lam x the sum of the task
    vectors (task arithmetic), or TIES-Merging at the top `density` of each task vector and scale `lam`."""
    base, models = {"shard": anchor}, [{"shard": s} for s in shards]
    if merge == "task-arithmetic":
        return task_arithmetic(base, models, lam)["shard"]
    return ties_merging(base, models, k=100 * density, lam=lam)["shard"]


class MergingAverager(FederatedAverager):
    """FederatedAverager whose aggregation merges the groups' task vectors (merged_point) instead of averaging; its
    anchor is the outer optimizer's, so it needs one (outer sgd or nesterov)."""

    def __init__(self, *args, merge: str, lam: float, density: float, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.merge, self.lam, self.density = merge, lam, density

    @torch.no_grad()
    def average(self, check: bool = False) -> None:
        flat = _flatten_dense_tensors(self.local)
        shards = [torch.empty_like(flat) for _ in range(self.k)]
        dist.all_gather(shards, flat, group=self.group)  # the method's own traffic: on the ledger
        self.outer_step(merged_point(self.anchor.detach(), shards, self.merge, self.lam, self.density))
        if check:
            self.check_equal()
        self.rounds += 1


class MergedDiLoCo(DiLoCo):
    """DiLoCo (outer Nesterov SGD every F = H steps) on the merge of the groups' task vectors (MergingAverager)."""

    name = "diloco-merge"
    params = {
        **DiLoCo.params,
        "merge": Param(str, "ties", "how the groups' task vectors are merged", MERGES),
        "merge_lambda": Param(float, None, "the merge's scale (default 1/K for task arithmetic, the mean; 1 for TIES)"),
        "density": Param(
            float, None, "TIES: the fraction of each task vector kept (default 0.2)", low=0, high=1, low_open=True
        ),
    }

    def __init__(self, cfg, variant: dict | None = None) -> None:
        super().__init__(cfg, variant)
        v = self.variant
        if v["outer"] == "none":
            raise ValueError(
                "diloco-merge merges task vectors against an anchor: keep an outer optimizer (sgd or nesterov)"
            )
        if v["merge"] == "ties":
            v.setdefault("density", 0.2)
        elif "density" in v:
            raise ValueError("density is TIES's: add --set merge=ties or drop density")

    def setup(self, ctx) -> None:
        super().setup(ctx)
        if self.variant["merge"] == "task-arithmetic":
            self.variant.setdefault("merge_lambda", 1 / self.dims.K)  # the mean
        self.variant.setdefault("merge_lambda", 1.0)

    def make_averager(self, model: nn.Module, *args, **kwargs) -> FederatedAverager:
        v = self.variant
        merge = {"merge": v["merge"], "lam": v["merge_lambda"], "density": v.get("density", 1.0)}
        return MergingAverager(list(model.parameters()), *args, **merge, **kwargs)

    def describe(self, ctx) -> dict:
        d = super().describe(ctx)
        d["fl"]["averaging"] = (
            f"every F steps after the optimizer step: all-gather of this rank's flat parameter shard over group fed, "
            f"{self.variant['merge']} of the K task vectors against the anchor (lambda {self.variant['merge_lambda']:g}"
            + (f", density {self.variant['density']:g}" if self.variant["merge"] == "ties" else "")
            + "), then the outer step"
        )
        return d
