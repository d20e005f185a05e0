"""A run's pieces from its config: data and task, the model through the strategy, optimizer, schedule and meters.

Building is apart from the Worker (suite/run/train.py) so that the loop holds only what it steps. The estimator
builds through the same Worker, on fake tensors (suite/estimate/rank.py), so both build with this code.
`describe_build` writes what was built into the record, here where it is known.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from contextlib import AbstractContextManager

import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.lr_scheduler import LRScheduler

from suite import data as data_lib
from suite import models
from suite.config import RunConfig
from suite.evals.model_file import load_state
from suite.meters.base import MeterContext, Metering
from suite.meters.builtin import meters_for
from suite.run import emulate, faults
from suite.run.optim import describe_groups, get_spec, lr_schedule, param_groups
from suite.run.protocols import Progress, Protocol
from suite.run.strategy import Context, Strategy


def device_for(cfg: RunConfig) -> torch.device:
    """This worker's device: its local GPU (torchrun's LOCAL_RANK) on cuda, else the CPU."""
    if cfg.device == "cuda":
        local = int(os.environ.get("LOCAL_RANK", 0))
        torch.cuda.set_device(local)
        return torch.device("cuda", local)
    return torch.device("cpu")


class Task:
    """What one batch is and how its loss is computed: language modelling or image classification."""

    def __init__(self, cfg: RunConfig, kind: str, data) -> None:
        self.cfg, self.kind, self.data = cfg, kind, data

    @property
    def unit(self) -> str:
        """What the budget counts: tokens for language models, samples (images) for classifiers."""
        return "tokens" if self.kind == "lm" else "samples"

    def tokens_per_sequence(self) -> int:
        return self.cfg.seq_len if self.kind == "lm" else 1

    def batch(self, step: int, global_rows: int, start: int, count: int, device: torch.device):
        if self.kind == "lm":
            x, y = self.data.batch(step, global_rows, self.cfg.seq_len, self.cfg.seed, start=start, count=count)
        else:
            x, y = self.data.batch(step, global_rows, self.cfg.seed, start=start, count=count)
        return x.to(device), y.to(device)

    def val_batches(self) -> list:
        if self.kind == "lm":
            return self.data.val_batches(self.cfg.eval_batches, self.cfg.eval_batch, self.cfg.seq_len)
        return self.data.val_batches(self.cfg.eval_batches, self.cfg.eval_batch)

    def loss(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = model(x).float()
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


def _model_overrides(cfg: RunConfig, kind: str, data) -> dict:
    if kind == "lm":
        return {"max_seq_len": max(cfg.seq_len, models.model_config(cfg.model)["max_seq_len"])}
    return {"num_classes": data.num_classes, "in_channels": data.in_channels}


def unwrapped(model: nn.Module) -> nn.Module:
    """The network under a wrapper that keeps it as `module` (DDP), or the model itself."""
    return getattr(model, "module", model)


@dataclasses.dataclass
class Parts:
    """What one rank's run is built of, and what the record says of how it was built."""

    data: data_lib.Data
    data_name: str
    task: Task
    model: nn.Module  # as the strategy built and wrapped it
    model_config: dict
    params: int  # the full model's, before the strategy shards or splits it
    optimizer: torch.optim.Optimizer  # the one the loop steps (wrap_optimizer's)
    scaler: torch.amp.GradScaler | None
    schedule: LRScheduler
    metering: Metering
    replica: int  # this rank's data replica, of `replicas`: which rows of the global batch it reads
    replicas: int
    global_rows: int  # sequences (or images) of one step over every replica
    step_tokens: int


