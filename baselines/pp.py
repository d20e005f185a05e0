"""Pipeline parallelism with torch.distributed.pipelining: contiguous blocks per stage, GPipe, 1F1B or
interleaved 1F1B.

The model is cut into S = P V stages (V = 1, or 2 virtual stages per rank for the interleaved schedule of
Narayanan et al., arXiv 2104.04473); stage s holds blocks [s L / S, (s + 1) L / S), the embedding on the first
stage and the final norm and head on the last, and rank r runs stages r, r + P, ... (a loop through the ranks
V times). Activations and their gradients travel by send and recv between the ranks of consecutive stages. Each
of the loop's micro-batches is split into `microbatches` pieces that the schedule runs through the stages
(gradients averaged over them, so the step equals one process's). Every rank reads the same rows: a pipeline
is one data replica. The loss is known on the last stage only; it is broadcast to the others so that every
rank reports the same (4 bytes per micro-step, in the ledger).

The bubble is measured per rank on the step after the other meters' (`pipeline` section): the time this stage
computes (the schedule's forward and backward chunks, timed) against the schedule's wall time, beside the
analytic idle fraction (P - 1) / (V M + P - 1): GPipe's and 1F1B's at V = 1, and for V = 2 the interleaved
schedule's (its bubble is 1/V of 1F1B's in units of a whole rank's work, the paper's section 2.2; torch's
documentation gives no formula).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

from baselines import precision
from baselines.checkpointing import apply_activation_checkpointing
from suite import models
from suite.meters.base import Meter
from suite.params import Param
from suite.run.strategy import Context, Strategy

SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B, "interleaved": ScheduleInterleaved1F1B}
# stages per rank of each schedule; 2 for interleaved, as in the paper's experiments and torchtitan's default
VIRTUAL = {"gpipe": 1, "1f1b": 1, "interleaved": 2}


class Stage(nn.Module):
    """The part of a suite Llama one pipeline stage runs: tokens or hidden states in, hidden states or logits out."""

    def __init__(self, model: nn.Module, lo: int, hi: int, first: bool, last: bool) -> None:
        super().__init__()
        self.tok_embeddings = model.tok_embeddings if first else None
        self.layers = nn.ModuleList(model.layers[lo:hi])
        self.norm, self.output = (model.norm, model.output) if last else (None, None)
        self.register_buffer("rope_cos", model.rope_cos, persistent=False)
        self.register_buffer("rope_sin", model.rope_sin, persistent=False)
        # this rank's computing time and the schedule's wall time in the last step (PipelineBubble reads them)
        self.busy_s = self.span_s = 0.0

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if self.tok_embeddings is not None:
            h = self.tok_embeddings(h)
        for layer in self.layers:
            h = layer(h, self.rope_cos, self.rope_sin)
        return self.output(self.norm(h)) if self.output is not None else h


class LocalStages(nn.ModuleList):
    """The V stages one rank runs under the interleaved schedule, in pipeline order."""

    def __init__(self, stages: list[Stage]) -> None:
        super().__init__(stages)
        # this rank's computing time and the schedule's wall time in the last step (PipelineBubble reads them)
        self.busy_s = self.span_s = 0.0


def rank_model(stages: list[Stage]) -> nn.Module:
    """The model a rank trains: its one stage itself (an FSDP2 root under pp-fsdp, which the memory meter tracks
    as FSDP2), or its stages together."""
    return stages[0] if len(stages) == 1 else LocalStages(stages)


def stages_of(model: nn.Module) -> list[Stage]:
    return list(model) if isinstance(model, LocalStages) else [model]


def stage_bounds(n_layers: int, stages: int, stage: int) -> tuple[int, int]:
    return stage * n_layers // stages, (stage + 1) * n_layers // stages


def local_stage_ids(rank: int, ranks: int, virtual: int) -> list[int]:
    """The global stages rank `rank` of `ranks` runs: a loop through the ranks `virtual` times."""
    return [rank + v * ranks for v in range(virtual)]


def check_pipeline(model: str, stages: int, microbatches: int, micro_batch: int, virtual: int = 1) -> None:
    """One-line errors for a pipeline of `stages` ranks, `virtual` stages each, that cannot be built."""
    cfg = models.model_config(model)
    if "n_layers" not in cfg:
        raise ValueError(
            f"pipeline parallelism splits a transformer's blocks; {model} has none: use --model llama-tiny"
        )
    if stages < 2:
        raise ValueError(f"a pipeline needs at least 2 stages, got {stages}; use --nproc 2 or more")
    n = cfg["n_layers"]
    if stages * virtual > n:
        if virtual == 1:
            raise ValueError(f"{stages} stages but {model} has {n} blocks; use at most {n}")
        raise ValueError(
            f"{stages} ranks x {virtual} virtual stages need {stages * virtual} blocks but {model} has {n}; "
            f"use --nproc {n // virtual} or --set schedule=1f1b"
        )
    if microbatches < stages:
        raise ValueError(f"{microbatches} microbatches cannot fill {stages} stages; use --set microbatches={stages}")
    if virtual > 1 and microbatches % stages:
        fits = -(-microbatches // stages) * stages
        raise ValueError(
            f"the interleaved schedule needs microbatches a multiple of the {stages} stages, got {microbatches}; "
            f"use --set microbatches={fits}"
        )
    if micro_batch % microbatches:
        raise ValueError(
            f"micro_batch {micro_batch} cannot be split into {microbatches} microbatches; "
            f"use --set micro_batch={microbatches * max(micro_batch // microbatches, 1)}"
        )


class _PipelineForward(nn.Module):
    """Evaluation through the stages without a schedule: hidden states passed on, logits broadcast from the last."""

    def __init__(self, model: nn.Module, index: int, group: dist.ProcessGroup, dim: int, vocab: int) -> None:
        super().__init__()
        self.stages = nn.ModuleList(stages_of(model))  # registered: the evaluated parameters are the trained ones
        self.index, self.group, self.dim, self.vocab = index, group, dim, vocab
        self.ranks = dist.get_process_group_ranks(group)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        P = len(self.ranks)
        S = P * len(self.stages)
        h = tokens
        for stage, s in zip(self.stages, local_stage_ids(self.index, P, len(self.stages))):
            if s > 0:
                h = torch.empty(*tokens.shape, self.dim, device=tokens.device)
                dist.recv(h, self.ranks[(s - 1) % P], group=self.group)
            h = stage(h).float()
            if s < S - 1:
                dist.send(h.contiguous(), self.ranks[(s + 1) % P], group=self.group)
        if self.index < P - 1:  # the last stage is the last rank's
            h = torch.empty(*tokens.shape, self.vocab, device=tokens.device)
        dist.broadcast(h, self.ranks[-1], group=self.group)
        return h


class Pipeline(Strategy):
    """V stages per rank (V = 1 but for the interleaved schedule); every rank a part of the same data replica."""

    name = "pp"
    not_estimable = (
        "torch.distributed.pipelining infers each stage's shapes with a real send and receive at its first step, "
        "which the fake process group refuses; measure it instead (python -m suite run)"
    )
    params = {
        "schedule": Param(str, "gpipe", "pipeline schedule (interleaved: 2 stages per rank)", choices=tuple(SCHEDULES)),
        "microbatches": Param(
            int, None, "pieces each micro-batch is split into (default: the number of stages)", low=1
        ),
    }

    def stages(self, world_size: int) -> int:
        return world_size

    def virtual(self) -> int:
        return VIRTUAL[self.variant["schedule"]]

    def n_microbatches(self, world_size: int) -> int:
        return self.variant.get("microbatches") or self.stages(world_size)

    def check(self, world_size: int) -> None:
        stages = self.stages(world_size)
        M = self.n_microbatches(world_size)
        check_pipeline(self.cfg.model, stages, M, self.cfg.micro_batch, self.virtual())
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
        self.P = self.mesh.size(self.mesh.mesh_dim_names.index("pp"))

    def make_stages(self, make_model: Callable[[], nn.Module], ctx: Context) -> list[Stage]:
        model = make_model()
        S = self.P * self.virtual()
        stages = []
        for s in local_stage_ids(self.index, self.P, self.virtual()):
            lo, hi = stage_bounds(len(model.layers), S, s)
            stages.append(Stage(model, lo, hi, s == 0, s == S - 1).to(ctx.device))
        self.dim, self.vocab = model.cfg.dim, model.cfg.vocab_size
        if self.cfg.ac:
            for stage in stages:
                apply_activation_checkpointing(stage)
        return stages

    def build(self, make_model: Callable[[], nn.Module], ctx: Context) -> nn.Module:
        model = rank_model(self.make_stages(make_model, ctx))
        self.wrap_schedule(model, ctx)
        return model

    def wrap_schedule(self, model: nn.Module, ctx: Context) -> None:
        stages = stages_of(model)
        self.M = self.n_microbatches(ctx.world_size)
        S = self.P * len(stages)
        ids = local_stage_ids(self.index, self.P, len(stages))
        self.pipe_stages = [
            PipelineStage(stage, s, S, ctx.device, group=self.pp_group) for stage, s in zip(stages, ids)
        ]
        for pipe_stage in self.pipe_stages:
            _time_chunks(pipe_stage, model)
        schedule = SCHEDULES[self.variant["schedule"]]
        # the single-stage schedules take one stage, the interleaved one a list
        arg = self.pipe_stages if len(stages) > 1 else self.pipe_stages[0]
        self.schedule = schedule(arg, self.M, loss_fn=self._schedule_loss)
        self._infer_shapes(model, ctx)

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
        # the first stage is the first rank's and the last the last rank's, whatever V
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
            "virtual_stages": self.virtual(),
            "microbatches": self.M,
        }


def _time_chunks(pipe_stage: PipelineStage, model: nn.Module) -> None:
    """Add the duration of each forward and backward chunk the schedule runs on this stage to `model.busy_s`
    (the schedule waits for its receives before it calls them, so they time computation only; module backward
    hooks cannot be used: the pipeline computes input gradients with autograd.grad)."""
    for name in ("forward_one_chunk", "backward_one_chunk"):
        inner = getattr(pipe_stage, name)

        def timed(*args, _inner=inner, **kwargs):
            start = time.perf_counter()
            try:
                return _inner(*args, **kwargs)
            finally:
                model.busy_s += time.perf_counter() - start

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
        P, M, V = par.get("stages"), par.get("microbatches"), par.get("virtual_stages", 1)
        rows = [{"rank": r, **v} for r, v in sorted(per_rank.items()) if v]
        measured = [r["bubble"] for r in rows if r["bubble"] is not None]
        record["pipeline"] = {
            "per_rank": rows,
            "bubble_measured": sum(measured) / len(measured) if measured else None,
            "bubble_analytic": (P - 1) / (V * M + P - 1) if P and M else None,
            "method": "per rank: 1 - (time in the rank's stages' forward and backward chunks) / schedule wall time, on "
            "the step after the other meters'; analytic: (P - 1) / (V M + P - 1) for P ranks of V stages and M "
            "microbatches (GPipe's and 1F1B's at V = 1, interleaved 1F1B's, arXiv 2104.04473, at V = 2)",
        }
