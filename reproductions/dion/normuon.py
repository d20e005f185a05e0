"""NorMuon (Li, Liu, Liang, Chen, Zhao 2025, arXiv 2510.05491): Muon with each neuron's (row's) update
normalized by a running second moment.

Per matrix (rows = output neurons), as microsoft/dion's normuon.py computes it (read as the reference and
run beside ours for fixtures/reference-dion2-normuon.json, never copied):

    M = mu M + G;  U = G + mu M (Nesterov) or M;  O = orthogonalize(U)   (bf16; Polar Express by default)
    v = beta2 v + (1 - beta2) mean_cols(O * O);  N = O / (sqrt(v) + eps);  N = N ||O||_F / ||N||_F
    X = X (1 - lr wd) - adjusted_lr x N

The paper writes M as an average ((1 - beta1) G) and scales N to RMS 0.2 (0.2 lr sqrt(m n) / ||N||_F);
orthogonalization does not see M's scale, and keeping ||O||_F (about sqrt(min(m, n))) with
adjust_lr=rms_norm (0.2 lr sqrt(max(m, n))) gives the paper's step; spectral_norm, the reference's default,
is Muon's lr sqrt(rows/cols) instead.

Here because NorMuon comes from the Dion group's reference (a sibling of Dion, whose fixtures it shares);
a torch.optim.Optimizer that runs on CPU and on FSDP2 shards like the suite's Muon and Dion. Under FSDP2
the matrix is orthogonalized whole on one rank (gather, orthogonalize, scatter, as Muon) and each rank
normalizes its own rows: v is per row, and the two Frobenius norms are summed over the shard group (two
numbers per matrix), so the update equals one process's. The reference normalizes each shard with its own
norms under FSDP2, an approximation this does not make.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable

import torch
import torch.distributed as dist
from torch import nn

from baselines.muon import as_matrix, local, matrix_groups
from reproductions.dion.orthogonalize import orthogonalizer
from reproductions.dion.sharded import (
    EPS,
    PARAMS,
    MatrixOptimizer,
    Rows,
    apply_update,
    momentum_and_variance,
    refuse_column_splits,
)
from suite.config import RunConfig
from suite.params import Param
from suite.run.optim import OptimizerSpec
from suite.run.strategy import Context


class NorMuon(MatrixOptimizer):
    """NorMuon on `algorithm: "normuon"` groups (the default), AdamW on `algorithm: "adamw"` groups."""

    algorithm = "normuon"

    def __init__(
        self,
        params: Iterable,
        lr: float = 0.01,
        mu: float = 0.95,
        beta2: float = 0.95,
        nesterov: bool = False,
        weight_decay: float = 0.0,
        adjust_lr: str = "spectral_norm",
        orthogonalize: str = "polar_express",
    ) -> None:
        if not (0 <= mu < 1 and 0 <= beta2 < 1):
            raise ValueError(f"normuon: mu and beta2 must be in [0, 1), got mu={mu}, beta2={beta2}")
        defaults = dict(
            lr=lr, mu=mu, beta2=beta2, nesterov=nesterov, weight_decay=weight_decay, adjust_lr=adjust_lr,
            orthogonalize=orthogonalize,
        )  # fmt: skip
        super().__init__(params, defaults)

    def _task(self, p: torch.Tensor, group: dict, rows: Rows, owner: int) -> Generator:
        g = as_matrix(local(p.grad))
        m, v = momentum_and_variance(self.state[p], g)
        m.mul_(group["mu"]).add_(g)
        u = g.add(m, alpha=group["mu"]) if group["nesterov"] else m
        o = rows.gather_apply_scatter(u, list(rows.counts), owner, orthogonalizer(group["orthogonalize"]))
        n = yield from normalize(o.float(), v, group["beta2"], rows.group)
        apply_update(p, group, n)


def normalize(o: torch.Tensor, v: torch.Tensor, beta2: float, group: dist.ProcessGroup | None) -> Generator:
    """NorMuon's step on this rank's rows of O (float32): v (those rows' second moments) updated in place, each
    row divided by its RMS, the result scaled back to ||O||_F (the two norms summed over `group`: a generator for
    `lockstep`, returning N)."""
    v.lerp_((o * o).mean(dim=1, keepdim=True), 1 - beta2)
    n = o / (v.sqrt() + EPS)
    squares = yield torch.stack([(o * o).sum(), (n * n).sum()]), group
    norm_o, norm_n = squares.sqrt()
    return n * (norm_o / norm_n.clamp(min=EPS))


def build_normuon(model: nn.Module, cfg: RunConfig, ctx: Context, params: dict) -> NorMuon:
    groups = matrix_groups(model, cfg, "normuon", params.get("scalar_lr"), weight_decay=cfg.weight_decay)
    keys = ("mu", "beta2", "nesterov", "adjust_lr", "orthogonalize")
    return NorMuon(groups, lr=cfg.lr, weight_decay=cfg.weight_decay, **{k: params[k] for k in keys})


NORMUON = OptimizerSpec(
    "normuon",
    build_normuon,
    "NorMuon (Muon's orthogonalized momentum, each row divided by its running RMS, Frobenius norm kept) on "
    "matrices, AdamW on the rest; under FSDP2 gather, orthogonalize, scatter (--set mu, beta2, nesterov, "
    "adjust_lr, orthogonalize, scalar_lr)",
    params={
        "mu": Param(float, 0.95, "momentum", low=0, high=1, high_open=True),
        "beta2": Param(float, 0.95, "decay of each row's second moment", low=0, high=1, high_open=True),
        "nesterov": Param(bool, False, "Nesterov momentum (the reference's default: off)"),
        **PARAMS,
    },
    check=refuse_column_splits("normuon"),
)
