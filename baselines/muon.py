"""Muon, the matched matrix-optimizer baseline: momentum orthogonalized by five Newton-Schulz steps.

Written here because no maintained library ships Muon as a torch.optim.Optimizer that runs on CPU
and on FSDP2 shards (torch has none; microsoft/dion needs triton or torch.compile for its fast paths and
is read only as the reference, never copied). The variant is pinned: Nesterov momentum (buffer = mu x
buffer + G, update direction G + mu x buffer), the quintic (3.4445, -4.7750, 2.0315) in bf16 on the
Frobenius-normalized matrix, decoupled weight decay X *= 1 - lr x wd, and a shape scaling named by
`adjust_lr` (the reference's names): spectral_norm lr x sqrt(rows/cols) (the reference's default),
rms_norm 0.2 x sqrt(max(rows, cols)) x lr (Moonlight), max1 lr x sqrt(max(1, rows/cols)) (Keller Jordan).

Embeddings, the head, norms and biases ride along as AdamW groups (`algorithm: "adamw"`), stepped by
torch's own functional AdamW. Under FSDP2 each rank orthogonalizes the whole matrices assigned to it
(matrix i to rank i mod world): the shards are gathered to it, orthogonalized and scattered back, every
byte through torch.distributed so the communication meter counts it.

Layer-wise distributed Muon under DDP (`--set layerwise=true`; Moonlight's distributed Muon, and the DDP path of
microsoft/dion's muon.py, read as the reference): gradients arrive averaged as under plain DDP and every rank keeps
the momentum, but the orthogonalizations are split: the matrices of one shape, padded with zero matrices to a
multiple of the world, are dealt out in contiguous blocks, each rank orthogonalizes its block and one all-gather
per shape returns every result to every rank (a shape held by one matrix is orthogonalized on every rank, as
there). Each rank's Newton-Schulz work falls to ceil(N / world) of N matrices, for one all-gather of the bf16
results per shape.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor
from torch.optim.adamw import adamw as functional_adamw

from suite.config import RunConfig
from suite.params import Param
from suite.run.optim import OptimizerSpec, param_groups
from suite.run.strategy import Context

NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)
NS_STEPS = 5
ADJUST_LR = ("spectral_norm", "rms_norm", "max1")
SCALAR_GROUPS = ("embeddings", "norms", "biases", "other")


def newton_schulz5(g: torch.Tensor, steps: int = NS_STEPS, eps: float = 1e-7) -> torch.Tensor:
    """The quintic Newton-Schulz iteration in bf16: singular values of the result near 1 (0.7 to 1.2)."""
    a, b, c = NS_COEFFICIENTS
    x = g.bfloat16()
    x = x / (x.norm() + eps)
    tall = g.size(0) > g.size(1)
    if tall:
        x = x.mT
    for _ in range(steps):
        gram = x @ x.mT
        x = a * x + (b * gram + c * (gram @ gram)) @ x
    return x.mT if tall else x


def adjusted_lr(lr: float, shape: tuple[int, int], adjust_lr: str) -> float:
    rows, cols = shape
    if adjust_lr == "spectral_norm":
        return lr * math.sqrt(rows / cols)
    if adjust_lr == "rms_norm":
        return lr * 0.2 * math.sqrt(max(rows, cols))
    if adjust_lr == "max1":
        return lr * math.sqrt(max(1.0, rows / cols))
    raise ValueError(f"adjust_lr must be one of {', '.join(ADJUST_LR)}, got {adjust_lr!r}")


def as_matrix(t: torch.Tensor) -> torch.Tensor:
    """A weight as the matrix the optimizer sees: rows = dim 0, the remaining dims flattened (convolutions)."""
    return t.reshape(t.shape[0], math.prod(t.shape[1:]))  # -1 is ambiguous for an empty shard


def local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if isinstance(t, DTensor) else t


def check_matrix_group(group: dict, algorithm: str) -> None:
    """A matrix optimizer's group must hold matrices only, and at least one (one-line error naming the fix)."""
    params = group["params"]
    if not params:
        raise ValueError(f"{algorithm}: a parameter group with no matrices; give it 2-D weights or drop the group")
    flat = [tuple(p.shape) for p in params if p.ndim < 2]
    if flat:
        raise ValueError(
            f"{algorithm}: parameter of shape {flat[0]} is not a matrix; put embeddings, norms and biases in a "
            f"group with algorithm='adamw'"
        )


