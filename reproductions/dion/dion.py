"""Dion (Ahn et al. 2025): orthonormalized low-rank updates by one warm-started power iteration per step.

Per matrix, in the orientation with rows >= cols (wide matrices transposed), rank r = ceil(rank_fraction x
min(rows, cols)):

    B = M + G;  P = orthonormalize(B Q);  R = B^T P;  M = B - (1 - mu) P R^T;  Q = R / column norms;
    X = X (1 - lr wd) - lr sqrt(rows/cols) P Q^T        (rows, cols: the matrix as stored)

as microsoft/dion's dion_reference.py implements it (read as the reference, not copied; its fast paths
need torch.compile or triton). Q is drawn at the first step from the global torch RNG, torch.randn
(cols, r) in the working orientation, matrix after matrix in parameter order, so torch.manual_seed fixes a
run. orthonormalize is randomized Cholesky QR for tall P (a Gaussian sketch S of ceil(1.25 r / 128) x 128
rows from a generator seeded 0 on every rank, R1 from QR of S P, then one Cholesky QR pass on P R1^-1),
plain QR otherwise; the updates do not depend on the sketch (only the signs of Q's columns do).

Three layouts, the same arithmetic:
- one process, or gradients already synchronized (a strategy that averages them): everything local;
- data parallel with a `replicate` group (under DDP, whose all-reduce this module turns off, see
  `ddp_sync.py`): B Q and B^T P are averaged instead of G, (m + n) r numbers per matrix instead of m n;
  when that saves nothing (rank_fraction = 1) the gradient is averaged instead, as the reference does;
- FSDP2 row shards (DTensor Shard(0)): the matrix is never gathered. Working rows sharded: S P, P^T P and
  B^T P are summed (k r + r^2 + n r numbers); working columns sharded (a wide matrix): B Q and the column
  norms of R are summed (n r + r numbers).

Every all-reduce request of all matrices in one round goes out as one flat call per group (`lockstep`).
"""

from __future__ import annotations

import math
from collections.abc import Generator, Iterable
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from baselines.muon import ScalarAdamW, as_matrix, check_matrix_group, local, shard_group

OVERSAMPLE = 1.25
EPS = 1e-8


def rank_of(shape: tuple[int, int], rank_fraction: float) -> int:
    return min(math.ceil(rank_fraction * min(shape)), *shape)


def check_rank_fraction(value: float) -> float:
    if not 0 < value <= 1:
        raise ValueError(f"dion: rank_fraction must be in (0, 1], got {value}; e.g. --set rank_fraction=0.25")
    return value


def sketch_rows(r: int) -> int:
    return math.ceil(OVERSAMPLE * r / 128.0) * 128


@dataclass
class Layout:
    """How one matrix is held: working orientation, rank, and which of its dimensions is split over `group`."""

    rows: int  # working orientation (rows >= cols)
    cols: int
    r: int
    transposed: bool
    mode: str  # "local" | "replicate" | "sync-grad" | "rows" | "cols"
    group: dist.ProcessGroup | None = None
    world: int = 1
    offset: int = 0  # first working row ("rows") or column ("cols") of this rank's shard
    size: int = 0  # rows or columns of this rank's shard

    @property
    def tall(self) -> bool:
        return self.rows > self.r


def layout_of(p: torch.Tensor, rank_fraction: float, replicate: dist.ProcessGroup | None) -> Layout:
    rows, cols = as_matrix(p).shape
    transposed = rows < cols
    rows_w, cols_w = (cols, rows) if transposed else (rows, cols)
    r = rank_of((rows, cols), rank_fraction)
    if isinstance(p, DTensor):
        group, world = shard_group(p)
        if world > 1:
            chunk = math.ceil(rows / world)
            offset = min(dist.get_rank(group) * chunk, rows)
            size = local(p).shape[0]
            mode = "cols" if transposed else "rows"
            return Layout(rows_w, cols_w, r, transposed, mode, group, world, offset, size)
    if replicate is not None and dist.get_world_size(replicate) > 1:
        compress = rank_fraction < 1 and (rows + cols) * r < rows * cols
        mode = "replicate" if compress else "sync-grad"
        return Layout(rows_w, cols_w, r, transposed, mode, replicate, dist.get_world_size(replicate))
    return Layout(rows_w, cols_w, r, transposed, "local")


