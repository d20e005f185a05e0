"""Step clock: wall time of training steps after warm-up, evaluation and metering kept off the clock.

Beside the wall time it keeps each step's CPU time (user + system of this worker process, all its
threads: time.process_time): on a shared machine, waiting for a busy core adds wall time but no CPU time,
so the throughput gate (benchmarks/) can judge CPU time where wall time is too noisy.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import asdict, dataclass

import torch
import torch.distributed as dist

# Dense bf16 peaks of devices we know, for MFU; any other device records mfu = null.
PEAK_FLOPS = {
    "NVIDIA H100 80GB HBM3": 989e12,
    "NVIDIA H200": 989e12,
    "NVIDIA A100-SXM4-80GB": 312e12,
    "NVIDIA A100-SXM4-40GB": 312e12,
}


def peak_flops(device: torch.device) -> float | None:
    """The device's dense bf16 peak, where it is known; None on CPU and unknown GPUs."""
    if device.type != "cuda":
        return None
    return PEAK_FLOPS.get(torch.cuda.get_device_name(device))


# the parts of a step timed apart (docs/architecture.md: an optimizer-step speed-up is never quoted as a training one)
PHASES = ("forward_backward", "aggregation", "optimizer", "after_step")


_PER_PROCESS = (
    "CPU seconds (user + system, all threads) of each worker process over its timed steps, the median over whole "
    "periods of their mean step; cpu_step_s_median: the median over ranks"
)
_ONE_PROCESS = (
    "CPU seconds (user + system, all threads) of the one process that runs every emulated worker, over the timed "
    "steps (each from the meeting of every worker at its start to the one at its end), the median over whole "
    "periods of their mean step: the whole emulation's CPU per step, not one worker's"
)


@dataclass
class _Step:
    index: int
    seconds: float
    tokens: int
    phases: dict[str, float]
    cpu_seconds: float


class StepClock:
    """Times steps; the first `warmup` steps and any step marked off the clock are excluded.

    A method that communicates every `period` steps (averaging, outer optimizers) has steps of unequal
    cost, so throughput is taken over whole periods only (steps [k*period, (k+1)*period) all timed):
    tokens/s over them, and the median over periods of their mean step, which a burst of load on a shared
    machine moves least. With period 1 that is the median step.
    """

    def __init__(
        self, device: torch.device, warmup: int, period: int = 1, meet: Callable[[], tuple[float, float]] | None = None
    ) -> None:
        """`meet`: for workers that take turns in one process (suite/run/emulate.py), a meeting of all of them that
        returns the instants (wall, process CPU) when the last arrived; a step then runs from the meeting at its
        start to the one at its end, every worker's share of it inside. Otherwise the step is this worker's."""
        self.device = device
        self._now = meet or (lambda: (time.perf_counter(), time.process_time()))
        self.warmup = warmup
        self.period = max(period, 1)
        self.elapsed = 0.0
        self.metered_s = 0.0  # steps off the clock (metered); elapsed - metered_s - timed = warm-up
        self.timed: list[_Step] = []
        self._seen = 0
        self._phases: dict[str, float] = {}
        self._events: list[tuple[str, torch.cuda.Event, torch.cuda.Event]] = []

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    @contextmanager
    def step(self, index: int, tokens: int, on_clock: bool = True):
        """Time step `index` of `tokens` tokens (all workers); `on_clock=False` for metered steps."""
        self._sync()
        self._phases, self._events = {}, []
        start, cpu_start = self._now()
        yield
        self._sync()
        end, cpu_end = self._now()
        dt, cpu = end - start, cpu_end - cpu_start
        for name, begin, end in self._events:
            self._phases[name] = self._phases.get(name, 0.0) + begin.elapsed_time(end) / 1000
        self.elapsed += dt
        self._seen += 1
        if not on_clock:
            self.metered_s += dt
        elif self._seen > self.warmup:
            self.timed.append(_Step(index, dt, tokens, self._phases, cpu))

    def split_s(self) -> dict[str, float]:
        """Seconds of all steps so far by kind: timed, metered (off the clock) and warm-up."""
        timed = sum(s.seconds for s in self.timed)
        return {"timed": timed, "metered": self.metered_s, "warmup": max(self.elapsed - timed - self.metered_s, 0.0)}

    def state(self) -> dict:
        """What a checkpoint keeps (plain data): the seconds so far and the timed steps."""
        return {"elapsed": self.elapsed, "metered_s": self.metered_s, "timed": [asdict(s) for s in self.timed]}

    def restore(self, state: dict) -> None:
        """Continue from a checkpoint's `state`; the first steps after it warm up again (a new process is cold)."""
        self.elapsed = state["elapsed"]
        self.metered_s = state.get("metered_s", 0.0)  # a checkpoint made before it was kept
        self.timed = [_Step(**s) for s in state["timed"]]

    @contextmanager
    def phase(self, name: str):
        """Time one phase of the current step (PHASES). On CUDA with events on the current stream, read after
        the step's closing sync: a sync per phase would stop the host from queuing work ahead of the device."""
        if self.device.type == "cuda":
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            yield
            end.record()
            self._events.append((name, begin, end))
            return
        start = time.perf_counter()
        yield
        self._phases[name] = self._phases.get(name, 0.0) + time.perf_counter() - start

    def _periods(self) -> list[list[_Step]]:
        by_period: dict[int, list[_Step]] = {}
        for s in self.timed:
            by_period.setdefault(s.index // self.period, []).append(s)
        return [steps for steps in by_period.values() if len(steps) == self.period]

    @property
    def timed_steps(self) -> int:
        return len(self.timed)

    def whole_periods(self) -> int:
        return len(self._periods())

    def tokens_per_s(self) -> float | None:
        steps = [s for period in self._periods() for s in period]
        seconds = sum(s.seconds for s in steps)
        return sum(s.tokens for s in steps) / seconds if seconds > 0 else None

    def step_s(self) -> float | None:
        """Mean step over whole periods."""
        steps = [s for period in self._periods() for s in period]
        return sum(s.seconds for s in steps) / len(steps) if steps else None

    def median_step_s(self) -> float | None:
        """The median over whole periods of their mean step."""
        means = [sum(s.seconds for s in period) / len(period) for period in self._periods()]
        return statistics.median(means) if means else None

    def phase_medians(self) -> dict[str, float | None]:
        """Median seconds of each phase over the timed steps (a phase a step did not run counts as 0)."""
        return {
            name: statistics.median(s.phases.get(name, 0.0) for s in self.timed) if self.timed else None
            for name in PHASES
        }

    def median_cpu_step_s(self) -> float | None:
        """This process's CPU seconds per step: the median over whole periods of their mean step."""
        means = [sum(s.cpu_seconds for s in period) / len(period) for period in self._periods()]
        return statistics.median(means) if means else None

    def cpu_summary(self, group: dist.ProcessGroup | None = None, one_process: bool = False) -> dict:
        """Every rank's median CPU seconds per step (a collective over `group` when one is given: call it
        on every rank), for the record's throughput section; `one_process`: the ranks are threads of one process
        (suite/run/emulate.py), whose CPU time each of them reads whole."""
        mine = self.median_cpu_step_s()
        per_rank = [mine]
        if group is not None:
            per_rank = [None] * dist.get_world_size(group)
            dist.all_gather_object(per_rank, mine, group=group)
        known = [s for s in per_rank if s is not None]
        return {
            "cpu_step_s_per_rank": per_rank,
            "cpu_step_s_median": statistics.median(known) if known else None,
            "cpu_method": _ONE_PROCESS if one_process else _PER_PROCESS,
        }
