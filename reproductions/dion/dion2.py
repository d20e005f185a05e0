"""Dion2 (Ahn, Amsel, Langford 2025, arXiv 2512.16928): Muon on a fraction of the momentum's rows or columns,
the rest left in the momentum (error feedback).

Per matrix, as microsoft/dion's dion2.py computes it (read as the reference and run beside ours for
fixtures/reference-dion2-normuon.json, never copied), slices along the shorter side (rows if rows <= cols,
else columns), k = max(1, ceil(fraction x their number)):

    M = M + G;  S = the k slices of M largest in l1 norm;  M_S = ef_decay M_S;  O = orthogonalize(S)  (bf16)
    X = X (1 - lr wd);  X_S = X_S - adjusted_lr x O        (adjusted_lr: lr sqrt(rows/cols) by default)

The selected slices are taken in index order, which every layout can reproduce (the reference keeps
torch.topk's unsorted order: the same set, and on the fixture's matrices the same numbers within float32
rounding).

Here because Dion2 is Dion's successor from the same reference (and shares its fixtures); a
torch.optim.Optimizer that runs on CPU and on FSDP2 shards like the suite's Dion and Muon. Under FSDP2 the
selection is the one process's: the slices' l1 norms are summed over the shard group (a vector of rows or
columns), every rank picks the same k, and only the selected slices travel to the rank that orthogonalizes
them (k x cols numbers when rows are picked, rows x k for columns), so the update equals one process's. The
reference's default under FSDP2 instead picks each shard's own top rows (selection_scope="local"), an
approximation that depends on the sharding; its "global" scope is exact but gathers the whole matrix.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Iterable
from dataclasses import dataclass

import torch
from torch import nn

from baselines.muon import as_matrix, local, matrix_groups
from reproductions.dion.orthogonalize import orthogonalizer
from reproductions.dion.sharded import PARAMS, MatrixOptimizer, Rows, apply_update, refuse_column_splits
from suite.config import RunConfig
from suite.params import Param
from suite.run.optim import OptimizerSpec
from suite.run.strategy import Context


def selected_count(n: int, fraction: float) -> int:
    """k: slices of the n along the selected side that one step orthogonalizes."""
    return max(1, math.ceil(fraction * n))


@dataclass(frozen=True)
class Selection:
    """The slices one step orthogonalizes: rows (dim 0) or columns (dim 1) `index` of this rank's part of M,
    `slices` their values before the decay, `counts` the selected submatrix's rows on each rank."""

    dim: int
    index: torch.Tensor
    slices: torch.Tensor
    counts: list[int]


def select(
    m: torch.Tensor, shape: tuple[int, int], rows: Rows, by_rows: bool, fraction: float, decay: float
) -> Generator:
    """Take M's top slices by l1 norm (summed over the shard group: one process's choice on every rank) out of
    this rank's part of M, decaying them there; a generator for `lockstep`, returning the Selection."""
    if by_rows:  # this rank's rows' norms in place, zeros elsewhere: the sum is every row's
        norms = m.new_zeros(shape[0])
        norms[rows.offset : rows.offset + m.shape[0]] = m.norm(p=1, dim=1)
    else:
        norms = m.norm(p=1, dim=0)
    norms = yield norms, rows.group
    chosen = torch.topk(norms, selected_count(norms.numel(), fraction)).indices.sort().values
    if not by_rows:
        slices = m[:, chosen]
        m[:, chosen] = slices * decay
        return Selection(1, chosen, slices, list(rows.counts))
    ends = torch.tensor(rows.counts, device=chosen.device).cumsum(0)
    counts = torch.bucketize(chosen, ends, right=True).bincount(minlength=len(ends)).tolist()
    mine = chosen[(chosen >= rows.offset) & (chosen < rows.offset + m.shape[0])] - rows.offset
    slices = m[mine]
    m[mine] = slices * decay
    return Selection(0, mine, slices, counts)


class Dion2(MatrixOptimizer):
    """Dion2 on `algorithm: "dion2"` groups (the default), AdamW on `algorithm: "adamw"` groups."""

    algorithm = "dion2"

    def __init__(
        self,
        params: Iterable,
        lr: float = 0.01,
        fraction: float = 0.25,
        ef_decay: float = 0.95,
        weight_decay: float = 0.0,
        adjust_lr: str = "spectral_norm",
        orthogonalize: str = "polar_express",
    ) -> None:
        if not (0 < fraction <= 1 and 0 <= ef_decay <= 1):
            raise ValueError(
                f"dion2: fraction must be in (0, 1] and ef_decay in [0, 1], got fraction={fraction}, "
                f"ef_decay={ef_decay}; e.g. --set fraction=0.25"
            )
        defaults = dict(
            lr=lr, fraction=fraction, ef_decay=ef_decay, weight_decay=weight_decay, adjust_lr=adjust_lr,
            orthogonalize=orthogonalize,
        )  # fmt: skip
        super().__init__(params, defaults)

    def _task(self, p: torch.Tensor, group: dict, rows: Rows, owner: int) -> Generator:
        g = as_matrix(local(p.grad))
        state = self.state[p]
        if not state:
            state["momentum"] = torch.zeros_like(g)
        m = state["momentum"]
        m.add_(g)
        shape = as_matrix(p).shape
        chosen = yield from select(m, shape, rows, shape[0] <= shape[1], group["fraction"], group["ef_decay"])
        o = rows.gather_apply_scatter(chosen.slices, chosen.counts, owner, orthogonalizer(group["orthogonalize"]))
        apply_update(p, group, o, dim=chosen.dim, index=chosen.index)


def build_dion2(model: nn.Module, cfg: RunConfig, ctx: Context, params: dict) -> Dion2:
    groups = matrix_groups(model, cfg, "dion2", params.get("scalar_lr"), weight_decay=cfg.weight_decay)
    keys = ("fraction", "ef_decay", "adjust_lr", "orthogonalize")
    return Dion2(groups, lr=cfg.lr, weight_decay=cfg.weight_decay, **{k: params[k] for k in keys})


DION2 = OptimizerSpec(
    "dion2",
    build_dion2,
    "Dion2 (orthogonalize the fraction of the momentum's rows or columns largest in l1 norm, decay them, keep the "
    "rest) on matrices, AdamW on the rest; under FSDP2 only the selected slices travel (--set fraction, ef_decay, "
    "adjust_lr, orthogonalize, scalar_lr)",
    params={
        "fraction": Param(
            float, 0.25, "share of the rows or columns orthogonalized per step", low=0, high=1, low_open=True
        ),
        "ef_decay": Param(float, 0.95, "decay of the selected slices of the momentum", low=0, high=1),
        **PARAMS,
    },
    check=refuse_column_splits("dion2"),
)
