"""What NorMuon, Dion2 and Dion3 share: one step loop over matrices held whole or as FSDP2 row shards, and the
`--set` parameters all take.

Each matrix is a generator task run by `lockstep` (dion.py): the small sums it yields (row norms, Frobenius
norms) go out as one flat all-reduce per process group and round. A sharded matrix's rows are gathered whole
where its algorithm needs them (the orthogonalization) on rank `owner` = its index among the step's sharded
matrices mod the world, as Muon does, so ranks share that work. Under DDP gradients arrive averaged and
every rank steps whole matrices (as the suite's Muon does; the reference instead splits the
orthogonalizations over ranks and all-gathers them, a speed-up not measured here). AdamW groups step with
torch's functional AdamW.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from baselines.muon import (
    ADJUST_LR,
    MUON,
    ScalarAdamW,
    adjusted_lr,
    as_matrix,
    check_matrix_group,
    gather_apply_scatter,
    local,
    shard_counts,
    shard_group,
)
from reproductions.dion.dion import lockstep
from reproductions.dion.orthogonalize import ORTHOGONALIZERS, orthogonalizer
from suite.config import RunConfig
from suite.params import Param

EPS = 1e-8

PARAMS = {
    "adjust_lr": MUON.params["adjust_lr"],
    "orthogonalize": Param(
        str, "polar_express", "the orthogonalizer (polar_express: the reference's)", choices=tuple(ORTHOGONALIZERS)
    ),
    "scalar_lr": MUON.params["scalar_lr"],
}


@dataclass(frozen=True)
class Rows:
    """Which rows of a matrix this rank holds: all (group None) or its FSDP2 Shard(0) chunk."""

    group: dist.ProcessGroup | None
    counts: tuple[int, ...]  # rows on each rank of `group`
    rank: int = 0

    @property
    def offset(self) -> int:
        return sum(self.counts[: self.rank])

    def gather_apply_scatter(
        self, rows: torch.Tensor, counts: list[int], owner: int, fn: Callable[[torch.Tensor], torch.Tensor]
    ) -> torch.Tensor:
        """`fn` of the whole matrix whose rows are split `counts` over this group; this rank's rows of it."""
        if self.group is None:
            return fn(rows)
        return gather_apply_scatter(rows, counts, owner, self.group, fn)


def rows_of(p: torch.Tensor) -> Rows:
    rows = as_matrix(p).shape[0]
    if isinstance(p, DTensor):
        group, world = shard_group(p)
        if world > 1:
            return Rows(group, tuple(shard_counts(rows, world)), dist.get_rank(group))
    return Rows(None, (rows,))


def momentum_and_variance(state: dict, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A parameter's momentum (its gradient's shape) and per-row second moment (NorMuon's normalization, which
    Dion3 takes over), made zero on its first step."""
    if not state:
        state["momentum"] = torch.zeros_like(g)
        state["variance"] = torch.zeros(g.shape[0], 1, device=g.device)
    return state["momentum"], state["variance"]


def apply_update(p: torch.Tensor, group: dict, update: torch.Tensor, dim: int = 0, index=None) -> None:
    """X = X (1 - lr wd) - adjusted lr x update, the update added to the rows (dim 0) or columns (dim 1) `index`
    of this rank's part of X, or to all of it."""
    x = as_matrix(local(p))
    x.mul_(1 - group["lr"] * group["weight_decay"])
    scale = -adjusted_lr(group["lr"], as_matrix(p).shape, group["adjust_lr"])
    if index is None:
        x.add_(update.to(x.dtype), alpha=scale)
    else:
        x.index_add_(dim, index, update.to(x.dtype), alpha=scale)


def refuse_column_splits(name: str) -> Callable[[RunConfig], None]:
    """The check of an optimizer that steps matrices whole or split along rows (DDP, FSDP2, HSDP) only."""

    def check(cfg: RunConfig) -> None:
        if cfg.method in ("tp", "fsdp-tp"):
            raise ValueError(
                f"--optimizer {name} does not step {cfg.method}'s column-split matrices; use ddp, fsdp or hsdp"
            )

    return check


class MatrixOptimizer(torch.optim.Optimizer):
    """The algorithm (`algorithm` groups, the default) on matrices, AdamW on `algorithm: "adamw"` groups.
    A subclass writes `_task`: one matrix's step, a generator that may yield (tensor, group) sums."""

    algorithm = ""

    def __init__(self, params: Iterable, defaults: dict) -> None:
        super().__init__(params, {**defaults, "algorithm": self.algorithm})
        for group in self.param_groups:
            if group["algorithm"] == self.algorithm:
                check_matrix_group(group, self.algorithm)
                self._check(group)
            else:
                ScalarAdamW.init_group(group)

    def _check(self, group: dict) -> None:
        name = self.algorithm
        if group["lr"] < 0:
            raise ValueError(f"{name}: lr must be >= 0, got {group['lr']}")
        if group["adjust_lr"] not in ADJUST_LR:
            raise ValueError(f"{name}: adjust_lr must be one of {', '.join(ADJUST_LR)}, got {group['adjust_lr']!r}")
        try:
            orthogonalizer(group["orthogonalize"])
        except ValueError as err:
            raise ValueError(f"{name}: {err}") from None

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        tasks, sharded = [], 0
        for group in self.param_groups:
            if group["algorithm"] != self.algorithm:
                ScalarAdamW.step(self, group)
                continue
            for p in group["params"]:
                if p.grad is None:
                    continue
                rows = rows_of(p)
                owner = sharded % len(rows.counts)
                sharded += rows.group is not None
                tasks.append(self._task(p, group, rows, owner))
        lockstep(tasks)
        return loss

    def _task(self, p: torch.Tensor, group: dict, rows: Rows, owner: int) -> Generator:
        """One matrix's step as a generator (lockstep runs every matrix's collectives in one order on every rank):
        what each optimizer (NorMuon, Dion2, Dion3) defines."""
        raise NotImplementedError(f"{type(self).__name__} defines no _task: a MatrixOptimizer steps a matrix there")
