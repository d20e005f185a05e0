"""Expert parallelism on a mixture-of-experts LLaMA (suite.models.moe), applied from outside the model.

Rank r of W holds experts [floor(r E / W), floor((r + 1) E / W)) of every block (where W does not divide E,
some ranks hold one expert more: 8 experts on 3 ranks are 2, 3, 3) and a whole copy of everything else; each
rank reads its own rows of the global batch (the ranks are data replicas). In each block the router runs
locally; the routed copies of the tokens, sorted by expert, go to the ranks holding their experts with one
`all_to_all_single` of uneven splits (each rank first sends every other the number of rows for each of that
rank's experts, an all_to_all of E integers split by the ranks' expert counts), the experts run on what arrived,
and a second all_to_all sends the outputs back. Their backward is the same two exchanges in reverse.

Gradients: the non-expert parameters are replicated, so their gradients are all-reduced (one flat buffer) and
averaged; an expert's gradient already sums the contributions of every rank's tokens, each rank's loss a mean
over its own rows, so it is divided by W to be the gradient of the global mean. Both are then the gradient a
single process computes on the whole batch (tests/test_expert_parallel.py).

With --ac a block's recomputation in backward repeats its exchanges (the ledger counts them) but is not counted
as load again. In bf16 (autocast) the routed rows leave in fp32, RMSNorm's output, and the experts' outputs
come back in bf16, as one process computes them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

import torch
import torch.distributed as dist
from torch import nn

from baselines import precision
from baselines.checkpointing import apply_activation_checkpointing
from baselines.gradsync import average_gradients
from suite import models
from suite.meters.base import Meter
from suite.models.moe import MoE, MoeConfig, active_params, run_experts
from suite.run.strategy import Context, Strategy


def check_experts(model: str, world_size: int) -> None:
    """A one-line error when `model` has no experts, or fewer than `world_size` (a rank would hold none)."""
    cfg = models.model_config(model)
    if "n_experts" not in cfg:
        raise ValueError(
            f"expert parallelism spreads a mixture of experts; {model} has none: use --model llama-tiny-moe"
        )
    if cfg["n_experts"] < world_size:
        raise ValueError(
            f"{model}'s {cfg['n_experts']} experts cannot give each of {world_size} ranks one; "
            f"use a --nproc of at most {cfg['n_experts']}"
        )


def expert_counts(n_experts: int, world_size: int) -> list[int]:
    """How many experts each rank holds: rank r the experts [floor(r E / W), floor((r + 1) E / W))."""
    return [(r + 1) * n_experts // world_size - r * n_experts // world_size for r in range(world_size)]


class AllToAllExperts:
    """Replaces `MoE.apply_experts`: sends each routed row to the rank holding its expert and brings the output back.

    `load` sums, while `counting`, the rows each local expert received from all ranks (the expert's load).
    """

    def __init__(self, experts: nn.ModuleList, held: list[int], group: dist.ProcessGroup) -> None:
        self.experts, self.held, self.group = experts, held, group  # held[r]: how many experts rank r holds
        self.world = dist.get_world_size(group)
        self.load = torch.zeros(len(experts), dtype=torch.long)
        self.counting = False

    def __call__(self, rows: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        local = len(self.experts)
        recv = counts.new_empty(self.world * local)
        # counts is ordered by expert, so rank r's experts are its r-th slice of held[r]
        dist.all_to_all_single(recv, counts, [local] * self.world, self.held, group=self.group)
        recv = recv.view(self.world, local)  # [source rank, my local expert]
        to_each = torch.stack([c.sum() for c in counts.split(self.held)]).tolist()
        from_each = recv.sum(1).tolist()
        arrived = _exchange(rows, from_each, to_each, self.group)
        # rows arrive grouped by source rank, then by expert: regroup them by expert alone for the matmuls
        expert_of = (
            torch.arange(len(self.experts), device=rows.device).repeat(self.world).repeat_interleave(recv.flatten())
        )
        order = expert_of.argsort(stable=True)
        done = run_experts(self.experts, arrived[order], recv.sum(0).tolist())
        # in the experts' output dtype (bf16 under autocast, the rows fp32), as one process returns them
        out = done.new_empty(done.shape).index_copy(0, order, done)
        if self.counting:
            self.load += recv.sum(0).cpu()
        return _exchange(out, to_each, from_each, self.group)

    @contextmanager
    def recomputing(self) -> Iterator[None]:
        """Activation checkpointing's recomputation repeats the exchanges but routes no new rows: no load."""
        counting, self.counting = self.counting, False
        try:
            yield
        finally:
            self.counting = counting


class _AllToAll(torch.autograd.Function):
    """all_to_all_single with uneven splits whose backward sends the gradients back the same way in reverse
    (torch.distributed.nn's version is deprecated, and the functional one's replacement is private)."""

    @staticmethod
    def forward(ctx, rows, out_splits, in_splits, group):
        ctx.splits, ctx.group = (in_splits, out_splits), group
        out = rows.new_empty(sum(out_splits), *rows.shape[1:])
        dist.all_to_all_single(out, rows.contiguous(), out_splits, in_splits, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        return _AllToAll.apply(grad, *ctx.splits, ctx.group), None, None, None


def _exchange(rows: torch.Tensor, out_splits: list[int], in_splits: list[int], group) -> torch.Tensor:
    return _AllToAll.apply(rows, out_splits, in_splits, group)


def is_expert(name: str) -> bool:
    return ".experts." in name


def dispatchers(model: nn.Module) -> list[AllToAllExperts]:
    return [m.apply_experts for m in model.modules() if isinstance(m, MoE)]


class ExpertParallel(Strategy):
    """E / W experts of each block per rank (rounded down or up where W does not divide E), everything else
    replicated; every rank a data replica."""

    name = "ep"

    def check(self, world_size: int) -> None:
        check_experts(self.cfg.model, world_size)
        if self.cfg.checkpoint_every:
            raise ValueError("ep does not save checkpoints yet (its experts are spread); drop --checkpoint-every")
        if self.cfg.evals or self.cfg.checkpoint:
            raise ValueError("ep has no whole model to score or save; drop --evals and --checkpoint")

    def setup(self, ctx: Context) -> None:
        ctx.label_group(None, "ep")
        self.group = ctx.process_groups["ep"]

    def build(self, make_model: Callable[[], nn.Module], ctx: Context) -> nn.Module:
        model = make_model()  # every rank draws every weight, so the kept experts equal one process's
        self.total_params = models.num_params(model)
        for moe in (m for m in model.modules() if isinstance(m, MoE)):
            held = expert_counts(moe.n_experts, ctx.world_size)
            first = sum(held[: ctx.rank])
            moe.experts = nn.ModuleList(moe.experts[first : first + held[ctx.rank]])
            moe.apply_experts = AllToAllExperts(moe.experts, held, self.group)
        if self.cfg.ac:
            apply_activation_checkpointing(model, recompute=lambda block: dispatchers(block)[0].recomputing())
        return model.to(ctx.device)

    def autocast(self, ctx: Context) -> AbstractContextManager:
        return precision.autocast(ctx.device, self.cfg.precision)

    def after_backward(self, model: nn.Module, ctx: Context) -> None:
        named = [(n, p.grad) for n, p in model.named_parameters() if p.grad is not None]
        average_gradients([g for n, g in named if not is_expert(n)], self.group)
        for grad in (g for n, g in named if is_expert(n)):
            grad /= ctx.world_size

    def clip_grad_norm(self, model: nn.Module, max_norm: float, ctx: Context) -> None:
        """The whole model's norm: the replicated part's (the same on every rank) plus every rank's experts'."""
        named = [(n, p.grad) for n, p in model.named_parameters() if p.grad is not None]
        experts = torch.stack([g.float().pow(2).sum() for n, g in named if is_expert(n)]).sum()
        dist.all_reduce(experts, group=self.group)
        dense = torch.stack([g.float().pow(2).sum() for n, g in named if not is_expert(n)]).sum()
        norm = (dense + experts).sqrt()
        torch.nn.utils.clip_grads_with_norm_(list(model.parameters()), max_norm, norm, foreach=True)

    def describe(self, ctx: Context) -> dict:
        cfg = MoeConfig(**models.model_config(self.cfg.model))
        return {
            "strategy": self.name,
            "mesh": {"ep": ctx.world_size},
            "experts_per_rank": expert_counts(cfg.n_experts, ctx.world_size),
            "total_params": self.total_params,
            "active_params": active_params(cfg, self.total_params),
        }


class ExpertLoad(Meter):
    """Rows routed to each expert of each block over the communication meter's steps, summed over ranks."""

    name = "experts"

    @classmethod
    def applies(cls, cfg) -> bool:
        return cfg.method == "ep"

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.steps_counted = 0

    def steps(self) -> range:
        cfg = self.ctx.cfg
        return range(cfg.comm_step, cfg.comm_step + self.ctx.period) if cfg.meters else range(0)

    @contextmanager
    def wrap(self, step: int) -> Iterator[None]:
        for d in dispatchers(self.ctx.model()):
            d.counting = True
        try:
            yield
        finally:
            for d in dispatchers(self.ctx.model()):
                d.counting = False

    def after(self, step: int) -> None:
        self.steps_counted += 1

    def local(self):
        if not self.steps_counted:
            return None
        return {"steps": self.steps_counted, "load": [d.load.tolist() for d in dispatchers(self.ctx.model())]}

    @classmethod
    def section(cls, per_rank, record, weight) -> None:
        ranks = [v for _, v in sorted(per_rank.items()) if v]
        if not ranks:
            return
        steps = ranks[0]["steps"]
        # rank r holds the r-th slice of experts: concatenating the ranks' loads orders them by expert index
        per_block = [[n / steps for r in ranks for n in r["load"][block]] for block in range(len(ranks[0]["load"]))]
        record["experts"] = {
            "load_per_step": per_block,
            "steps": steps,
            "method": "rows routed to each expert (block by block, experts in index order) per step, summed over "
            "ranks and micro-steps, on the communication meter's steps",
        }
