"""Context parallelism over the sequence: the suite's own implementation, applied from outside the model.

torch's `context_parallel` is not used because it has no CPU sharding rule for scaled_dot_product_attention
(it fails on gloo with torch 2.14); this module is the suite's own, checked against one process
(tests/test_context_parallel.py).

Rank r of W holds positions [r T / W, (r + 1) T / W) of every sequence of the batch; every rank reads the same
rows (one data replica). Each rank embeds its chunk, rotates its queries and keys by their global positions
(the RoPE tables shifted by the chunk's offset), and in every block all-gathers the keys and values of the
whole sequence (their backward a reduce-scatter of their gradients back to the chunks' owners); its queries
attend under the causal mask by global position. Each rank's loss is the mean over its chunk, and chunks are
equal, so averaging the parameter gradients over the ranks (one all-reduce) gives one process's gradient of the
whole batch. Not the ring variant: an all-gather holds every key and value at once, which is exact and simple.
With --ac a block's recomputation gathers its keys and values again; in bf16 (autocast) they travel in bf16.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from baselines import precision
from baselines.checkpointing import apply_activation_checkpointing
from baselines.gradsync import average_gradients
from suite import models
from suite.models.llama import Attention
from suite.run.strategy import Context, Strategy


def check_sequence(model: str, seq_len: int, world_size: int) -> None:
    """A one-line error when the sequence cannot be split into `world_size` equal chunks."""
    if "n_heads" not in models.model_config(model):
        raise ValueError(
            f"context parallelism splits a transformer's sequence; {model} has none: use --model llama-tiny"
        )
    if seq_len % world_size:
        fits = max(seq_len // world_size, 1) * world_size
        raise ValueError(
            f"seq_len {seq_len} cannot be split into {world_size} equal chunks; use --set seq_len={fits} "
            f"(a multiple of {world_size})"
        )


class _GatherSequence(torch.autograd.Function):
    """All-gather of [B, H, T/W, D] chunks along the sequence; the backward sums each chunk's gradient over
    the ranks (every rank's queries read every key) and hands it to the chunk's owner: a reduce-scatter."""

    @staticmethod
    def forward(ctx, chunk, group):
        ctx.group = group
        return torch.cat(_gather(chunk, group).unbind(0), dim=2)

    @staticmethod
    def backward(ctx, grad):
        world = dist.get_world_size(ctx.group)
        pieces = torch.cat(grad.chunk(world, dim=2))  # the ranks' chunks one after another along dim 0
        mine = pieces.new_empty(pieces.shape[0] // world, *pieces.shape[1:])
        dist.reduce_scatter_single(mine, pieces, group=ctx.group)
        return mine, None


def _gather(t: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
    """Every rank's `t`, stacked: [W, *t.shape]."""
    world = dist.get_world_size(group)
    out = t.new_empty(world * t.shape[0], *t.shape[1:])
    dist.all_gather_single(out, t.contiguous(), group=group)
    return out.view(world, *t.shape)


class GatheredAttention:
    """Replaces `Attention.attend`: this rank's queries over the whole sequence's keys and values."""

    def __init__(self, group: dist.ProcessGroup) -> None:
        self.group, self.rank = group, dist.get_rank(group)

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        k, v = _GatherSequence.apply(k, self.group), _GatherSequence.apply(v, self.group)
        groups = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        start = self.rank * q.shape[2]
        q_pos = torch.arange(start, start + q.shape[2], device=q.device)
        visible = torch.arange(k.shape[2], device=q.device)[None, :] <= q_pos[:, None]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=visible)


class ContextParallel(nn.Module):
    """A suite Llama run on this rank's chunk of every sequence, positions counted from the sequence's start."""

    def __init__(self, model: nn.Module, group: dist.ProcessGroup) -> None:
        super().__init__()
        self.module, self.group = model, group
        self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)
        for attention in (m for m in model.modules() if isinstance(m, Attention)):
            attention.attend = GatheredAttention(group)

    def forward(self, chunk: torch.Tensor) -> torch.Tensor:
        """tokens [B, T / W] of this rank's chunk -> its logits [B, T / W, vocab]."""
        m, start = self.module, self.rank * chunk.shape[1]
        cos, sin = m.rope_cos[start:], m.rope_sin[start:]  # apply_rope reads rows [0, T/W) of these
        h = m.tok_embeddings(chunk)
        for layer in m.layers:
            h = layer(h, cos, sin)
        return m.output(m.norm(h))


class WholeSequence(nn.Module):
    """For evaluation: splits whole sequences, runs this rank's chunk and gathers every chunk's logits."""

    def __init__(self, cp: ContextParallel) -> None:
        super().__init__()
        self.cp = cp

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        logits = self.cp(tokens.chunk(self.cp.world, dim=1)[self.cp.rank])
        return torch.cat(_gather(logits, self.cp.group).unbind(0), dim=1)


class ContextParallelism(Strategy):
    """Every rank a contiguous chunk of every sequence, the whole model replicated."""

    name = "cp"

    def check(self, world_size: int) -> None:
        check_sequence(self.cfg.model, self.cfg.seq_len, world_size)
        if self.cfg.checkpoint_every:
            raise ValueError("cp does not save checkpoints yet; drop --checkpoint-every")

    def setup(self, ctx: Context) -> None:
        ctx.label_group(None, "cp")
        self.group = ctx.process_groups["cp"]

    def build(self, make_model: Callable[[], nn.Module], ctx: Context) -> nn.Module:
        model = make_model().to(ctx.device)
        if self.cfg.ac:
            apply_activation_checkpointing(model)
        return ContextParallel(model, self.group)

    def autocast(self, ctx: Context) -> AbstractContextManager:
        return precision.autocast(ctx.device, self.cfg.precision)

    def forward_backward(self, model, x, y, loss_fn, backward) -> torch.Tensor:
        x, y = (t.chunk(model.world, dim=1)[model.rank] for t in (x, y))
        loss = loss_fn(model, x, y)  # the mean over this chunk; the loop averages it over the ranks
        backward(loss)
        return loss.detach()

    def after_backward(self, model: nn.Module, ctx: Context) -> None:
        average_gradients([p.grad for p in model.parameters() if p.grad is not None], self.group)

    def data_replica(self, ctx: Context) -> tuple[int, int]:
        return 0, 1

    def eval_model(self, model: nn.Module) -> nn.Module:
        return WholeSequence(model)

    def describe(self, ctx: Context) -> dict:
        return {
            "strategy": self.name,
            "mesh": {"cp": ctx.world_size},
            "chunk_tokens": self.cfg.seq_len // ctx.world_size,
        }
