"""FedAvg across federation groups, with an optional outer optimizer (DiLoCo) and averaged Adam moments.

Every rank all-reduces its local parameter shard with the same shard in every other group (the `fed`
group of the mesh: same place in each group), as one flat buffer, then divides by K: gloo has no AVG
reduction, and the public code's gloo path sums without dividing (docs/sources.md#fl-fsdp). With an outer
optimizer the mean is not copied in; the pseudo-gradient theta_prev - mean(theta_i) is, and the outer
step moves theta_prev (a flat copy of this rank's shard, the outer optimizer's only parameter) towards
the mean: SGD with lr 1 and no momentum lands exactly on it (FedAvg), DiLoCo takes Nesterov lr 0.7,
momentum 0.9. Written here because torch has no federated averaging of sharded parameters; the pieces
(DTensor local shards, all_reduce, torch.optim.SGD) are torch's.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import torch
import torch.distributed as dist
from torch import nn
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors
from torch.distributed.tensor import DTensor

from suite.run.strategy import local_tensor

OUTER = ("none", "sgd", "nesterov")


def _average_into(tensors: list[torch.Tensor], group: dist.ProcessGroup, k: int) -> torch.Tensor:
    """The mean over `group` of this rank's `tensors` (flattened), copied back into them; returns the flat mean."""
    flat = _flatten_dense_tensors(tensors)
    dist.all_reduce(flat, group=group)  # sum: gloo has no average
    flat.div_(k)
    for t, mean in zip(tensors, _unflatten_dense_tensors(flat, tensors)):
        t.copy_(mean)
    return flat


class FederatedAverager:
    """Averages `params`' local shards over `group` (K members); `outer` (SGD over a flat anchor) or none."""

    def __init__(
        self,
        params: list[nn.Parameter],
        group: dist.ProcessGroup,
        k: int,
        outer: str = "none",
        outer_lr: float = 0.7,
        outer_momentum: float = 0.9,
        off_ledger: Callable[[], AbstractContextManager] = nullcontext,
    ) -> None:
        if outer not in OUTER:
            raise ValueError(f"outer must be one of {', '.join(OUTER)}, got {outer!r}")
        self.params, self.group, self.k, self.off_ledger = params, group, k, off_ledger
        self.outer: torch.optim.Optimizer | None = None
        if outer != "none":
            self.anchor = nn.Parameter(_flatten_dense_tensors([t.detach() for t in self.local]).clone())
            self.outer = torch.optim.SGD(
                [self.anchor], lr=outer_lr, momentum=outer_momentum, nesterov=outer == "nesterov" and outer_momentum > 0
            )
        self.rounds = 0

    @property
    def local(self) -> list[torch.Tensor]:
        """This rank's part of each parameter (views: writing them writes the parameters)."""
        return [local_tensor(p.data) for p in self.params]

    @torch.no_grad()
    def average(self, check: bool = False) -> None:
        """One aggregation: parameters to the mean (FedAvg) or to the outer optimizer's step from it.

        `check`: verify that every member holds the same place of the same tensors, that the mean is the
        mean of what the members held, and that they are equal afterwards (AssertionError otherwise); its
        collectives are verification, kept off the ledger by `off_ledger`.
        """
        before = self._gather() if check else None
        mean = _average_into(self.local, self.group, self.k)
        if before is not None:
            expected = torch.stack(before).sum(0) / self.k
            if not torch.allclose(mean, expected, rtol=1e-6, atol=1e-7):
                raise AssertionError("the averaged shard is not the mean of the averaging group's shards")
        if self.outer is not None:
            self.outer_step(mean)
        if check:
            self.check_equal()
        self.rounds += 1

    def outer_step(self, target: torch.Tensor) -> None:
        """The outer optimizer's step on the pseudo-gradient (pseudo_gradient), copied into the parameters."""
        self.anchor.grad = self.pseudo_gradient(target)
        self.outer.step()
        for t, new in zip(self.local, _unflatten_dense_tensors(self.anchor.detach(), self.local)):
            t.copy_(new)

    def pseudo_gradient(self, target: torch.Tensor) -> torch.Tensor:
        """What the outer optimizer steps on: theta_prev - target (flat); a method that merges otherwise changes it."""
        return self.anchor.detach() - target

    def check_equal(self) -> None:
        """AssertionError unless every member of the group holds the same shard (its collectives off the ledger)."""
        flat = _flatten_dense_tensors(self.local)
        if any(not torch.equal(g, flat) for g in self._gather()):
            raise AssertionError("averaging group members differ after averaging")

    def _gather(self, flat: torch.Tensor | None = None) -> list[torch.Tensor]:
        """Every member's `flat` (default: its flat shard), after checking that all hold the same place of the same
        tensors."""
        mine = [_place(p) for p in self.params]
        places: list = [None] * self.k
        flat = _flatten_dense_tensors(self.local) if flat is None else flat
        gathered = [torch.empty_like(flat) for _ in range(self.k)]
        with self.off_ledger():
            dist.all_gather_object(places, mine, group=self.group)
            dist.all_gather(gathered, flat, group=self.group)
        if any(p != mine for p in places):
            raise AssertionError(f"averaging group holds different shards: {places}")
        return gathered

    @torch.no_grad()
    def average_moments(self, optimizer: torch.optim.Optimizer) -> int:
        """Average the inner optimizer's per-parameter state tensors (Adam's moments); returns how many."""
        state = [
            local_tensor(v)
            for p in self.params
            for v in optimizer.state.get(p, {}).values()
            if isinstance(v, torch.Tensor) and v.shape == p.shape
        ]
        if state:
            _average_into(state, self.group, self.k)
        return len(state)


def _place(p: torch.Tensor) -> tuple:
    """Which part of which tensor a rank holds: global shape, placements and coordinate in its group's mesh."""
    if isinstance(p, DTensor):
        return tuple(p.shape), str(p.placements), tuple(p.device_mesh.get_coordinate() or ()), local_tensor(p).numel()
    return tuple(p.shape), "whole", (), p.numel()
