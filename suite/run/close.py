"""A running Worker's record: its curve, the attempt's timing, and how the run ended.

suite/run/recorder.py makes the record; this module keeps it through the loop and closes it (`complete`,
`diverged`, or `incomplete`/`failed` with the error). It is apart from recorder.py because closing needs the
loop's clock, meters and checkpoints, which the launcher (which writes a failed record with recorder.py) never
loads. Rank 0 writes the record; every rank keeps one and takes part in the collectives that close it.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import psutil
import torch.distributed as dist

from suite import data as data_lib
from suite.config import RunConfig
from suite.meters.base import write_sections
from suite.meters.clock import StepClock
from suite.meters.process import allocator_settings
from suite.records import RecordError, read_record, write_record
from suite.run import checkpoint as ckpt
from suite.run import faults, reserve
from suite.run.protocols import Progress, Protocol
from suite.run.resume import resuming
from suite.timing import load_average

if TYPE_CHECKING:
    from suite.run.build import Parts


def finite_or_none(value: float | None) -> float | None:
    """JSON has no NaN or Infinity: a diverged run's non-finite losses are recorded as null."""
    return value if value is not None and math.isfinite(value) else None


# suite/run/emulate.py Meeting: the workers take turns in one process, so a step is the process's, not a device's
_EMULATED_STEP = (
    "; emulated workers: a step runs from the meeting of every worker at its start to the one at its end, the "
    "whole process's time for all of them (phases are rank 0's own)"
)


