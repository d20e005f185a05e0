"""Dion3, the reference's NorDion2 (microsoft/dion's nordion2.py; `Dion3` is its alias there): Dion2's row
selection and error feedback with NorMuon's per-row normalization of the orthogonalized rows.

Per matrix, as the reference computes it (read and run beside ours for fixtures/reference-dion3.json, never
copied; no paper of its own yet), always selecting rows, k = max(1, ceil(fraction x rows)):

    M = M + G;  S = the k rows of M largest in l1 norm;  M_S = mu M_S;  O = orthogonalize(S)   (bf16)
    v_S = beta2 v_S + (1 - beta2) mean_cols(O * O);  N = O / (sqrt(v_S) + eps);  N = N ||O||_F / ||N||_F
    X = X (1 - lr wd);  X_S = X_S - adjusted_lr x N

(mu is the decay of the selected rows, the reference's name for it; v of the rows not selected is kept.)
Under FSDP2 it composes Dion2's and NorMuon's layouts: the row norms are summed over the shard group, the
selected rows travel to one rank and back, and each rank normalizes its own selected rows with the two
Frobenius norms summed, so the update equals one process's.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable

import torch
from torch import nn

from baselines.muon import as_matrix, local, matrix_groups
from reproductions.dion.dion2 import DION2, select
from reproductions.dion.normuon import NORMUON, normalize
from reproductions.dion.orthogonalize import orthogonalizer
from reproductions.dion.sharded import (
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


class Dion3(MatrixOptimizer):
    """Dion3 (NorDion2) on `algorithm: "dion3"` groups (the default), AdamW on `algorithm: "adamw"` groups."""

    algorithm = "dion3"

    def __init__(
        self,
        params: Iterable,
        lr: float = 0.01,
        fraction: float = 0.25,
        mu: float = 0.95,
        beta2: float = 0.95,
        weight_decay: float = 0.0,
        adjust_lr: str = "spectral_norm",
        orthogonalize: str = "polar_express",
    ) -> None:
        if not (0 < fraction <= 1 and 0 <= mu <= 1 and 0 <= beta2 < 1):
            raise ValueError(
                f"dion3: fraction must be in (0, 1], mu in [0, 1] and beta2 in [0, 1), got fraction={fraction}, "
                f"mu={mu}, beta2={beta2}; e.g. --set fraction=0.25"
            )
        defaults = dict(
            lr=lr, fraction=fraction, mu=mu, beta2=beta2, weight_decay=weight_decay, adjust_lr=adjust_lr,
            orthogonalize=orthogonalize,
        )  # fmt: skip
        super().__init__(params, defaults)

    def _task(self, p: torch.Tensor, group: dict, rows: Rows, owner: int) -> Generator:
        g = as_matrix(local(p.grad))
        m, v = momentum_and_variance(self.state[p], g)
        m.add_(g)
        chosen = yield from select(m, as_matrix(p).shape, rows, True, group["fraction"], group["mu"])
        o = rows.gather_apply_scatter(chosen.slices, chosen.counts, owner, orthogonalizer(group["orthogonalize"]))
        v_chosen = v[chosen.index]
        n = yield from normalize(o.float(), v_chosen, group["beta2"], rows.group)
        v[chosen.index] = v_chosen
        apply_update(p, group, n, dim=0, index=chosen.index)


def build_dion3(model: nn.Module, cfg: RunConfig, ctx: Context, params: dict) -> Dion3:
    groups = matrix_groups(model, cfg, "dion3", params.get("scalar_lr"), weight_decay=cfg.weight_decay)
    keys = ("fraction", "mu", "beta2", "adjust_lr", "orthogonalize")
    return Dion3(groups, lr=cfg.lr, weight_decay=cfg.weight_decay, **{k: params[k] for k in keys})


DION3 = OptimizerSpec(
    "dion3",
    build_dion3,
    "Dion3, the reference's NorDion2 (Dion2's top rows by l1 norm, decayed by mu in the momentum, orthogonalized, "
    "then each row divided by its running RMS as NorMuon does) on matrices, AdamW on the rest (--set fraction, mu, "
    "beta2, adjust_lr, orthogonalize, scalar_lr)",
    params={
        "fraction": DION2.params["fraction"],
        "mu": Param(float, 0.95, "decay of the selected rows of the momentum", low=0, high=1),
        "beta2": NORMUON.params["beta2"],
        **PARAMS,
    },
    check=refuse_column_splits("dion3"),
)
