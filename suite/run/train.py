"""The one training loop: a Worker that steps the pieces of a built run and says when to evaluate, checkpoint,
log and stop.

Runs inside each worker started by `suite.run.launch` (or by a user's own torchrun). The pieces around the
loop are modules of their own: building (suite/run/build.py), evaluation (suite/run/evaluate.py), checkpoints
(suite/run/resume.py over suite/run/checkpoint.py) and the record (suite/run/close.py over
suite/run/recorder.py). Rank 0 writes the record: `incomplete` at start and after every evaluation and
checkpoint, `complete` at the end; when the run dies, `incomplete` with the error if a checkpoint can resume
it, else `failed`. Meters run on a few steps each, off the clock (suite/meters/schedule.py); the ledger sees
training steps only, never the loop's control messages or evaluation.
"""

from __future__ import annotations

import dataclasses
import gc
import math
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from suite.config import RunConfig
from suite.evals.model_file import trajectory_path
from suite.meters import comm_check
from suite.meters.clock import StepClock, peak_flops
from suite.meters.comm import CommLedger
from suite.run import checkpoint as ckpt
from suite.run import emulate, faults, reserve
from suite.run.build import build_parts, describe_build, device_for
from suite.run.close import Recorder, Timing
from suite.run.evaluate import Evaluator
from suite.run.optim import split_variant
from suite.run.protocols import Progress, from_args
from suite.run.recorder import new_record, new_run_id
from suite.run.resume import Checkpoints, Position, resuming
from suite.run.strategy import Context, get_strategy
from suite.run.world import destroy_world


