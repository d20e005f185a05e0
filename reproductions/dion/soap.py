"""SOAP (Vyas, Morwani, Zhao, Kwun, Shapira, Brandfonbrener, Janson, Kakade 2024, arXiv 2409.11321): Adam run in
the eigenbasis of Shampoo's preconditioner, the basis refreshed every `precondition_frequency` steps.

Per matrix G (m x n), as the authors' soap.py computes it (nikhilvyas/SOAP, read as the reference and run beside
ours for fixtures/reference-soap.json, never copied):

    first step: L = (1 - b) G G^T, R = (1 - b) G^T G, Q_L, Q_R = their eigenvectors (eigh, largest first); no update
    then:  G' = Q_L^T G Q_R;  M = b1 M + (1 - b1) G';  V = b2 V + (1 - b2) G'^2       (M and V in the eigenbasis)
           X = (X - lr sqrt(1 - b2^t) / (1 - b1^t) Q_L (M / (sqrt(V) + eps)) Q_R^T) (1 - lr wd)
           L = b L + (1 - b) G G^T;  R = b R + (1 - b) G^T G   (b = shampoo_beta, b2 when negative)
           every `precondition_frequency` updates: Q <- QR(P Q) with Q's columns sorted by Q^T P Q's diagonal
           (one power iteration; V's rows and columns sorted alike), M moved from the old basis to the new

Only matrices (no merged dimensions, no 1-D preconditioning: the reference's defaults); embeddings, head, norms
and biases train on AdamW, the suite's rule for every matrix optimizer (the paper preconditions all layers, its
code can; the arms here differ in the matrix optimizer only). Under FSDP2 each matrix's gradient is gathered
whole on one rank (matrix i on rank i mod world, as Muon), which holds that matrix's SOAP state and returns the
update's rows (the preconditioners L and R need the whole gradient); under DDP gradients arrive averaged and
every rank steps every matrix.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable

import torch
from torch import nn

from baselines.muon import MUON, as_matrix, local, matrix_groups
from reproductions.dion.sharded import MatrixOptimizer, Rows, refuse_column_splits
from suite.config import RunConfig
from suite.params import Param
from suite.run.optim import OptimizerSpec
from suite.run.strategy import Context


class SOAP(MatrixOptimizer):
    """SOAP on `algorithm: "soap"` groups (the default), AdamW on `algorithm: "adamw"` groups."""

    algorithm = "soap"

    def __init__(
        self,
        params: Iterable,
        lr: float = 3e-3,
        betas: tuple[float, float] = (0.95, 0.95),
        shampoo_beta: float = -1.0,
        eps: float = 1e-8,
        weight_decay: float = 0.01,
        precondition_frequency: int = 10,
    ) -> None:
        if not all(0 <= b < 1 for b in betas) or shampoo_beta >= 1:
            raise ValueError(f"soap: betas must be in [0, 1) and shampoo_beta below 1, got {betas}, {shampoo_beta}")
        if precondition_frequency < 1:
            raise ValueError(f"soap: precondition_frequency must be >= 1, got {precondition_frequency}")
        defaults = dict(
            lr=lr, betas=tuple(betas), shampoo_beta=shampoo_beta, eps=eps, weight_decay=weight_decay,
            precondition_frequency=precondition_frequency,
        )  # fmt: skip
        super().__init__(params, defaults)

    def _check(self, group: dict) -> None:
        if group["lr"] < 0:
            raise ValueError(f"soap: lr must be >= 0, got {group['lr']}")

    def _task(self, p: torch.Tensor, group: dict, rows: Rows, owner: int) -> Generator:
        yield from ()  # `lockstep` runs generators; SOAP's step requests no sums
        state = self.state[p]
        first = not state.get("started", False)  # held on every rank: only the owner holds SOAP's own state
        state["started"] = True
        g = as_matrix(local(p.grad)).float()
        update = rows.gather_apply_scatter(g, list(rows.counts), owner, lambda whole: soap_update(state, whole, group))
        if not first:
            x = as_matrix(local(p))
            x.sub_(update.to(x.dtype))
            x.mul_(1 - group["lr"] * group["weight_decay"])


def soap_update(state: dict, g: torch.Tensor, group: dict) -> torch.Tensor:
    """One SOAP step on the whole gradient `g` with `state` (the matrix's, held on the rank that steps it): the
    scaled update lr x step size x direction, zero on the first step (which only sets the preconditioners up)."""
    beta1, beta2 = group["betas"]
    shampoo_beta = group["shampoo_beta"] if group["shampoo_beta"] >= 0 else beta2
    if "left" not in state:
        state["left"] = g.new_zeros(g.shape[0], g.shape[0]).lerp_(g @ g.T, 1 - shampoo_beta)
        state["right"] = g.new_zeros(g.shape[1], g.shape[1]).lerp_(g.T @ g, 1 - shampoo_beta)
        state["left_basis"], state["right_basis"] = eigenbasis(state["left"]), eigenbasis(state["right"])
        state["exp_avg"] = torch.zeros_like(g)
        state["exp_avg_sq"] = torch.zeros_like(g)
        state["step"] = 0
        return torch.zeros_like(g)
    left, right = state["left_basis"], state["right_basis"]
    projected = left.T @ g @ right
    state["step"] += 1
    step = state["step"]
    state["exp_avg"].mul_(beta1).add_(projected, alpha=1 - beta1)
    state["exp_avg_sq"].mul_(beta2).add_(projected.square(), alpha=1 - beta2)
    direction = left @ (state["exp_avg"] / state["exp_avg_sq"].sqrt().add_(group["eps"])) @ right.T
    size = group["lr"] * (1 - beta2**step) ** 0.5 / (1 - beta1**step)
    refresh(state, g, shampoo_beta, step % group["precondition_frequency"] == 0)
    return direction * size


def refresh(state: dict, g: torch.Tensor, shampoo_beta: float, new_basis: bool) -> None:
    """The preconditioners' running averages, and on `new_basis` the basis by one power iteration, with the first
    moment moved to the new basis and the second moment's entries sorted with it."""
    state["left"].lerp_(g @ g.T, 1 - shampoo_beta)
    state["right"].lerp_(g.T @ g, 1 - shampoo_beta)
    if not new_basis:
        return
    exp_avg = state["left_basis"] @ state["exp_avg"] @ state["right_basis"].T
    for dim, side in enumerate(("left", "right")):
        p, q = state[side], state[f"{side}_basis"]
        order = torch.argsort(torch.diag(q.T @ p @ q), descending=True)
        state["exp_avg_sq"] = state["exp_avg_sq"].index_select(dim, order)
        state[f"{side}_basis"] = torch.linalg.qr(p @ q[:, order]).Q
    state["exp_avg"] = state["left_basis"].T @ exp_avg @ state["right_basis"]


def eigenbasis(p: torch.Tensor) -> torch.Tensor:
    """Eigenvectors of the symmetric `p`, largest eigenvalue first (float64 where float32's eigh fails)."""
    try:
        vectors = torch.linalg.eigh(p)[1]
    except RuntimeError:
        vectors = torch.linalg.eigh(p.double())[1].float()
    return vectors.flip(1)


def build_soap(model: nn.Module, cfg: RunConfig, ctx: Context, params: dict) -> SOAP:
    groups = matrix_groups(model, cfg, "soap", params.get("scalar_lr"), weight_decay=cfg.weight_decay)
    return SOAP(
        groups,
        lr=cfg.lr,
        betas=(params["beta1"], params["beta2"]),
        shampoo_beta=params["shampoo_beta"],
        weight_decay=cfg.weight_decay,
        precondition_frequency=params["precondition_frequency"],
    )


SOAP_SPEC = OptimizerSpec(
    "soap",
    build_soap,
    "SOAP (Adam in the eigenbasis of Shampoo's preconditioner, refreshed every precondition_frequency steps) on "
    "matrices, AdamW on the rest; under FSDP2 each matrix is stepped whole on one rank (--set beta1, beta2, "
    "shampoo_beta, precondition_frequency, scalar_lr)",
    params={
        "beta1": Param(float, 0.95, "first-moment decay (the reference's default)", low=0, high=1, high_open=True),
        "beta2": Param(float, 0.95, "second-moment decay (the reference's default)", low=0, high=1, high_open=True),
        "shampoo_beta": Param(
            float, -1.0, "decay of the preconditioners L and R (negative: beta2)", high=1, high_open=True
        ),
        "precondition_frequency": Param(int, 10, "updates between eigenbasis refreshes", low=1),
        "scalar_lr": MUON.params["scalar_lr"],
    },
    check=refuse_column_splits("soap"),
)