class ScalarAdamW:
    """The AdamW part of a matrix optimizer: torch's functional AdamW (foreach) on `algorithm: "adamw"` groups."""

    @staticmethod
    def init_group(group: dict) -> None:
        group.setdefault("betas", (0.9, 0.95))
        group.setdefault("eps", 1e-8)

    @staticmethod
    def step(opt: torch.optim.Optimizer, group: dict, grads: dict[int, torch.Tensor] | None = None) -> None:
        """`grads`: gradients to use instead of p.grad (already synchronized ones), by id of the parameter."""
        params, grads_out, avgs, sqs, steps = [], [], [], [], []
        for p in group["params"]:
            if p.grad is None:
                continue
            state = opt.state[p]
            if not state:
                state["step"] = torch.tensor(0.0)
                state["exp_avg"] = torch.zeros_like(local(p))
                state["exp_avg_sq"] = torch.zeros_like(local(p))
            params.append(local(p))
            grads_out.append(grads[id(p)] if grads is not None else local(p.grad))
            avgs.append(state["exp_avg"])
            sqs.append(state["exp_avg_sq"])
            steps.append(state["step"])
        if not params:
            return
        beta1, beta2 = group["betas"]
        functional_adamw(
            params, grads_out, avgs, sqs, [], steps, foreach=True, amsgrad=False, beta1=beta1, beta2=beta2,
            lr=group["lr"], weight_decay=group["weight_decay"], eps=group["eps"], maximize=False,
        )  # fmt: skip


def shard_group(p: DTensor) -> tuple[dist.ProcessGroup, int]:
    """The process group a DTensor is row-sharded over (FSDP2's Shard(0)), and its size."""
    dims = [d for d, pl in enumerate(p.placements) if pl.is_shard() and p.device_mesh.size(d) > 1]
    if any(not p.placements[d].is_shard(0) for d in dims) or len(dims) > 1:
        raise ValueError(f"sharded matrices must be split along rows over one mesh dimension, got {p.placements}")
    if not dims:
        return None, 1
    return p.device_mesh.get_group(dims[0]), p.device_mesh.size(dims[0])