class Worker:
    """One rank's run: joins the process groups, builds the run, and steps it until the budget is spent."""

    def __init__(self, cfg: RunConfig, store: dict | None = None, since: float | None = None) -> None:
        """`store`: init_process_group's store arguments; `since`: when the process became free for this run."""
        self.cfg = cfg
        self.timing = Timing(since)
        self.resumed_from: int | None = None
        self.spent = 0.0  # fraction of the budget used, which a cosine schedule follows
        self.skipped_steps = 0  # steps the loss scaler skipped (a gradient not finite)
        self.device = device_for(cfg)
        if emulate.active():
            backend = emulate.BACKEND
        else:
            backend = "nccl" if self.device.type == "cuda" else comm_check.register() if cfg.comm_check else "gloo"
        timeout = faults.set_collective_timeout(cfg.collective_timeout_s)
        if not dist.is_initialized():
            device_id = self.device if self.device.type == "cuda" else None
            meet = store or faults.attempt_store(timeout)
            dist.init_process_group(backend, device_id=device_id, timeout=timeout, **meet)
        faults.rendezvous_done()
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        # a separate group for the loop's own control messages keeps them out of the ledger's groups
        self.control = dist.new_group(backend=emulate.cpu_backend())
        self.protocol = from_args(cfg.tokens, cfg.flops, cfg.time_s, cfg.target, cfg.max_tokens)
        if cfg.run_id is None:
            cfg.run_id = self._broadcast(new_run_id(cfg) if self.rank == 0 else None)
        record = new_record(cfg, self.world, self.device, backend, peak_flops(self.device))
        self.recorder = Recorder(cfg, record, self.rank, self.control, self.protocol, self.timing)
        self.ledger = CommLedger()
        self.ctx = Context(cfg, self.rank, self.world, self.device, self.ledger)
        method_params, self.optimizer_params = split_variant(cfg)
        self.strategy = get_strategy(cfg, method_params)
        self.strategy.check(self.world)

    def model_scope(self) -> AbstractContextManager:
        """Where the model and its optimizer are built; the estimator (suite/estimate) makes them fake here."""
        return nullcontext()

    def build(self) -> None:
        """The run's pieces, described in the record, with their evaluator and checkpoints; set-up ends here."""
        cfg, record = self.cfg, self.recorder.record
        scope = self.model_scope()
        self.parts = build_parts(cfg, self.strategy, self.ctx, self.optimizer_params, scope, lambda: self.spent)
        self.evaluator = Evaluator(self.parts, self.strategy, self.ctx, self.control, record, self.timing)
        note = self.evaluator.bn_note()
        describe_build(record, self.parts, self.strategy, self.ctx, self.optimizer_params, self.protocol, note)
        self.checkpoints = Checkpoints(self.parts, self.strategy, self.ctx, self.control, record)
        if self.rank == 0 and (cfg.checkpoint_every or cfg.max_restarts):
            ckpt.write_config(cfg)  # what `run --resume` and torchrun's restarts start from
        self.timing.end_setup()

    # ---- one step ----------------------------------------------------------------------------------
    def train_step(self, step: int, clock: StepClock) -> torch.Tensor:
        """One step, each phase timed apart; returns the loss as a tensor (no device sync here)."""
        cfg, parts = self.cfg, self.parts
        losses = []
        with clock.phase("forward_backward"):
            for micro in range(cfg.grad_accum):
                last = micro == cfg.grad_accum - 1
                start = micro * parts.replicas * cfg.micro_batch + parts.replica * cfg.micro_batch
                x, y = parts.task.batch(step, parts.global_rows, start, cfg.micro_batch, self.device)
                with self.strategy.micro_step(parts.model, last):
                    losses.append(self.strategy.forward_backward(parts.model, x, y, self._loss, self._backward))
        with clock.phase("aggregation"):
            self.strategy.after_backward(parts.model, self.ctx)
        with clock.phase("optimizer"):
            if parts.scaler is not None:
                parts.scaler.unscale_(parts.optimizer)  # clipping sees the true gradients
            if cfg.grad_clip > 0:
                self.strategy.clip_grad_norm(parts.model, cfg.grad_clip, self.ctx)
            if parts.scaler is not None:
                scale = parts.scaler.get_scale()
                parts.scaler.step(parts.optimizer)  # skipped when a gradient is not finite
                parts.scaler.update()
                self.skipped_steps += parts.scaler.get_scale() < scale  # the scale backs off only then
            else:
                parts.optimizer.step()
            parts.schedule.step()
            parts.optimizer.zero_grad(set_to_none=True)
        with clock.phase("after_step"):
            self.strategy.after_step(parts.model, step, self.ctx)
        return torch.stack(losses).sum() if len(losses) > 1 else losses[0]

    def _loss(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """One micro-batch's loss under the strategy's autocast, over the accumulation steps."""
        with self.strategy.autocast(self.ctx):
            return self.parts.task.loss(model, x, y) / self.cfg.grad_accum

    def _backward(self, loss: torch.Tensor) -> None:
        scaler = self.parts.scaler
        (loss if scaler is None else scaler.scale(loss)).backward()

    def metered_step(self, step: int, clock: StepClock) -> torch.Tensor:
        """One step inside the meters that run on it (the loop and the estimator both step through here)."""
        with self.parts.metering.step(step):
            return self.train_step(step, clock)

    # ---- the loop ----------------------------------------------------------------------------------
    def run(self) -> None:
        """Steps from the start or the newest checkpoint until the budget is spent or the loss diverges, then
        closes the record."""
        cfg, parts, recorder = self.cfg, self.parts, self.recorder
        meet = emulate.meeting(cfg.run_id, self.world) if emulate.active() else None
        clock = StepClock(self.device, cfg.clock_warmup, self.strategy.comm_period, meet)
        at = Position()
        if resuming(cfg):
            at, self.spent = self.checkpoints.resume(clock, self.timing.started)
            self.resumed_from = at.step
        recorder.write()
        next_checkpoint = at.step + cfg.checkpoint_every
        while True:
            if self.resumed_from is None and faults.restart_count() == 0:
                faults.inject(cfg, self.rank, at.step)
            with clock.step(at.step, parts.step_tokens, on_clock=not parts.metering.active(at.step)):
                loss = self.metered_step(at.step, clock)
            if (flops := parts.metering.meter("flops")) and at.step in flops.steps():
                at.flops_per_step = self._sum_flops(flops.local())
            at.step += 1
            at.tokens += parts.step_tokens
            faults.note_progress(recorder.record["faults"], at.step)
            evaluate = at.step % cfg.eval_every == 0
            val_loss = self.evaluator.evaluate() if evaluate else None
            train_loss = self._mean(loss.item())  # every step: a non-finite loss ends the run where it appears
            progress = Progress(at.step, at.tokens, at.step * at.flops_per_step, clock.elapsed, val_loss)
            self.spent = self.protocol.fraction(progress)
            diverged = not math.isfinite(train_loss) or (val_loss is not None and not math.isfinite(val_loss))
            stop, diverged = self._broadcast((self.protocol.done(progress), diverged) if self.rank == 0 else None)
            if stop and val_loss is None and not diverged:
                progress = dataclasses.replace(progress, val_loss=self.evaluator.evaluate())
            if evaluate or stop or diverged or at.step % cfg.log_every == 0 or at.step == 1:
                recorder.log(progress, train_loss, clock, parts.task.unit)
            if diverged:
                break
            if cfg.checkpoint and cfg.save_every and at.step % cfg.save_every == 0:
                self.evaluator.save(trajectory_path(cfg.checkpoint, at.step))
            if stop:
                break
            checkpointing = cfg.checkpoint_every and at.step >= next_checkpoint
            if checkpointing and not parts.metering.straddles(at.step):
                self.checkpoints.save(at, self.spent, clock)
                next_checkpoint = at.step + cfg.checkpoint_every
                recorder.write()  # which names the checkpoint
            elif evaluate:
                recorder.write()
        if not diverged:  # a diverged run's curve ends where the loss became non-finite
            self.evaluator.final_evals()
        recorder.close(
            progress,
            clock,
            parts,
            flops_per_step=at.flops_per_step,
            skipped_steps=self.skipped_steps,
            resumed=self.resumed_from is not None,
            diverged=(train_loss, progress.val_loss) if diverged else None,
        )

    # ---- the loop's own control messages (off the ledger) ---------------------------------------------------
    def _broadcast(self, value):
        box = [value]
        dist.broadcast_object_list(box, src=0, group=self.control)
        return box[0]

    def _mean(self, value: float) -> float:
        t = torch.tensor([value], dtype=torch.float64)
        dist.all_reduce(t, group=self.control)
        return t.item() / self.world

    def _sum_flops(self, counted: dict | None) -> float:
        """Model FLOPs of one step over all ranks, as soon as they are counted (an equal-FLOPs budget needs them)."""
        t = torch.tensor([float((counted or {"model": 0})["model"])], dtype=torch.float64)
        dist.all_reduce(t, group=self.control)
        return t.item()


def train(cfg: RunConfig, store: dict | None = None, since: float | None = None) -> Path:
    """Run one training run in this worker process; returns the record's path.

    `store`: init_process_group's store arguments for a world of this run's own (suite/plan/multirun.py); `since`:
    when this process became free for the run (its start by default), for the record's timing."""
    worker = Worker(cfg, store, since)
    first = worker.rank == 0
    if first:  # room for the record's last write, freed by it or here (suite/run/reserve.py)
        reserve.hold(cfg.record_path())
    try:
        worker.build()
        worker.run()
    except BaseException as err:
        worker.recorder.fail(err, resumed=worker.resumed_from is not None)
        raise
    finally:
        del worker
        if first:
            reserve.release(cfg.record_path())
        _end_process_groups()
    return cfg.record_path()


def _end_process_groups() -> None:
    """Destroy the process groups and end gloo's threads while the interpreter is still whole (issue 32).

    destroy_process_group() only unregisters the groups: a gloo group's threads run until its last reference
    goes, and the worker's references sit in cycles (the meters' closures hold the worker) that only the cycle
    collector frees, so they were alive as the interpreter exited. A gloo thread that drops the last reference
    to a tensor Python has let go takes the GIL to free its Python object (torch's PyInterpreter decref); if
    finalization starts while it waits, Python ends that thread inside the tensor's noexcept destructor and the
    process aborts. Collecting here joins those threads first. DTensor's cached plans go with the groups
    (suite/run/world.py). Logical workers have no gloo threads, and each collection walks every worker's objects
    (128 workers: half a short run's time), so the emulator collects once, after its last worker.
    """
    destroy_world()
    if not emulate.active():
        gc.collect()