class Timing:
    """Where this attempt's wall time went on rank 0: the record's `timing`, for the plan's breakdown
    (suite/timing.py). It starts with the Worker; each phase is added by the code that runs it."""

    def __init__(self, since: float | None = None) -> None:
        """`since`: when the process became free for this run (suite/plan/multirun.py), else its start."""
        self.started = time.time()
        self.load_start = load_average()
        before = psutil.Process().create_time() if since is None else since
        self.seconds: dict[str, float] = {"eval_s": 0.0, "final_evals_s": 0.0, "before_s": self.started - before}

    @contextmanager
    def phase(self, key: str) -> Iterator[None]:
        """Adds the block's wall seconds to `key`."""
        start = time.perf_counter()
        yield
        self.seconds[key] += time.perf_counter() - start

    def end_setup(self) -> None:
        self.seconds["setup_s"] = time.time() - self.started

    def section(self, clock: StepClock, resumed: bool) -> dict:
        steps = None if resumed else clock.split_s()  # a resumed clock holds earlier attempts' steps too
        return {
            **self.seconds,
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


class Recorder:
    """This rank's record of the run: one dict from start to end, changed in place only (a resume's too), since
    the evaluator and the checkpoints hold it as well."""

    def __init__(
        self, cfg: RunConfig, record: dict, rank: int, group: dist.ProcessGroup, protocol: Protocol, timing: Timing
    ) -> None:
        self.cfg, self.record, self.rank, self.group = cfg, record, rank, group
        self.protocol, self.timing = protocol, timing
        # timed steps must run at the allocator's defaults (issue 19): what the process started with, {} if so
        record["env"]["allocator"] = allocator_settings()

    def write(self, last: bool = False) -> None:
        """Rank 0 writes the record; its `last` write may use the room a run keeps for it (suite/run/reserve.py; an
        estimate keeps none)."""
        if self.rank == 0:
            (reserve.write_last if last else write_record)(self.record, self.cfg.record_path())

    def log(self, p: Progress, train_loss: float, clock: StepClock, unit: str) -> None:
        """A point of the curve, and on rank 0 a line of progress on stderr."""
        self.record["curve"].append(
            {
                "step": p.step,
                "tokens": p.tokens,
                "flops": p.flops,
                "wall_s": p.wall_s,
                "train_loss": finite_or_none(train_loss),
                "val_loss": finite_or_none(p.val_loss),
            }
        )
        # an interrupted run's record is written as it stands: its totals keep up with its curve (close sets them all)
        self.record["totals"].update(steps=p.step, tokens=p.tokens)
        if self.rank != 0:
            return
        tps = clock.tokens_per_s()
        frac = self.protocol.fraction(p)
        eta = p.wall_s / frac - p.wall_s if frac > 0 and self.protocol.kind != "target" else float("nan")
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

    def close(
        self,
        p: Progress,
        clock: StepClock,
        parts: Parts,
        *,
        flops_per_step: float,
        skipped_steps: int,
        resumed: bool,
        diverged: tuple[float, float | None] | None = None,
    ) -> None:
        """The record of a run that ended: `complete`, or `diverged` with its (train, val) losses at the step
        a non-finite one appeared (its curve ends there, non-finite values as null). Every rank calls it."""
        rec = self.record
        if diverged is not None:
            p = dataclasses.replace(p, val_loss=finite_or_none(p.val_loss))
        results = [None] * dist.get_world_size(self.group)
        dist.all_gather_object(results, parts.metering.results(), group=self.group)
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
        write_sections(parts.metering.types(), dict(enumerate(results)), rec)
        rec["throughput"] = self._throughput(clock, flops_per_step, parts.task.tokens_per_sequence())
        if parts.scaler is not None:
            rec["precision"] = {
                "loss_scale": parts.scaler.get_scale(),
                "skipped_steps": skipped_steps,
                "method": "torch.amp.GradScaler: loss scaled before backward, gradients unscaled before clipping, "
                "a step with non-finite gradients skipped and the scale halved",
            }
        rec["timing"] = self.timing.section(clock, resumed)
        rec["status"] = "complete" if diverged is None else "diverged"
        if diverged is not None:
            train, val = diverged
            rec["error"] = (
                f"diverged: the loss became non-finite at step {p.step} (train loss {train:g}"
                + (f", validation loss {val:g})" if val is not None else ")")
                + "; lower --set lr or raise warmup_steps"
            )
        self.write(last=True)

    def _throughput(self, clock: StepClock, flops_per_step: float, tokens_per_sequence: int) -> dict:
        """The clock's timed steps (a collective: every rank's CPU time is gathered)."""
        tps = clock.tokens_per_s()
        peak = self.record["env"]["peak_flops"]
        step_s = clock.step_s()
        devices = 1 if self.cfg.emulate else dist.get_world_size(self.group)  # emulated: every worker on one
        return {
            "tokens_per_s": tps,
            "samples_per_s": tps / tokens_per_sequence if tps else None,
            "step_s": step_s,
            "step_s_median": clock.median_step_s(),
            "timed_steps": clock.timed_steps,
            "period": clock.period,
            "whole_periods": clock.whole_periods(),
            "phases_s_median": clock.phase_medians(),
            **clock.cpu_summary(self.group, one_process=self.cfg.emulate),
            "method": "wall-clock of timed steps (after warm-up, metered steps and evaluation excluded), over "
            "whole periods of the method's pattern; step_s_median: the median over periods of their mean step; "
            "phases: medians of forward+backward, gradient aggregation no wrapper does, optimizer step "
            "(clipping included) and after-step work" + (_EMULATED_STEP if self.cfg.emulate else ""),
            "mfu": (flops_per_step / step_s) / (peak * devices) if peak and step_s and flops_per_step else None,
        }

    def fail(self, err: BaseException, resumed: bool) -> None:
        """Rank 0 records how the run ended; other ranks leave that to it (or to the launcher)."""
        resumable = ckpt.newest_intact(ckpt.run_folder(self.cfg))[0] is not None
        if resuming(self.cfg) and not resumed:
            self._keep_written_record()
        self.record["status"] = "incomplete" if resumable or isinstance(err, KeyboardInterrupt) else "failed"
        self.record["error"] = faults.failure_text(err, self.cfg)
        try:
            self.write(last=True)
        except Exception as write_err:  # the original error matters more than this one
            print(f"could not write the record: {write_err}", file=sys.stderr)

    def _keep_written_record(self) -> None:
        """A resume that failed before it restored the record keeps the record it was resuming."""
        try:
            written = read_record(self.cfg.record_path())
        except (RecordError, OSError):
            return
        self.record.clear()
        self.record.update(written)