class Muon(torch.optim.Optimizer):
    """Muon on `algorithm: "muon"` groups (the default), AdamW on `algorithm: "adamw"` groups."""

    def __init__(
        self,
        params: Iterable,
        lr: float = 0.02,
        mu: float = 0.95,
        nesterov: bool = True,
        weight_decay: float = 0.0,
        adjust_lr: str = "spectral_norm",
        replicate_group: dist.ProcessGroup | None = None,
    ) -> None:
        """`replicate_group`: DDP's group, whose ranks then split the orthogonalizations (layer-wise)."""
        if lr < 0 or not 0 <= mu < 1:
            raise ValueError(f"muon: lr must be >= 0 and mu in [0, 1), got lr={lr}, mu={mu}")
        if adjust_lr not in ADJUST_LR:
            raise ValueError(f"muon: adjust_lr must be one of {', '.join(ADJUST_LR)}, got {adjust_lr!r}")
        defaults = dict(lr=lr, mu=mu, nesterov=nesterov, weight_decay=weight_decay, adjust_lr=adjust_lr)
        super().__init__(params, {**defaults, "algorithm": "muon"})
        self.replicate_group = replicate_group
        for group in self.param_groups:
            if group["algorithm"] == "muon":
                check_matrix_group(group, "muon")
            else:
                ScalarAdamW.init_group(group)

    def _direction(self, p: torch.Tensor, group: dict) -> torch.Tensor:
        """The momentum step on this rank's part of p; returns the matrix to orthogonalize (local rows)."""
        g = as_matrix(local(p.grad))
        state = self.state[p]
        if "momentum_buffer" not in state:
            state["momentum_buffer"] = torch.zeros_like(g)
        buf = state["momentum_buffer"]
        buf.mul_(group["mu"]).add_(g)
        return g.add(buf, alpha=group["mu"]) if group["nesterov"] else buf

    def _apply(self, p: torch.Tensor, update: torch.Tensor, group: dict) -> None:
        x = as_matrix(local(p))
        shape = as_matrix(p).shape
        x.mul_(1 - group["lr"] * group["weight_decay"])
        x.add_(update.to(x.dtype), alpha=-adjusted_lr(group["lr"], shape, group["adjust_lr"]))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            if group["algorithm"] != "muon":
                ScalarAdamW.step(self, group)
                continue
            sharded, whole = [], []
            for p in group["params"]:
                if p.grad is None:
                    continue
                direction = self._direction(p, group)
                if isinstance(p, DTensor) and shard_group(p)[1] > 1:
                    sharded.append((p, direction))
                else:
                    whole.append((p, direction))
            for p, update in zip((p for p, _ in whole), self._orthogonalize_whole([d for _, d in whole])):
                self._apply(p, update, group)
            for index, (p, direction) in enumerate(sharded):
                self._apply(p, gather_orthogonalize_scatter(direction, p, index), group)
        return loss

    def _orthogonalize_whole(self, directions: list[torch.Tensor]) -> list[torch.Tensor]:
        """Every whole matrix's Newton-Schulz result: here, or split over `replicate_group` by shape."""
        if self.replicate_group is None or dist.get_world_size(self.replicate_group) == 1:
            return [newton_schulz5(d) for d in directions]
        by_shape: dict[tuple, list[int]] = {}
        for i, d in enumerate(directions):
            by_shape.setdefault(tuple(d.shape), []).append(i)
        out: list[torch.Tensor] = [None] * len(directions)
        for indices in by_shape.values():
            results = split_newton_schulz([directions[i] for i in indices], self.replicate_group)
            for i, result in zip(indices, results):
                out[i] = result
        return out


def split_newton_schulz(directions: list[torch.Tensor], group: dist.ProcessGroup) -> list[torch.Tensor]:
    """newton_schulz5 of each of `directions` (one shape), the work dealt over `group`'s ranks in contiguous blocks
    of ceil(N / world) (zero matrices pad the last) and the results all-gathered; one matrix alone is done here."""
    if len(directions) == 1:
        return [newton_schulz5(directions[0])]
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    per_rank = math.ceil(len(directions) / world)
    padded = directions + [torch.zeros_like(directions[0])] * (per_rank * world - len(directions))
    mine = torch.stack([newton_schulz5(d) for d in padded[rank * per_rank : (rank + 1) * per_rank]])
    blocks = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(blocks, mine, group=group)
    return list(torch.cat(blocks)[: len(directions)])


def shard_counts(rows: int, world: int) -> list[int]:
    """Rows of each rank under FSDP2's Shard(0): even chunks of ceil(rows / world), the last ones short or empty."""
    chunk = math.ceil(rows / world)
    return [max(0, min(chunk, rows - i * chunk)) for i in range(world)]


def gather_orthogonalize_scatter(direction: torch.Tensor, p: DTensor, index: int) -> torch.Tensor:
    """Matrix `index` is orthogonalized whole on rank index mod world (newton_schulz5)."""
    group, world = shard_group(p)
    counts = shard_counts(as_matrix(p).shape[0], world)
    return gather_apply_scatter(direction, counts, index % world, group, newton_schulz5)


