"""Tensor parallelism (Megatron-style) with DTensor's `parallelize_module`, applied from outside the model.

Each block's attention projections wq, wk, wv and the MLP's w1, w3 are split by output columns, wo and w2 by
input rows, so a block needs one all-reduce in its forward and one in its backward for each of the two
(PrepareModuleInput makes the block's input one replicated DTensor, so the three column-wise projections'
input gradients are summed once). The embedding is split by vocabulary rows, the output head by columns.
Norm weights stay replicated, as Replicate DTensors, so that the optimizer's foreach kernels see one kind
of tensor. `sequence_parallel` shards the norms' activations along the sequence (SequenceParallel) and
computes the loss on vocabulary-sharded logits (loss_parallel), as torchtitan does.

The attention module's head counts are set to this rank's share: the model stays single-device code, and
its `view(B, T, heads, head_dim)` then reads the local columns (torchtitan's recipe before it used -1).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_module
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    loss_parallel,
    parallelize_module,
)

from baselines import precision
from baselines.checkpointing import apply_activation_checkpointing
from suite import models
from suite.models.llama import Attention
from suite.params import Param
from suite.run.strategy import Context, Strategy, local_tensor


def check_degree(model: str, degree: int) -> None:
    """A one-line error when `degree` cannot split the model's heads."""
    cfg = models.model_config(model)
    if "n_heads" not in cfg:
        raise ValueError(f"tensor parallelism splits a transformer's heads; {model} has none: use --model llama-tiny")
    for key in ("n_heads", "n_kv_heads"):
        if cfg[key] % degree:
            raise ValueError(
                f"tensor-parallel degree {degree} does not divide {model}'s {key} ({cfg[key]}); "
                f"use a --nproc (or tp degree) that divides {cfg[key]}"
            )


def _replicate_rest(module: nn.Module, mesh: DeviceMesh) -> None:
    """Plain parameters (norms) become Replicate DTensors; the module reads and returns local tensors."""

    def to_dtensor(_mod, inputs, mesh):
        return tuple(DTensor.from_local(t, mesh, [Replicate()]) if isinstance(t, torch.Tensor) else t for t in inputs)

    def to_local(_mod, output, _mesh):
        return output.to_local() if isinstance(output, DTensor) else output

    distribute_module(module, mesh, input_fn=to_dtensor, output_fn=to_local)


def apply_tp(model: nn.Module, mesh: DeviceMesh, sequence_parallel: bool) -> nn.Module:
    """Shard `model` (a suite Llama) over the 1-D `mesh`; returns it."""
    seq = Shard(1) if sequence_parallel else Replicate()
    parallelize_module(
        model,
        mesh,
        {
            "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=seq),
            "output": ColwiseParallel(
                input_layouts=seq,
                output_layouts=Shard(-1) if sequence_parallel else Replicate(),
                use_local_output=not sequence_parallel,
            ),
            **({"norm": SequenceParallel()} if sequence_parallel else {}),
        },
    )
    for block in models.blocks_of(model):
        plan = {
            "attention": PrepareModuleInput(
                input_layouts=(seq, None, None), desired_input_layouts=(Replicate(), None, None)
            ),
            "attention.wq": ColwiseParallel(),
            "attention.wk": ColwiseParallel(),
            "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(output_layouts=seq),
            "feed_forward": PrepareModuleInput(input_layouts=(seq,), desired_input_layouts=(Replicate(),)),
            "feed_forward.w1": ColwiseParallel(),
            "feed_forward.w3": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(output_layouts=seq),
        }
        if sequence_parallel:
            plan |= {"attention_norm": SequenceParallel(), "ffn_norm": SequenceParallel()}
        parallelize_module(block, mesh, plan)
        attention = next(m for m in block.modules() if isinstance(m, Attention))
        attention.n_heads //= mesh.size()
        attention.n_kv_heads //= mesh.size()
        if not sequence_parallel:
            _replicate_rest(block.attention_norm, mesh)
            _replicate_rest(block.ffn_norm, mesh)
    if not sequence_parallel:
        _replicate_rest(model.norm, mesh)
    return model


def clip_dtensor_grads(params: list[nn.Parameter], max_norm: float) -> torch.Tensor:
    """Clip by the norm of the whole gradient when some are DTensors (sharded or replicated): the norm of a
    sharded gradient's DTensor is reduced over its mesh (torchtitan's clip_grad_norm_)."""
    grads = [p.grad for p in params if p.grad is not None]
    total = torch.nn.utils.get_total_norm(grads, foreach=True)
    if isinstance(total, DTensor):
        total = total.full_tensor()
    torch.nn.utils.clip_grads_with_norm_(params, max_norm, total, foreach=True)
    return total


class TensorParallel(Strategy):
    """Every rank holds 1/T of each block's matrices; all ranks read the same batch (one data replica)."""

    name = "tp"
    params = {
        "sequence_parallel": Param(bool, False, "shard norms' activations by sequence, loss on sharded logits"),
    }

    def check(self, world_size: int) -> None:
        check_degree(self.cfg.model, world_size)
        if self.cfg.checkpoint_every:
            raise ValueError("tp does not save checkpoints yet; drop --checkpoint-every")

    def setup(self, ctx: Context) -> None:
        self.mesh = init_device_mesh(ctx.device.type, (ctx.world_size,), mesh_dim_names=("tp",))
        ctx.meshes["tp"] = self.mesh
        ctx.label_group(self.mesh.get_group("tp"), "tp")

    def build(self, make_model: Callable[[], nn.Module], ctx: Context) -> nn.Module:
        model = make_model().to(ctx.device)
        if self.cfg.ac:
            apply_activation_checkpointing(model)
        return apply_tp(model, self.mesh, self.variant["sequence_parallel"])

    def autocast(self, ctx: Context) -> AbstractContextManager:
        stack = ExitStack()
        stack.enter_context(precision.autocast(ctx.device, self.cfg.precision))
        if self.variant["sequence_parallel"]:
            stack.enter_context(loss_parallel())
        return stack

    def forward_backward(self, model, x, y, loss_fn, backward) -> torch.Tensor:
        loss = loss_fn(model, x, y)
        with loss_parallel() if self.variant["sequence_parallel"] else ExitStack():
            backward(loss)  # loss_parallel's backward runs in its context too
        return _full(loss.detach())

    def clip_grad_norm(self, model: nn.Module, max_norm: float, ctx: Context) -> None:
        clip_dtensor_grads(list(model.parameters()), max_norm)

    def data_replica(self, ctx: Context) -> tuple[int, int]:
        return 0, 1

    def describe(self, ctx: Context) -> dict:
        return {
            "strategy": self.name,
            "mesh": {"tp": ctx.world_size},
            "sequence_parallel": self.variant["sequence_parallel"],
        }


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if isinstance(t, DTensor) else local_tensor(t)
