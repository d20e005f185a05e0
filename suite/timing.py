"""Where a plan's wall time went: launches, imports, set-up, steps (timed, metered, warm-up), evaluation,
estimates, projections, the report.

The plan (suite/plan/command.py, and the launcher that runs it) times each item it does here; each training run's
record adds, from rank 0, what its worker spent before the run, on set-up, on each kind of step and on evaluation (the
record's `timing`, suite/run/close.py), so a launch's wall time splits into what the workers did and what the launch
itself cost (starting torchrun and the workers, tearing them down, settling records). Items the plan skipped (complete
records already there) cost nothing and are counted apart.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psutil

# the breakdown's phases, in the order a plan meets them
PHASES = (
    "start-up and plan",  # this process's imports, loading the plan (an SDP plan measures a step's FLOPs)
    "launches",  # starting torchrun and its workers, tearing them down, settling records
    "worker imports",  # a worker process's start-up before its first run (and hand-overs between runs)
    "set-up",  # process groups, data, model, optimizer, meters
    "warm-up steps",
    "metered steps",  # off the clock: FLOPs, memory, communication
    "timed steps",
    "evaluation",  # periodic validation loss
    "final evaluations",  # downstream scores, image accuracy, checkpoints
    "loop and records",  # logging, stop votes, record writes inside the runs
    "failed runs",  # runs whose record has no timing (it failed before closing)
    "estimates",
    "projections",
    "microbenchmarks",
    "report",
    "other",  # the rest: reading the results folder, the table, this breakdown
)


LOAD_METHOD = (
    "the machine's 1-minute load average (os.getloadavg) when the item began and when its record was made: the "
    "condition every time in the record was measured under"
)


def load_average() -> float:
    """The machine's 1-minute load average now."""
    return os.getloadavg()[0]


def load_timing(load_start: float) -> dict:
    """The `timing` section of a record that is not a training run (an estimate, a microbenchmark item, a
    projection): the load average at its start and now, in the same field as a run's (`timing.load_average`,
    suite/run/close.py). Records written before this field was kept have no `timing`: readers take it as absent."""
    return {"load_average": [load_start, load_average()], "method": LOAD_METHOD}


class PlanTimer:
    """The seconds of a plan's items by phase, from this process's start."""

    def __init__(self) -> None:
        self.start = psutil.Process().create_time()
        self.load_start = os.getloadavg()[0]
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.first_item: float | None = None
        self.skipped = 0
        self.launches = 0

    def _begin(self) -> float:
        now = time.time()
        if self.first_item is None:
            self.first_item = now
        return now

    @contextmanager
    def item(self, phase: str) -> Iterator[None]:
        """Time what runs inside as `phase`."""
        start = self._begin()
        try:
            yield
        finally:
            self.seconds[phase] += time.time() - start

    @contextmanager
    def launch(self, records: list[dict]) -> Iterator[None]:
        """Time one launch whose runs' records `records` holds once the block ends (it fills the list)."""
        start = self._begin()
        try:
            yield
        finally:
            self.launches += 1
            self.add_launch(time.time() - start, records)

    def add_launch(self, seconds: float, records: list[dict]) -> None:
        """A launch of `seconds` that made `records`: split by what their workers reported."""
        inside = 0.0
        for rec in records:
            t = rec.get("timing")
            if not t or not t.get("steps_s"):
                continue
            steps = t["steps_s"]
            evals = t["eval_s"] + t["final_evals_s"]
            add = {
                "worker imports": max(t["before_s"], 0.0),
                "set-up": t["setup_s"],
                "warm-up steps": steps["warmup"],
                "metered steps": steps["metered"],
                "timed steps": steps["timed"],
                "evaluation": t["eval_s"],
                "final evaluations": t["final_evals_s"],
                "loop and records": max(t["run_s"] - t["setup_s"] - sum(steps.values()) - evals, 0.0),
            }
            for phase, value in add.items():
                self.seconds[phase] += value
            inside += sum(add.values())
        timed_runs = [r for r in records if (r.get("timing") or {}).get("steps_s")]
        if len(timed_runs) < len(records):  # a run that failed: what is left of the launch is not split
            self.seconds["failed runs"] += max(seconds - inside, 0.0)
        else:
            self.seconds["launches"] += max(seconds - inside, 0.0)

    def breakdown(self) -> dict:
        """The phases' seconds and shares so far, with the wall and CPU time of this process and its children."""
        now = time.time()
        wall = now - self.start
        seconds = dict(self.seconds)
        seconds["start-up and plan"] = (self.first_item or now) - self.start
        seconds["other"] = max(wall - sum(v for k, v in seconds.items() if k != "other"), 0.0)
        cpu = os.times()
        return {
            "wall_s": wall,
            "cpu_s": cpu.user + cpu.system + cpu.children_user + cpu.children_system,
            "load_average": [self.load_start, os.getloadavg()[0]],
            "cores": os.cpu_count(),
            "launches": self.launches,
            "skipped_items": self.skipped,
            "phases_s": seconds,
            "timed_share": seconds["timed steps"] / wall if wall > 0 else None,
        }


def render(summary: dict) -> str:
    """The breakdown as a table: seconds and share of the wall time per phase."""
    wall = summary["wall_s"] or 1.0
    lines = [f"{'phase':<20} {'seconds':>9} {'share':>6}", "-" * 37]
    for phase, seconds in summary["phases_s"].items():
        if seconds > 0.005:
            lines.append(f"{phase:<20} {seconds:>9.1f} {100 * seconds / wall:>5.1f}%")
    load = summary["load_average"]
    lines.append(
        f"{'wall':<20} {summary['wall_s']:>9.1f}  (CPU {summary['cpu_s']:.0f} s on {summary['cores']} cores; "
        f"{summary['launches']} launches, {summary['skipped_items']} items skipped; load average "
        f"{load[0]:.2f} at the start, {load[1]:.2f} at the end)"
    )
    return "\n".join(lines)