def gather_apply_scatter(
    rows: torch.Tensor,
    counts: list[int],
    owner: int,
    group: dist.ProcessGroup,
    fn: Callable[[torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    """A matrix split by rows over `group` (counts[i] rows on rank i, in rank order; `rows` are this rank's) is
    gathered whole on rank `owner` (every part padded to the largest), `fn` is applied there, and this rank's
    rows of the result are scattered back."""
    chunk = max(counts)
    me = dist.get_rank(group)
    padded = rows.new_zeros(chunk, rows.shape[1])
    padded[: rows.shape[0]] = rows
    parts = [torch.empty_like(padded) for _ in counts] if me == owner else None
    dist.gather(padded, parts, group=group, group_dst=owner)
    pieces = None
    if me == owner:
        full = fn(torch.cat([part[:n] for part, n in zip(parts, counts)])).to(rows.dtype)
        pieces = [
            torch.cat([piece, piece.new_zeros(chunk - n, piece.shape[1])])
            for piece, n in zip(full.split(counts), counts)
        ]
    out = torch.empty_like(padded)
    dist.scatter(out, pieces, group=group, group_src=owner)
    return out[: rows.shape[0]]


def matrix_groups(model: nn.Module, cfg: RunConfig, algorithm: str, scalar_lr: float | None, **extra) -> list[dict]:
    """Matrices on the matrix optimizer, the head (decayed) and the rest (not decayed) on AdamW."""
    groups = param_groups(model)
    if not groups["matrices"]:
        raise ValueError(f"optimizer {algorithm}: the model has no matrix-shaped weights; use --optimizer adamw")
    lr = cfg.lr if scalar_lr is None else scalar_lr
    scalar = dict(algorithm="adamw", lr=lr, betas=cfg.betas, eps=1e-8)
    out = [
        {"params": groups["matrices"], "name": "matrices", "algorithm": algorithm, "lr": cfg.lr, **extra},
        {"params": groups["head"], "name": "head", "weight_decay": cfg.weight_decay, **scalar},
        {"params": [p for g in SCALAR_GROUPS for p in groups[g]], "name": "other", "weight_decay": 0.0, **scalar},
    ]
    return [g for g in out if g["params"]]


def build_muon(model: nn.Module, cfg: RunConfig, ctx: Context, params: dict) -> Muon:
    groups = matrix_groups(model, cfg, "muon", params.get("scalar_lr"), weight_decay=cfg.weight_decay)
    return Muon(
        groups,
        lr=cfg.lr,
        mu=params["mu"],
        nesterov=params["nesterov"],
        weight_decay=cfg.weight_decay,
        adjust_lr=params["adjust_lr"],
        replicate_group=model.process_group if params["layerwise"] else None,
    )


LAYERWISE = Param(bool, False, "under ddp: split the orthogonalizations over the ranks, all-gather the results")


def check_layerwise(cfg: RunConfig) -> None:
    """Layer-wise splitting is DDP's: FSDP2's Muon already orthogonalizes each matrix whole on one rank."""
    if "layerwise" in cfg.variant and LAYERWISE.parse("layerwise", cfg.variant["layerwise"]) and cfg.method != "ddp":
        raise ValueError(
            f"--set layerwise=true splits Muon's orthogonalizations over DDP's ranks; {cfg.method} steps each "
            f"matrix on one rank (or on every rank) already: use --method ddp or drop layerwise"
        )


MUON = OptimizerSpec(
    "muon",
    build_muon,
    "Muon (5 bf16 Newton-Schulz steps, Nesterov) on matrices, AdamW on the rest; under FSDP2 gather, "
    "orthogonalize, scatter; under DDP with layerwise=true each rank orthogonalizes its share of the matrices and "
    "all-gathers them (--set mu, nesterov, adjust_lr=spectral_norm|rms_norm|max1, layerwise, scalar_lr)",
    params={
        "mu": Param(float, 0.95, "momentum", low=0, high=1, high_open=True),
        "nesterov": Param(bool, True, "Nesterov momentum"),
        "adjust_lr": Param(str, "spectral_norm", "how the update is scaled to the matrix shape", choices=ADJUST_LR),
        "layerwise": LAYERWISE,
        "scalar_lr": Param(
            float, None, "learning rate of the AdamW part (default: the run's lr)", low=0, low_open=True
        ),
    },
    check=check_layerwise,
)
