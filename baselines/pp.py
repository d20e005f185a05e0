"""Pipeline parallelism with torch.distributed.pipelining: contiguous blocks per stage, GPipe or 1F1B.

Stage s of P holds blocks [s L / P, (s + 1) L / P) of the model, the embedding on the first stage and the final
norm and head on the last; activations and their gradients travel by send and recv between neighbours. Each
of the loop's micro-batches is split into `microbatches` pieces that the schedule runs through the stages
(gradients averaged over them, so the step equals one process's). Every rank reads the same rows: a pipeline
is one data replica. The loss is known on the last stage only; it is broadcast to the others so that every
rank reports the same (4 bytes per micro-step, in the ledger).

The bubble is measured per rank on the step after the other meters' (`pipeline` section): the time this stage
computes (the schedule's forward and backward chunks, timed) against the schedule's wall time, beside GPipe's
analytic idle fraction (P - 1) / (M + P - 1).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

from baselines import precision
from baselines.checkpointing import apply_activation_checkpointing
from suite import models
from suite.meters.base import Meter
from suite.params import Param
from suite.strategy import Context, Strategy

SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}


class Stage(nn.Module):
    """The part of a suite Llama one pipeline stage runs: tokens or hidden states in, hidden states or logits out."""

    def __init__(self, model: nn.Module, lo: int, hi: int, first: bool, last: bool) -> None:
        super().__init__()
        self.tok_embeddings = model.tok_embeddings if first else None
        self.layers = nn.ModuleList(model.layers[lo:hi])
        self.norm, self.output = (model.norm, model.output) if last else (None, None)
        self.register_buffer("rope_cos", model.rope_cos, persistent=False)
        self.register_buffer("rope_sin", model.rope_sin, persistent=False)
        # this stage's computing time and the schedule's wall time in the last step (PipelineBubble reads them)
        self.busy_s = self.span_s = 0.0

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if self.tok_embeddings is not None:
            h = self.tok_embeddings(h)
        for layer in self.layers:
            h = layer(h, self.rope_cos, self.rope_sin)
        return self.output(self.norm(h)) if self.output is not None else h


def stage_bounds(n_layers: int, stages: int, stage: int) -> tuple[int, int]:
    return stage * n_layers // stages, (stage + 1) * n_layers // stages


def check_pipeline(model: str, stages: int, microbatches: int, micro_batch: int) -> None:
    """One-line errors for a pipeline that cannot be built."""
    cfg = models.model_config(model)
    if "n_layers" not in cfg:
        raise ValueError(
            f"pipeline parallelism splits a transformer's blocks; {model} has none: use --model llama-tiny"
        )
    if stages < 2:
        raise ValueError(f"a pipeline needs at least 2 stages, got {stages}; use --nproc 2 or more")
    if stages > cfg["n_layers"]:
        raise ValueError(f"{stages} stages but {model} has {cfg['n_layers']} blocks; use at most {cfg['n_layers']}")
    if microbatches < stages:
        raise ValueError(f"{microbatches} microbatches cannot fill {stages} stages; use --set microbatches={stages}")
    if micro_batch % microbatches:
        raise ValueError(
            f"micro_batch {micro_batch} cannot be split into {microbatches} microbatches; "
            f"use --set micro_batch={microbatches * max(micro_batch // microbatches, 1)}"
        )


class _PipelineForward(nn.Module):
    """Evaluation through the stages without a schedule: hidden states passed on, logits broadcast from the last."""

    def __init__(self, stage: Stage, index: int, group: dist.ProcessGroup, dim: int, vocab: int) -> None:
        super().__init__()
        self.stage, self.index, self.group, self.dim, self.vocab = stage, index, group, dim, vocab
        self.ranks = dist.get_process_group_ranks(group)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = tokens
        if self.index > 0:
            h = torch.empty(*tokens.shape, self.dim, device=tokens.device)
            dist.recv(h, self.ranks[self.index - 1], group=self.group)
        h = self.stage(h).float()
        if self.index < len(self.ranks) - 1:
            dist.send(h.contiguous(), self.ranks[self.index + 1], group=self.group)
            h = torch.empty(*tokens.shape, self.vocab, device=tokens.device)
        dist.broadcast(h, self.ranks[-1], group=self.group)
        return h


class Pipeline(Strategy):
    """One stage per rank; every rank a stage of the same data replica."""

    name = "pp"
    params = {
        "schedule": Param(str, "gpipe", "pipeline schedule", choices=tuple(SCHEDULES)),
        "microbatches": Param(
            int, None, "pieces each micro-batch is split into (default: the number of stages)", low=1
        ),
    }

    def stages(self, world_size: int) -> int:
        return world_size

    def n_microbatches(self, world_size: int) -> int:
        return self.variant.get("microbatches") or self.stages(world_size)

    def check(self, world_size: int) -> None:
        stages = self.stages(world_size)
        check_pipeline(self.cfg.model, stages, self.n_microbatches(world_size), self.cfg.micro_batch)
        if self.cfg.precision in ("fp16", "fp8"):
            raise ValueError(f"pp runs in fp32 or bf16, not {self.cfg.precision}; use --precision bf16")
        if self.cfg.checkpoint_every:
            raise ValueError("pp does not save checkpoints yet; drop --checkpoint-every")
        if self.cfg.evals or self.cfg.checkpoint:
            raise ValueError("pp has no whole model to score or save; drop --evals and --checkpoint")

    def make_mesh(self, ctx: Context) -> DeviceMesh:
        return init_device_mesh(ctx.device.type, (ctx.world_size,), mesh_dim_names=("pp",))

    def setup(self, ctx: Context) -> None:
        self.mesh = self.make_mesh(ctx)
        ctx.meshes["pp"] = self.mesh
        for dim in self.mesh.mesh_dim_names:
            ctx.label_group(self.mesh.get_group(dim), dim)
        self.pp_group = self.mesh.get_group("pp")
        self.index = self.mesh.get_local_rank("pp")

    def make_stage(self, make_model: Callable[[], nn.Module], ctx: Context) -> Stage:
        model = make_model()
        n, P = len(model.layers), self.mesh.size(self.mesh.mesh_dim_names.index("pp"))
        lo, hi = stage_bounds(n, P, self.index)
        stage = Stage(model, lo, hi, self.index == 0, self.index == P - 1).to(ctx.device)
        self.dim, self.vocab = model.cfg.dim, model.cfg.vocab_size
        if self.cfg.ac:
            apply_activation_checkpointing(stage)
        return stage

    def build(self, make_model: Callable[[], nn.Module], ctx: Context) -> nn.Module:
        stage = self.make_stage(make_model, ctx)
        self.wrap_schedule(stage, ctx)
        return stage

    def wrap_schedule(self, module: nn.Module, ctx: Context) -> None:
        P = self.mesh.size(self.mesh.mesh_dim_names.index("pp"))
        self.P, self.M = P, self.n_microbatches(ctx.world_size)
        self.pipe_stage = PipelineStage(module, self.index, P, ctx.device, group=self.pp_group)
        _time_chunks(self.pipe_stage, module)
        schedule = SCHEDULES[self.variant["schedule"]]
        self.schedule = schedule(self.pipe_stage, self.M, loss_fn=self._schedule_loss)
        self._infer_shapes(module, ctx)

    def _infer_shapes(self, module: nn.Module, ctx: Context) -> None:
        """One schedule step on zeros before training, its gradients thrown away: the schedule infers the
        stages' shapes on its first step with autograd.grad, which fails under the FLOP meter's module hooks
        (metered step 0). Off the ledger and the clock, like the loop's own set-up."""
        rows = torch.zeros(self.cfg.micro_batch, self.cfg.seq_len, dtype=torch.long, device=ctx.device)
        self._loss_fn = lambda _m, out, target: nn.functional.cross_entropy(out.flatten(0, 1).float(), target.flatten())
        first, last = self.index == 0, self.index == self.P - 1
        self.schedule.step(*((rows,) if first else ()), target=rows if last else None, losses=[] if last else None)
        module.zero_grad(set_to_none=True)

    def _schedule_loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return self._loss_fn(nn.Identity(), output, target)

    def forward_backward(self, model, x, y, loss_fn, backward) -> torch.Tensor:
        self._loss_fn = loss_fn  # the schedule runs backward itself: no loss scale (check refuses fp16)
        first, last = self.index == 0, self.index == self.P - 1
        losses: list[torch.Tensor] = []
        start = time.perf_counter()
        model.busy_s = 0.0
        with precision.autocast(x.device, self.cfg.precision):
            self.schedule.step(*((x,) if first else ()), target=y if last else None, losses=losses)
        model.span_s = time.perf_counter() - start
        loss = torch.stack(losses).mean().detach() if last else torch.zeros((), device=x.device)
        dist.broadcast(loss, dist.get_global_rank(self.pp_group, self.P - 1), group=self.pp_group)
        return loss

    def clip_grad_norm(self, model: nn.Module, max_norm: float, ctx: Context) -> None:
        """The whole model's norm: each stage's sum of squares, summed over the pipeline."""
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        squares = torch.stack([g.float().pow(2).sum() for g in grads]).sum()
        dist.all_reduce(squares, group=self.pp_group)
        torch.nn.utils.clip_grads_with_norm_(list(model.parameters()), max_norm, squares.sqrt(), foreach=True)

    def data_replica(self, ctx: Context) -> tuple[int, int]:
        return 0, 1

    def eval_model(self, model: nn.Module) -> nn.Module:
        return _PipelineForward(model, self.index, self.pp_group, self.dim, self.vocab)

    def describe(self, ctx: Context) -> dict:
        return {
            "strategy": self.name,
            "mesh": dict(zip(self.mesh.mesh_dim_names, self.mesh.shape)),
            "schedule": self.variant["schedule"],
            "stages": self.P,
            "microbatches": self.M,
        }


