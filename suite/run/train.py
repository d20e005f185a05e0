"""The one training loop: model + strategy + optimizer + data + protocol + meters -> run record.

Runs inside each worker started by `suite.run.launch` (or by a user's own torchrun). Rank 0 writes the
record: `incomplete` at start and after every evaluation and checkpoint, `complete` at the end; when the
run dies, `incomplete` with the error if a checkpoint can resume it (suite/run/checkpoint.py), else `failed`.
Meters run on a few steps each, off the clock (suite/meters/schedule.py); the
ledger sees training steps only, never the loop's control messages or evaluation.
"""

from __future__ import annotations

import dataclasses
import gc
import math
import os
import sys
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path

import psutil
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.optim.swa_utils import update_bn

from suite import data as data_lib
from suite import models
from suite.config import RunConfig
from suite.evals import run_evals
from suite.evals.model_file import full_state, load_state, plain_model, save_checkpoint, trajectory_path
from suite.evals.vision import image_accuracy
from suite.meters.base import MeterContext, Metering, write_sections
from suite.meters.builtin import meters_for
from suite.meters.clock import StepClock, peak_flops
from suite.meters.comm import CommLedger
from suite.meters.memory import allocator_settings
from suite.records import RecordError, read_record, write_record
from suite.run import checkpoint as ckpt
from suite.run import faults
from suite.run.optim import describe_groups, get_spec, lr_schedule, param_groups, split_variant
from suite.run.protocols import Progress, from_args
from suite.run.recorder import new_record, new_run_id
from suite.run.strategy import Context, get_strategy
from suite.timing import load_average


def process_start() -> float:
    """When this process started (epoch seconds)."""
    return psutil.Process().create_time()


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


@dataclasses.dataclass
class Position:
    """Where the loop stands: steps done, tokens seen, and one step's model FLOPs once counted."""

    step: int = 0
    tokens: int = 0
    flops_per_step: float = 0.0


