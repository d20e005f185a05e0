"""The training loop's side of checkpoints: when a run resumes, what of the loop a checkpoint keeps beside the
RunState (the loop's position, the clock, the budget spent, rank 0's partial record), and putting it back.

suite/run/checkpoint.py writes and reads checkpoints of a RunState and knows nothing of the loop; the Worker
(suite/run/train.py) asks this module for a checkpoint or a resume and knows nothing of how they are kept.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch.distributed as dist

from suite.config import RunConfig
from suite.meters.clock import StepClock
from suite.run import checkpoint as ckpt
from suite.run import faults
from suite.run.strategy import Context, Strategy

if TYPE_CHECKING:
    from suite.run.build import Parts


@dataclasses.dataclass
class Position:
    """Where the loop stands: steps done, tokens seen, and one step's model FLOPs once counted."""

    step: int = 0
    tokens: int = 0
    flops_per_step: float = 0.0


def resuming(cfg: RunConfig) -> bool:
    """Whether this attempt continues from a checkpoint: asked to (--resume), or restarted by torchrun."""
    return (cfg.resume or faults.restart_count() > 0) and ckpt.latest(ckpt.run_folder(cfg)) is not None


class Checkpoints:
    """One rank's checkpoints of a built run; every rank calls `save` and `resume` together (collectives on
    `group`, the loop's own gloo group)."""

    def __init__(self, parts: Parts, strategy: Strategy, ctx: Context, group: dist.ProcessGroup, record: dict) -> None:
        self.parts, self.strategy, self.ctx, self.group, self.record = parts, strategy, ctx, group, record
        self.folder = ckpt.run_folder(ctx.cfg)

    def _state(self) -> ckpt.RunState:
        """What a checkpoint keeps of this rank, the strategy's optimizers as it lists them at the time."""
        return ckpt.RunState(
            folder=self.folder,
            model=self.parts.model,
            optimizers=[self.parts.optimizer, *self.strategy.optimizers()],
            strategy=self.strategy,
            schedule=self.parts.schedule,
            metering=self.parts.metering,
            rank=self.ctx.rank,
            world=self.ctx.world_size,
            group=self.group,
            device=self.ctx.device,
        )

    def save(self, at: Position, spent: float, clock: StepClock) -> None:
        """Every rank's state after `at.step` steps; the record (which the caller writes next) counts it."""
        start = time.perf_counter()
        loop = {
            **dataclasses.asdict(at),
            "spent": spent,
            "clock": clock.state(),
            "record": self.record if self.ctx.rank == 0 else None,
        }
        section = self.record["faults"]
        section["checkpoints_written"] += 1  # before saving: the record kept in the checkpoint counts it
        ckpt.save(self._state(), at.step, loop)
        section["checkpoint_s"] += time.perf_counter() - start

    def resume(self, clock: StepClock, started: float) -> tuple[Position, float]:
        """Continue from the newest intact checkpoint: every rank's state, the clock, the meters and rank 0's
        partial record (noted as a resume of an attempt that `started`); returns the position and budget spent."""
        path, refused = self._intact()
        self._settle_wrappers()
        loop = ckpt.load(self._state(), path)
        at = Position(loop["step"], loop["tokens"], loop["flops_per_step"])
        clock.restore(loop["clock"])
        self.parts.metering.restore(loop["meters"], at.step)
        if self.ctx.rank == 0:
            # in place: the evaluator and the recorder hold this record
            self.record.clear()
            self.record.update({**loop["record"], "error": None})
            faults.note_resume(self.ctx.cfg, self.record["faults"], at.step, started)
            self.record["faults"]["resumes"][-1]["refused_checkpoints"] = refused
        return at, loop["spent"]

    def _intact(self) -> tuple[Path, list[str]]:
        """The newest checkpoint whose checksums hold (rank 0 verifies; every rank loads the same one), and why
        each newer one was refused."""
        box = [ckpt.newest_intact(self.folder) if self.ctx.rank == 0 else None]
        dist.broadcast_object_list(box, src=0, group=self.group)
        path, refused = box[0]
        if self.ctx.rank == 0:
            for why in refused:
                print(f"refused checkpoint {why}", file=sys.stderr, flush=True)
        if path is None:
            raise ckpt.CheckpointError(f"no intact checkpoint in {self.folder}: {'; '.join(refused)}")
        if refused and self.ctx.rank == 0:
            print(f"resuming from the previous intact checkpoint, {path.name}", file=sys.stderr, flush=True)
        return path, refused

    def _settle_wrappers(self) -> None:
        """One forward and backward whose gradients are thrown away, before the checkpoint is loaded over them.

        Wrappers tune themselves on their first steps: DDP rebuilds its buckets in the order gradients became
        ready, and gloo's ring sums each element in an order set by its place in a bucket. A resumed run whose
        first step ran on the initial buckets drifted in the last bits at 3 workers; after this step its
        buckets are those of the uninterrupted run.
        """
        cfg, parts = self.ctx.cfg, self.parts
        x, y = parts.task.batch(0, parts.global_rows, parts.replica * cfg.micro_batch, cfg.micro_batch, self.ctx.device)
        with self.strategy.micro_step(parts.model, True), self.strategy.autocast(self.ctx):
            loss = parts.task.loss(parts.model, x, y)
        loss.backward()
        parts.model.zero_grad(set_to_none=True)