def lockstep(tasks: list[Generator]) -> None:
    """Run generators that yield (tensor, group) all-reduce requests (sum) round by round; each round's
    requests go out as one flat all-reduce per (group, dtype), in task order, the same on every rank."""
    replies: dict[int, torch.Tensor | None] = dict.fromkeys(range(len(tasks)))
    active = list(range(len(tasks)))
    while active:
        requests, still = [], []
        for i in active:
            try:
                requests.append((i, *tasks[i].send(replies[i])))
                still.append(i)
            except StopIteration:
                pass
        batches: dict[tuple, list] = {}
        for i, tensor, group in requests:
            batches.setdefault((id(group), tensor.dtype), []).append((i, tensor, group))
        for batch in batches.values():
            group = batch[0][2]
            flat = torch.cat([t.reshape(-1) for _, t, _ in batch])
            if group is not None:
                dist.all_reduce(flat, group=group)
            for (i, t, _), part in zip(batch, flat.split([t.numel() for _, t, _ in batch])):
                replies[i] = part.view_as(t)
        active = still


def orthonormalize(p: torch.Tensor, sketch: torch.Tensor | None) -> torch.Tensor:
    """Randomized Cholesky QR when a sketch is given (tall P), Householder QR otherwise; float32."""
    p32 = p.float()
    if sketch is None:
        return torch.linalg.qr(p32).Q
    r1 = torch.linalg.qr(sketch @ p32, mode="r").R
    q = torch.linalg.solve_triangular(r1, p32, upper=True, left=False)
    r2 = torch.linalg.cholesky_ex(q.mT @ q, upper=True).L
    return torch.linalg.solve_triangular(r2, q, upper=True, left=False)