class Worker:
    """One rank's run; holds the pieces so each phase of the loop is a short method."""

    def __init__(self, cfg: RunConfig, store: dict | None = None) -> None:
        self.cfg = cfg
        self.started = time.time()
        self.load_start = load_average()
        # before_s: since the process started, unless train() says when the process became free for this run
        self.timing: dict[str, float] = {
            "eval_s": 0.0,
            "final_evals_s": 0.0,
            "before_s": self.started - process_start(),
        }
        self.resumed_from: int | None = None
        self.device = self._device()
        backend = "nccl" if self.device.type == "cuda" else "gloo"
        timeout = faults.set_collective_timeout(cfg.collective_timeout_s)
        if not dist.is_initialized():
            device_id = self.device if self.device.type == "cuda" else None
            meet = store or faults.attempt_store(timeout)
            dist.init_process_group(backend, device_id=device_id, timeout=timeout, **meet)
        faults.rendezvous_done()
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        # a separate group for the loop's own control messages keeps them out of the ledger's groups
        self.control = dist.new_group(backend="gloo")
        self.protocol = from_args(cfg.tokens, cfg.flops, cfg.time_s, cfg.target, cfg.max_tokens)
        if cfg.run_id is None:
            cfg.run_id = self._broadcast(new_run_id(cfg) if self.rank == 0 else None)
        self.record = new_record(cfg, self.world, self.device, backend, peak_flops(self.device))
        # timed steps must run at the allocator's defaults (issue 19): what the process started with, {} if so
        self.record["env"]["allocator"] = allocator_settings()
        self.ledger = CommLedger()
        self.ctx = Context(cfg, self.rank, self.world, self.device, self.ledger)
        method_params, self.optimizer_params = split_variant(cfg)
        self.strategy = get_strategy(cfg, method_params)
        self.strategy.check(self.world)

    def _device(self) -> torch.device:
        if self.cfg.device == "cuda":
            local = int(os.environ.get("LOCAL_RANK", 0))
            torch.cuda.set_device(local)
            return torch.device("cuda", local)
        return torch.device("cpu")

    def model_scope(self) -> AbstractContextManager:
        """Where the model and its optimizer are built; the estimator (suite/estimate) makes them fake here."""
        return nullcontext()

    def _broadcast(self, value):
        box = [value]
        dist.broadcast_object_list(box, src=0, group=self.control)
        return box[0]

    # ---- set-up -------------------------------------------------------------------------------
    def build(self) -> None:
        cfg = self.cfg
        kind = models.kind_of(cfg.model)
        data_name = cfg.data or data_lib.default_data_for(kind)
        self.data = data_lib.load_data(data_name, cfg.data_root)
        self.task = Task(cfg, kind, self.data)
        overrides = _model_overrides(cfg, kind, self.data)
        self.strategy.setup(self.ctx)
        torch.manual_seed(cfg.seed)
        full_params: list[int] = []
        start = load_state(cfg.init_from, cfg.model, overrides) if cfg.init_from else None

        def make_model() -> nn.Module:
            m = models.build_model(cfg.model, **overrides)
            full_params.append(models.num_params(m))
            if start is not None:  # before the strategy shards or wraps it: every method starts from these weights
                m.load_state_dict(start)
            return m

        with self.model_scope():
            self.model = self.strategy.build(make_model, self.ctx)
            optimizer = get_spec(cfg.optimizer).build(self.model, cfg, self.ctx, self.optimizer_params)
            self.optimizer = self.strategy.wrap_optimizer(optimizer, self.ctx)
            self.scaler = self.strategy.grad_scaler(self.ctx)
            self.skipped_steps = 0
            self.spent = 0.0  # fraction of the budget used, which a cosine schedule follows
            self.schedule = lr_schedule(self.optimizer, cfg, lambda: self.spent)
        self.metering = Metering(meters_for(self._meter_context()))
        self.replica, self.replicas = self.strategy.data_replica(self.ctx)
        self.global_rows = self.replicas * cfg.micro_batch * cfg.grad_accum
        self.step_tokens = self.global_rows * self.task.tokens_per_sequence()
        rec = self.record
        rec["baseline"] = self.strategy.baseline
        # composition options are part of the arm: ddp and ddp+ac are different arms of a comparison
        # and so is the optimizer with its parameters (declared defaults filled in: suite.params)
        rec["variant"] = {
            **self.strategy.variant,
            "ac": cfg.ac,
            "precision": cfg.precision,
            "optimizer": cfg.optimizer,
            **self.optimizer_params,
        }
        rec["model"] = {
            "name": cfg.model,
            "params": full_params[0] if full_params else 0,
            "config": models.model_config(cfg.model, **overrides),
        }
        rec["data"] = {
            **self.data.describe(),
            "name": data_name,
            "source": self.data.source,
            "seed": cfg.seed,
            "sampling": "global batch drawn from (seed, step); replica r reads rows "
            "[m*R*mb + r*mb, +mb) of micro-step m",
        }
        rec["parallel"].update(self.strategy.describe(self.ctx))
        rec["parallel"].update(
            {
                "global_batch_tokens": self.step_tokens,
                "global_batch_sequences": self.global_rows,
                "data_replicas": self.replicas,
                "groups": self.ctx.groups,
            }
        )
        rec["optimizer"] = {
            "name": cfg.optimizer,
            "params": self.optimizer_params,
            "groups": describe_groups(param_groups(self._plain_model())),
            "outer": [type(o).__name__ for o in self.strategy.optimizers()],
        }
        rec["protocol"] = self.protocol.describe(Progress(0, 0, 0.0, 0.0, None))
        rec["totals"].update(hardware_flops=0, optimizer_flops=0, epochs=0.0)
        rec["faults"] = faults.section(cfg)
        if (note := self.bn_note()) is not None:
            rec["evals"]["bn_statistics"] = note
        if self.rank == 0 and (cfg.checkpoint_every or cfg.max_restarts):
            ckpt.write_config(cfg)
        self.timing["setup_s"] = time.time() - self.started

    # ---- one step ----------------------------------------------------------------------------------
    def train_step(self, step: int, clock: StepClock) -> torch.Tensor:
        """One step, each phase timed apart; returns the loss as a tensor (no device sync here)."""
        cfg = self.cfg
        losses = []
        with clock.phase("forward_backward"):
            for micro in range(cfg.grad_accum):
                last = micro == cfg.grad_accum - 1
                start = micro * self.replicas * cfg.micro_batch + self.replica * cfg.micro_batch
                x, y = self.task.batch(step, self.global_rows, start, cfg.micro_batch, self.device)
                with self.strategy.micro_step(self.model, last):
                    losses.append(self.strategy.forward_backward(self.model, x, y, self._loss, self._backward))
        with clock.phase("aggregation"):
            self.strategy.after_backward(self.model, self.ctx)
        with clock.phase("optimizer"):
            if self.scaler is not None:
                self.scaler.unscale_(self.optimizer)  # clipping sees the true gradients
            if cfg.grad_clip > 0:
                self.strategy.clip_grad_norm(self.model, cfg.grad_clip, self.ctx)
            if self.scaler is not None:
                scale = self.scaler.get_scale()
                self.scaler.step(self.optimizer)  # skipped when a gradient is not finite
                self.scaler.update()
                self.skipped_steps += self.scaler.get_scale() < scale  # the scale backs off only then
            else:
                self.optimizer.step()
            self.schedule.step()
            self.optimizer.zero_grad(set_to_none=True)
        with clock.phase("after_step"):
            self.strategy.after_step(self.model, step, self.ctx)
        return torch.stack(losses).sum() if len(losses) > 1 else losses[0]

    def _loss(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """One micro-batch's loss under the strategy's autocast, over the accumulation steps."""
        with self.strategy.autocast(self.ctx):
            return self.task.loss(model, x, y) / self.cfg.grad_accum

    def _backward(self, loss: torch.Tensor) -> None:
        (loss if self.scaler is None else self.scaler.scale(loss)).backward()

    # One BatchNorm rule for every arm (issue 25 item 15): before every evaluation (validation loss, top-1, a saved
    # model) the evaluated network's BatchNorm statistics are recomputed over the same batches, whatever the arm.
    # Keeping the running statistics instead is not possible for every arm: an assembled SDP model has none of its
    # own network (each worker's were taken on its subnetwork's activations), and after a short run DDP's are
    # mostly those of the networks of its first steps (momentum 0.1: after 10 steps 35% of their weight is still
    # the initial 0 and 1). Recomputing gives each arm the statistics of the very network it is judged on, as after
    # SWA's weight averaging; judging DDP on stale running statistics and SDP on recomputed ones (as before) made
    # their accuracies incomparable (top-1 0.108 against 0.689 after 10 steps).
    def bn_note(self) -> str | None:
        """What the record says about BatchNorm at evaluation (`evals.bn_statistics`), None without BatchNorm."""
        if not any(_tracks_stats(m) for m in self._plain_model().modules()):
            return None
        n, rows = self.cfg.eval_batches, self.cfg.micro_batch
        return (
            f"recomputed on the evaluated network before every evaluation, for every arm alike, over {n} training "
            f"batches of {rows} rows (this rank's rows of steps 0 to {n - 1}; torch.optim.swa_utils.update_bn); "
            "the trained model keeps its running statistics"
        )

    @contextmanager
    def evaluation_model(self) -> Iterator[nn.Module]:
        """The model to evaluate (the strategy's: SDP assembles the full model from its holders, DDP gives its
        module), its BatchNorm statistics recomputed by the one rule above over `eval_batches` of this rank's
        training batches. A network that is the trained one gets its running statistics back on leaving, so an
        evaluation never changes the training state (DDP broadcasts buffers; SDP compares holders' tensors)."""
        model = self.strategy.eval_model(self.model)
        norms = [m for m in model.modules() if _tracks_stats(m)]
        kept = [{k: t.clone() for k, t in m.named_buffers(recurse=False) if t is not None} for m in norms]
        if norms:
            rows = self.cfg.micro_batch
            with torch.no_grad():
                inputs = [
                    self.task.batch(s, self.global_rows, self.replica * rows, rows, self.device)[0]
                    for s in range(self.cfg.eval_batches)
                ]
                with self.strategy.autocast(self.ctx):
                    update_bn(inputs, model)
        try:
            yield model
        finally:
            with torch.no_grad():
                for m, buffers in zip(norms, kept, strict=True):
                    for k, t in buffers.items():
                        getattr(m, k).copy_(t)

    @torch.no_grad()
    def evaluate(self) -> float:
        """Rank 0's validation loss, on every rank (the others compute it too only where the forward needs them)."""
        start = time.perf_counter()
        losses = []
        alone = not self.strategy.eval_on_every_rank
        with self.evaluation_model() as model:
            if self.rank == 0 or not alone:
                model.eval()
                for x, y in self.task.val_batches():
                    with self.strategy.autocast(self.ctx):
                        losses.append(self.task.loss(model, x.to(self.device), y.to(self.device)).item())
                model.train()
        value = sum(losses) / len(losses) if losses else 0.0
        if alone and self.world > 1:
            sent = torch.tensor([value], dtype=torch.float64)  # a Python float is a double: sent exactly
            dist.broadcast(sent, src=0, group=self.control)
            value = sent.item()
        self.timing["eval_s"] += time.perf_counter() - start
        return value

    def _mean(self, value: float) -> float:
        t = torch.tensor([value], dtype=torch.float64)
        dist.all_reduce(t, group=self.control)
        return t.item() / self.world

    # ---- the loop ----------------------------------------------------------------------------------
    def _meter_context(self) -> MeterContext:
        return MeterContext(
            self.cfg,
            self.strategy.comm_period,
            self.device,
            self.ledger,
            lambda: self.model,
            lambda: [self.optimizer, *self.strategy.optimizers()],
        )

    def metered_step(self, step: int, clock: StepClock) -> torch.Tensor:
        """One step inside the meters that run on it (the loop and the estimator both step through here)."""
        with self.metering.step(step):
            return self.train_step(step, clock)

    def run(self) -> None:
        cfg = self.cfg
        clock = StepClock(self.device, cfg.clock_warmup, self.strategy.comm_period)
        at = self._resume(clock) if self._resuming() else Position()
        self._write()
        next_checkpoint = at.step + cfg.checkpoint_every
        while True:
            if self.resumed_from is None and faults.restart_count() == 0:
                faults.inject(cfg, self.rank, at.step)
            with clock.step(at.step, self.step_tokens, on_clock=not self.metering.active(at.step)):
                loss = self.metered_step(at.step, clock)
            if (flops := self.metering.meter("flops")) and at.step in flops.steps():
                at.flops_per_step = self._sum_flops(flops.local())
            at.step += 1
            at.tokens += self.step_tokens
            faults.note_progress(self.record["faults"], at.step)
            evaluate = at.step % cfg.eval_every == 0
            val_loss = self.evaluate() if evaluate else None
            train_loss = self._mean(loss.item())  # every step: a non-finite loss ends the run where it appears
            progress = Progress(at.step, at.tokens, at.step * at.flops_per_step, clock.elapsed, val_loss)
            self.spent = self.protocol.fraction(progress)
            diverged = not math.isfinite(train_loss) or (val_loss is not None and not math.isfinite(val_loss))
            stop, diverged = self._broadcast((self.protocol.done(progress), diverged) if self.rank == 0 else None)
            if stop and val_loss is None and not diverged:
                progress = dataclasses.replace(progress, val_loss=self.evaluate())
            if evaluate or stop or diverged or at.step % cfg.log_every == 0 or at.step == 1:
                self._log(progress, train_loss, clock)
            if diverged:
                self._close(progress, clock, at.flops_per_step, diverged=(train_loss, progress.val_loss))
                return
            if cfg.checkpoint and cfg.save_every and at.step % cfg.save_every == 0:
                with self.evaluation_model() as model:
                    self._save_model(trajectory_path(cfg.checkpoint, at.step), model)
            if stop:
                break
            if cfg.checkpoint_every and at.step >= next_checkpoint and not self.metering.straddles(at.step):
                self._checkpoint(at, clock)
                next_checkpoint = at.step + cfg.checkpoint_every
            elif evaluate:
                self._write()
        start = time.perf_counter()
        self._final_evals()
        self.timing["final_evals_s"] = time.perf_counter() - start
        self._close(progress, clock, at.flops_per_step)

    # ---- checkpoints and faults (suite/run/checkpoint.py) ----------------------------------------------------
    def _resuming(self) -> bool:
        return (self.cfg.resume or faults.restart_count() > 0) and ckpt.latest(ckpt.run_folder(self.cfg)) is not None

    def _checkpoint(self, at: Position, clock: StepClock) -> None:
        """Save every rank's state after `at.step` steps, then the record (which names the checkpoint)."""
        start = time.perf_counter()
        loop = {
            **dataclasses.asdict(at),
            "spent": self.spent,
            "clock": clock.state(),
            "record": self.record if self.rank == 0 else None,
        }
        section = self.record["faults"]
        section["checkpoints_written"] += 1  # before saving: the record kept in the checkpoint counts it
        ckpt.save(self._run_state(), at.step, loop)
        section["checkpoint_s"] += time.perf_counter() - start
        self._write()

    def _resume(self, clock: StepClock) -> Position:
        """Continue from the newest checkpoint: every rank's state, the clock, the meters and the partial record."""
        path = self._intact_checkpoint()
        self._settle_wrappers()
        loop = ckpt.load(self._run_state(), path)
        at = Position(loop["step"], loop["tokens"], loop["flops_per_step"])
        self.spent = loop["spent"]
        clock.restore(loop["clock"])
        self.metering.restore(loop["meters"], at.step)
        self.resumed_from = at.step
        if self.rank == 0:
            self.record = {**loop["record"], "error": None}
            faults.note_resume(self.cfg, self.record["faults"], at.step, self.started)
            self.record["faults"]["resumes"][-1]["refused_checkpoints"] = self.refused_checkpoints
        return at

    def _run_state(self) -> ckpt.RunState:
        return ckpt.RunState(
            folder=ckpt.run_folder(self.cfg),
            model=self.model,
            optimizers=[self.optimizer, *self.strategy.optimizers()],
            strategy=self.strategy,
            schedule=self.schedule,
            metering=self.metering,
            rank=self.rank,
            world=self.world,
            group=self.control,
            device=self.device,
        )

    def _intact_checkpoint(self) -> Path:
        """The newest checkpoint whose checksums hold (rank 0 verifies; every rank loads the same one)."""
        folder = ckpt.run_folder(self.cfg)
        path, refused = self._broadcast(ckpt.newest_intact(folder) if self.rank == 0 else None)
        if self.rank == 0:
            for why in refused:
                print(f"refused checkpoint {why}", file=sys.stderr, flush=True)
        if path is None:
            raise ckpt.CheckpointError(f"no intact checkpoint in {folder}: {'; '.join(refused)}")
        if refused and self.rank == 0:
            print(f"resuming from the previous intact checkpoint, {path.name}", file=sys.stderr, flush=True)
        self.refused_checkpoints = refused
        return path

    def _settle_wrappers(self) -> None:
        """One forward and backward whose gradients are thrown away, before the checkpoint is loaded over them.

        Wrappers tune themselves on their first steps: DDP rebuilds its buckets in the order gradients became
        ready, and gloo's ring sums each element in an order set by its place in a bucket. A resumed run whose
        first step ran on the initial buckets drifted in the last bits at 3 workers; after this step its
        buckets are those of the uninterrupted run.
        """
        x, y = self.task.batch(
            0, self.global_rows, self.replica * self.cfg.micro_batch, self.cfg.micro_batch, self.device
        )
        with self.strategy.micro_step(self.model, True), self.strategy.autocast(self.ctx):
            loss = self.task.loss(self.model, x, y)
        loss.backward()
        self.model.zero_grad(set_to_none=True)

    def _final_evals(self) -> None:
        """Checkpoint and downstream scores of the evaluation model, off the clock and off the ledger."""
        cfg = self.cfg
        names = [n for n in cfg.evals.split(",") if n]
        image = self.task.kind == "image"
        if not (names or image or cfg.checkpoint):
            return
        with self.evaluation_model() as model:
            if cfg.checkpoint:
                self._save_model(cfg.checkpoint, model)
            if not (names or image):
                return
            state = full_state(model)  # a collective under FSDP2: every rank takes part
            if self.rank != 0:
                return
            # inside: the state may share the evaluated model's buffers, which are restored on leaving
            plain = plain_model(cfg.model, self.record["model"]["config"], state, self.device)
        if names:
            limit = None if cfg.eval_limit is None else int(cfg.eval_limit)
            self.record["evals"].update(run_evals(plain, names, self.device, limit=limit, seed=cfg.seed))
        if image:
            self.record["evals"]["top1"] = image_accuracy(plain, self.data, self.device)

    def _save_model(self, path: str | Path, model: nn.Module) -> None:
        """The evaluation model's full weights to `path` (a collective under FSDP2: every rank calls it)."""
        config, data = self.record["model"]["config"], self.record["data"]["name"]
        save_checkpoint(model, path, self.cfg.model, config, data=data)

    def _plain_model(self) -> nn.Module:
        return getattr(self.model, "module", self.model)

    def _sum_flops(self, counted: dict | None) -> float:
        """Model FLOPs of one step over all ranks, as soon as they are counted (an equal-FLOPs budget needs them)."""
        t = torch.tensor([float((counted or {"model": 0})["model"])], dtype=torch.float64)
        dist.all_reduce(t, group=self.control)
        return t.item()

    def _log(self, p: Progress, train_loss: float, clock: StepClock) -> None:
        self.record["curve"].append(
            {
                "step": p.step,
                "tokens": p.tokens,
                "flops": p.flops,
                "wall_s": p.wall_s,
                "train_loss": _finite_or_none(train_loss),
                "val_loss": _finite_or_none(p.val_loss),
            }
        )
        if self.rank != 0:
            return
        tps = clock.tokens_per_s()
        frac = self.protocol.fraction(p)
        eta = p.wall_s / frac - p.wall_s if frac > 0 and self.protocol.kind != "target" else float("nan")
        unit = self.task.unit
        parts = [
            f"step {p.step}",
            f"{self.protocol.kind} {100 * frac:5.1f}%",
            f"{unit} {p.tokens:,}",
            f"loss {train_loss:.4f}",
        ]
        if p.val_loss is not None:
            parts.append(f"val {p.val_loss:.4f}")
        if tps:
            parts.append(f"{tps:,.0f} {unit}/s")
        if not math.isnan(eta):
            parts.append(f"eta {eta:.0f}s")
        print(" | ".join(parts), file=sys.stderr, flush=True)

    def _gather(self, obj) -> list:
        out = [None] * self.world
        dist.all_gather_object(out, obj, group=self.control)
        return out

    def _close(self, p: Progress, clock: StepClock, flops_per_step: float, diverged: tuple | None = None) -> None:
        """The record of a run that ended: `complete`, or `diverged` with its (train, val) losses at the step
        a non-finite one appeared (its curve ends there, non-finite values as null)."""
        rec = self.record
        if diverged is not None:
            p = dataclasses.replace(p, val_loss=_finite_or_none(p.val_loss))
        results = self._gather(self.metering.results())
        rec["totals"] = {
            "steps": p.step,
            "tokens": p.tokens,
            "flops": 0,
            "hardware_flops": 0,
            "optimizer_flops": 0,
            "wall_s": clock.elapsed,
            "epochs": data_lib.epochs_seen(p.tokens, rec["data"]),
        }
        rec["protocol"] = self.protocol.describe(p)
        write_sections(self.metering.types(), dict(enumerate(results)), rec)
        tps = clock.tokens_per_s()
        peak = rec["env"]["peak_flops"]
        step_s = clock.step_s()
        rec["throughput"] = {
            "tokens_per_s": tps,
            "samples_per_s": tps / self.task.tokens_per_sequence() if tps else None,
            "step_s": step_s,
            "step_s_median": clock.median_step_s(),
            "timed_steps": clock.timed_steps,
            "period": clock.period,
            "whole_periods": clock.whole_periods(),
            "phases_s_median": clock.phase_medians(),
            **clock.cpu_summary(self.control),
            "method": "wall-clock of timed steps (after warm-up, metered steps and evaluation excluded), over "
            "whole periods of the method's pattern; step_s_median: the median over periods of their mean step; "
            "phases: medians of forward+backward, gradient aggregation no wrapper does, optimizer step "
            "(clipping included) and after-step work",
            "mfu": (flops_per_step / step_s) / (peak * self.world) if peak and step_s and flops_per_step else None,
        }
        if self.scaler is not None:
            rec["precision"] = {
                "loss_scale": self.scaler.get_scale(),
                "skipped_steps": self.skipped_steps,
                "method": "torch.amp.GradScaler: loss scaled before backward, gradients unscaled before clipping, "
                "a step with non-finite gradients skipped and the scale halved",
            }
        rec["timing"] = self._timing(clock)
        rec["status"] = "complete" if diverged is None else "diverged"
        if diverged is not None:
            train, val = diverged
            rec["error"] = (
                f"diverged: the loss became non-finite at step {p.step} (train loss {train:g}"
                + (f", validation loss {val:g})" if val is not None else ")")
                + "; lower --set lr or raise warmup_steps"
            )
        self._write()

    def _timing(self, clock: StepClock) -> dict:
        """Where this attempt's wall time went on rank 0, for the plan's breakdown (suite/timing.py)."""
        steps = clock.split_s() if self.resumed_from is None else None  # a resumed clock holds earlier attempts'
        return {
            **self.timing,
            "steps_s": steps,
            "run_s": time.time() - self.started,
            "load_average": [self.load_start, load_average()],
            "method": "wall seconds on rank 0 of this attempt: before_s in the worker process before the run "
            "(start-up and imports, or the hand-over from the previous run of a multi-run worker), setup_s "
            "(process groups, data, model, optimizer, meters), steps_s (timed, metered off the clock, warm-up), "
            "eval_s (periodic validation), final_evals_s (downstream scores, checkpoint), run_s (set-up to "
            "record, all of the above but before_s); load_average: the machine's 1-minute load average at set-up "
            "and at the record (os.getloadavg), the condition every time in the record was measured under",
        }

    def _write(self) -> None:
        if self.rank == 0:
            write_record(self.record, self.cfg.record_path())

    def _keep_written_record(self) -> None:
        """A resume that failed before it restored the record keeps the record it was resuming."""
        try:
            self.record = read_record(self.cfg.record_path())
        except (RecordError, OSError):
            pass

    def fail(self, err: BaseException) -> None:
        """Rank 0 records how the run ended; other ranks leave that to it (or to the launcher)."""
        resumable = ckpt.newest_intact(ckpt.run_folder(self.cfg))[0] is not None
        if self._resuming() and self.resumed_from is None:
            self._keep_written_record()
        self.record["status"] = "incomplete" if resumable or isinstance(err, KeyboardInterrupt) else "failed"
        self.record["error"] = faults.failure_text(err, self.cfg)
        try:
            self._write()
        except Exception as write_err:  # the original error matters more than this one
            print(f"could not write the record: {write_err}", file=sys.stderr)


def _tracks_stats(module: nn.Module) -> bool:
    return isinstance(module, nn.modules.batchnorm._BatchNorm) and module.track_running_stats


def _finite_or_none(value: float | None) -> float | None:
    """JSON has no NaN or Infinity: a diverged run's non-finite losses are recorded as null."""
    return value if value is not None and math.isfinite(value) else None


def train(cfg: RunConfig, store: dict | None = None, since: float | None = None) -> Path:
    """Run one training run in this worker process; returns the record's path.

    `store`: init_process_group's store arguments for a world of this run's own (suite/plan/multirun.py); `since`:
    when this process became free for the run (its start by default), for the record's timing."""
    worker = Worker(cfg, store)
    if since is not None:
        worker.timing["before_s"] = worker.started - since
    try:
        worker.build()
        worker.run()
    except BaseException as err:
        worker.fail(err)
        raise
    finally:
        del worker
        _end_process_groups()
    return cfg.record_path()


def _end_process_groups() -> None:
    """Destroy the process groups and end gloo's threads while the interpreter is still whole (issue 32).

    destroy_process_group() only unregisters the groups: a gloo group's threads run until its last reference
    goes, and the worker's references sit in cycles (the meters' closures hold the worker) that only the cycle
    collector frees, so they were alive as the interpreter exited. A gloo thread that drops the last reference
    to a tensor Python has let go takes the GIL to free its Python object (torch's PyInterpreter decref); if
    finalization starts while it waits, Python ends that thread inside the tensor's noexcept destructor and the
    process aborts. Collecting here joins those threads first.
    """
    if dist.is_initialized():
        dist.destroy_process_group()
    gc.collect()