def _time_chunks(pipe_stage: PipelineStage, stage: Stage) -> None:
    """Add the duration of each forward and backward chunk the schedule runs on this stage to `stage.busy_s`
    (the schedule waits for its receives before it calls them, so they time computation only; module backward
    hooks cannot be used: the pipeline computes input gradients with autograd.grad)."""
    for name in ("forward_one_chunk", "backward_one_chunk"):
        inner = getattr(pipe_stage, name)

        def timed(*args, _inner=inner, **kwargs):
            start = time.perf_counter()
            try:
                return _inner(*args, **kwargs)
            finally:
                stage.busy_s += time.perf_counter() - start

        setattr(pipe_stage, name, timed)


class PipelineBubble(Meter):
    """Measured idle fraction of each stage, on the step after the other meters'."""

    name = "pipeline"

    @classmethod
    def applies(cls, cfg) -> bool:
        return cfg.method in ("pp", "pp-fsdp")

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.samples: list[tuple[float, float]] = []

    def steps(self) -> range:
        cfg = self.ctx.cfg
        first = max(cfg.flop_step, cfg.mem_step + self.ctx.period, cfg.comm_step + self.ctx.period)
        return range(first, first + 1) if cfg.meters else range(0)

    def after(self, step: int) -> None:
        model = self.ctx.model()
        self.samples.append((model.busy_s, model.span_s))

    def local(self):
        if not self.samples:
            return None
        busy, span = (sum(s[i] for s in self.samples) for i in (0, 1))
        return {"busy_s": busy, "span_s": span, "bubble": 1 - busy / span if span else None}

    @classmethod
    def section(cls, per_rank, record, weight) -> None:
        par = record["parallel"]
        P, M = par.get("stages"), par.get("microbatches")
        rows = [{"rank": r, **v} for r, v in sorted(per_rank.items()) if v]
        measured = [r["bubble"] for r in rows if r["bubble"] is not None]
        record["pipeline"] = {
            "per_rank": rows,
            "bubble_measured": sum(measured) / len(measured) if measured else None,
            "bubble_analytic": (P - 1) / (M + P - 1) if P and M else None,
            "method": "per rank: 1 - (time in the stage's forward and backward chunks) / schedule wall time, on the "
            "step after the other meters'; analytic: GPipe's (P - 1) / (M + P - 1)",
        }