def build_parts(
    cfg: RunConfig,
    strategy: Strategy,
    ctx: Context,
    optimizer_params: dict,
    scope: AbstractContextManager,
    spent: Callable[[], float],
) -> Parts:
    """Every piece of this rank's run. The model and optimizer are built inside `scope` (the estimator makes them
    fake there); `spent` is the fraction of the budget used, which a cosine schedule follows."""
    kind = models.kind_of(cfg.model)
    data_name = cfg.data or data_lib.default_data_for(kind)
    # loaded once for every emulated worker (suite/run/emulate.py), which only read it
    data = emulate.shared(("data", data_name, cfg.data_root), lambda: data_lib.load_data(data_name, cfg.data_root))
    task = Task(cfg, kind, data)
    overrides = _model_overrides(cfg, kind, data)
    strategy.setup(ctx)
    torch.manual_seed(cfg.seed)  # in a logical worker, its own stream (suite/run/emulate.py)
    full_params: list[int] = []
    start = load_state(cfg.init_from, cfg.model, overrides) if cfg.init_from else None

    def make_model() -> nn.Module:
        m = models.build_model(cfg.model, **overrides)
        full_params.append(models.num_params(m))
        if start is not None:  # before the strategy shards or wraps it: every method starts from these weights
            m.load_state_dict(start)
        return m

    with scope:
        model = strategy.build(make_model, ctx)
        optimizer = strategy.wrap_optimizer(get_spec(cfg.optimizer).build(model, cfg, ctx, optimizer_params), ctx)
        scaler = strategy.grad_scaler(ctx)
        schedule = lr_schedule(optimizer, cfg, spent)
    meters = MeterContext(
        cfg, strategy.comm_period, ctx.device, ctx.ledger, lambda: model, lambda: [optimizer, *strategy.optimizers()]
    )
    metering = Metering(meters_for(meters))
    replica, replicas = strategy.data_replica(ctx)
    global_rows = replicas * cfg.micro_batch * cfg.grad_accum
    return Parts(
        data=data,
        data_name=data_name,
        task=task,
        model=model,
        model_config=models.model_config(cfg.model, **overrides),
        params=full_params[0] if full_params else 0,
        optimizer=optimizer,
        scaler=scaler,
        schedule=schedule,
        metering=metering,
        replica=replica,
        replicas=replicas,
        global_rows=global_rows,
        step_tokens=global_rows * task.tokens_per_sequence(),
    )


def describe_build(
    record: dict,
    parts: Parts,
    strategy: Strategy,
    ctx: Context,
    optimizer_params: dict,
    protocol: Protocol,
    bn_note: str | None,
) -> None:
    """The record's sections as set-up leaves them: the arm, model, data, parallel layout and optimizer, the
    protocol and totals before any step, the faults section, and how BatchNorm is evaluated (`bn_note`)."""
    cfg = ctx.cfg
    record["baseline"] = strategy.baseline
    # composition options are part of the arm: ddp and ddp+ac are different arms of a comparison
    # and so is the optimizer with its parameters (declared defaults filled in: suite.params)
    record["variant"] = {
        **strategy.variant,
        "ac": cfg.ac,
        "precision": cfg.precision,
        "optimizer": cfg.optimizer,
        **optimizer_params,
    }
    record["model"] = {"name": cfg.model, "params": parts.params, "config": parts.model_config}
    record["data"] = {
        **parts.data.describe(),
        "name": parts.data_name,
        "source": parts.data.source,
        "seed": cfg.seed,
        "sampling": "global batch drawn from (seed, step); replica r reads rows [m*R*mb + r*mb, +mb) of micro-step m",
    }
    record["parallel"].update(strategy.describe(ctx))
    record["parallel"].update(
        {
            "global_batch_tokens": parts.step_tokens,
            "global_batch_sequences": parts.global_rows,
            "data_replicas": parts.replicas,
            "groups": ctx.groups,
        }
    )
    record["optimizer"] = {
        "name": cfg.optimizer,
        "params": optimizer_params,
        "groups": describe_groups(param_groups(unwrapped(parts.model))),
        "outer": [type(o).__name__ for o in strategy.optimizers()],
    }
    record["protocol"] = protocol.describe(Progress(0, 0, 0.0, 0.0, None))
    record["totals"].update(hardware_flops=0, optimizer_flops=0, epochs=0.0)
    record["faults"] = faults.section(cfg)
    if bn_note is not None:
        record["evals"]["bn_statistics"] = bn_note