class Dion(torch.optim.Optimizer):
    """Dion on `algorithm: "dion"` groups (the default), AdamW on `algorithm: "adamw"` groups.

    replicate_group: the data-parallel group whose gradient all-reduce Dion replaces (DDP with its reducer
    silenced by `ddp_sync.silence`); every gradient is then synchronized here: compressed for matrices,
    averaged for the AdamW groups.
    """

    def __init__(
        self,
        params: Iterable,
        lr: float = 0.01,
        mu: float = 0.95,
        rank_fraction: float = 1.0,
        weight_decay: float = 0.0,
        epsilon: float = EPS,
        replicate_group: dist.ProcessGroup | None = None,
    ) -> None:
        if lr < 0 or not 0 <= mu < 1:
            raise ValueError(f"dion: lr must be >= 0 and mu in [0, 1), got lr={lr}, mu={mu}")
        check_rank_fraction(rank_fraction)
        defaults = dict(lr=lr, mu=mu, rank_fraction=rank_fraction, weight_decay=weight_decay, epsilon=epsilon)
        super().__init__(params, {**defaults, "algorithm": "dion"})
        for group in self.param_groups:
            if group["algorithm"] == "dion":
                check_matrix_group(group, "dion")
                check_rank_fraction(group["rank_fraction"])
            else:
                ScalarAdamW.init_group(group)
        self.replicate_group = replicate_group
        self._sketch_rng: torch.Generator | None = None
        self._layouts: dict[int, Layout] = {}

    def layout(self, p: torch.Tensor, group: dict) -> Layout:
        if id(p) not in self._layouts:
            self._layouts[id(p)] = layout_of(p, group["rank_fraction"], self.replicate_group)
        return self._layouts[id(p)]

    def _init_q(self, p: torch.Tensor, lay: Layout) -> None:
        """Q from the global RNG (the full (cols, r) matrix on every rank); a column-sharded matrix keeps its rows."""
        state = self.state[p]
        if "Q" in state:
            return
        q = torch.randn(lay.cols, lay.r, device=local(p).device, dtype=local(p).dtype)
        if lay.mode == "cols":
            q = q[lay.offset : lay.offset + lay.size].clone()
        state["Q"] = q
        state["momentum"] = torch.zeros_like(as_matrix(local(p)))

    def _sketch(self, lay: Layout, device: torch.device) -> torch.Tensor | None:
        """The Gaussian sketch of a tall P, drawn in parameter order from a generator seeded 0 on every rank."""
        if not lay.tall and lay.mode != "rows":
            return None
        if self._sketch_rng is None:
            self._sketch_rng = torch.Generator(device=device)
            self._sketch_rng.manual_seed(0)
        k = sketch_rows(lay.r)
        s = torch.empty(k, lay.rows, device=device).normal_(std=math.sqrt(1.0 / k), generator=self._sketch_rng)
        return s[:, lay.offset : lay.offset + lay.size] if lay.mode == "rows" else s

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        tasks = []
        for group in self.param_groups:
            if group["algorithm"] != "dion":
                tasks.append(self._scalar_task(group))
                continue
            for p in group["params"]:
                if p.grad is None:
                    continue
                lay = self.layout(p, group)
                self._init_q(p, lay)
                tasks.append(self._matrix_task(p, group, lay, self._sketch(lay, local(p).device)))
        lockstep(tasks)
        return loss

    def _scalar_task(self, group: dict) -> Generator:
        """AdamW on a scalar group; its gradients averaged over the replicate group first when Dion owns the sync."""
        grads = None
        if self.replicate_group is not None and dist.get_world_size(self.replicate_group) > 1:
            params = [p for p in group["params"] if p.grad is not None]
            if params:
                world = dist.get_world_size(self.replicate_group)
                flat = yield torch.cat([local(p.grad).reshape(-1) for p in params]), self.replicate_group
                parts = (flat / world).split([local(p).numel() for p in params])
                grads = {id(p): part.view_as(local(p)) for p, part in zip(params, parts)}
        ScalarAdamW.step(self, group, grads)

    def _matrix_task(self, p: torch.Tensor, group: dict, lay: Layout, sketch: torch.Tensor | None) -> Generator:
        state = self.state[p]
        m, q = state["momentum"], state["Q"]
        g = as_matrix(local(p.grad))
        if lay.mode == "sync-grad":
            g = (yield g, lay.group) / lay.world
        m.add_(g)
        b = m.mT if lay.transposed else m  # working orientation; in "rows"/"cols" this rank's shard of it
        reduce = lay.group if lay.mode != "local" else None
        scale = 1.0 / lay.world if lay.mode == "replicate" else 1.0

        if lay.mode == "rows":
            p_local = b @ q
            sp = yield sketch @ p_local.float(), lay.group
            zero = not sp.any()
            if not zero:
                r1 = torch.linalg.qr(sp, mode="r").R
                p1 = torch.linalg.solve_triangular(r1, p_local.float(), upper=True, left=False)
                gram = yield p1.mT @ p1, lay.group
                r2 = torch.linalg.cholesky_ex(gram, upper=True).L
                p_local = torch.linalg.solve_triangular(r2, p1, upper=True, left=False).to(b.dtype)
            r = yield b.mT @ p_local, lay.group
        else:
            bq = b @ q
            if reduce is not None and lay.mode != "sync-grad":
                bq = (yield bq, reduce) * scale
            zero = not bq.any()
            p_local = bq if zero else orthonormalize(bq, sketch).to(b.dtype)
            r = b.mT @ p_local
            if lay.mode == "replicate":
                r = (yield r, reduce) * scale
        if zero:  # nothing to learn from (B = 0): weight decay only, Q kept, as the reference does
            self._update(p, group, lay, None, None)
            return
        self._finish(p, group, lay, m, p_local, r)
        if lay.mode == "cols":
            sq = yield r.float().square().sum(0), lay.group
            state["Q"] = (r.float() / (sq.sqrt() + group["epsilon"])).to(q.dtype)
        else:
            state["Q"] = (r.float() / (r.float().norm(dim=0) + group["epsilon"])).to(q.dtype)
        self._update(p, group, lay, p_local, state["Q"])

    @staticmethod
    def _finish(p, group, lay: Layout, m: torch.Tensor, p_local: torch.Tensor, r: torch.Tensor) -> None:
        """Error feedback: M = B - (1 - mu) P R^T (in the stored orientation)."""
        feedback = r @ p_local.mT if lay.transposed else p_local @ r.mT
        m.add_(feedback, alpha=-(1 - group["mu"]))

    @staticmethod
    def _update(p, group, lay: Layout, p_local: torch.Tensor | None, q: torch.Tensor | None) -> None:
        x = as_matrix(local(p))
        rows, cols = as_matrix(p).shape
        x.mul_(1 - group["lr"] * group["weight_decay"])
        if p_local is None:
            return
        update = q @ p_local.mT if lay.transposed else p_local @ q.mT
        x.add_(update.to(x.dtype), alpha=-group["lr"] * math.sqrt(rows / cols))

    def comm_numbers(self) -> dict[str, int]:
        """Numbers one step all-reduces per matrix group, by the layouts (the derivation the tests check)."""
        total = 0
        for group in self.param_groups:
            if group["algorithm"] != "dion":
                continue
            for p in group["params"]:
                lay = self.layout(p, group)
                total += {
                    "local": 0,
                    "replicate": (lay.rows + lay.cols) * lay.r,
                    "sync-grad": lay.rows * lay.cols,
                    "rows": sketch_rows(lay.r) * lay.r + lay.r * lay.r + lay.cols * lay.r,
                    "cols": lay.rows * lay.r + lay.r,
                }[lay.mode]
        return {"matrices": total}
