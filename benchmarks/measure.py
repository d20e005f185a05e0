"""One measurement: launch a configuration through the harness and read its run record back.

A launch's wall time is mostly start-up (every worker imports torch: 8-10 s here), which no method
changes. So the time pytest-benchmark reports for a configuration is the record's own mean step time
(after warm-up, metered steps excluded): STEP_CLOCK is the benchmarks' timer, and a launch moves it
by exactly that step time. The launch's wall time is kept in extra_info as `launch_s`.
"""

from __future__ import annotations

import time
from pathlib import Path

from benchmarks.pairs import Config
from suite.launch import launch
from suite.records import read_record, summary_row


class RecordClock:
    """A timer that moves only when a measured record says how long one training step took."""

    __name__ = "record_step_clock"

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


STEP_CLOCK = RecordClock()


def measure(config: Config, results: Path, clock: RecordClock = STEP_CLOCK) -> dict:
    """Launch `config` once; returns what the gate and readers need (the benchmark's extra_info)."""
    start = time.perf_counter()
    path = launch(config.run_config(results))
    launch_s = time.perf_counter() - start
    rec = read_record(path)
    if rec["status"] != "complete":
        raise RuntimeError(f"benchmark {config.key}: the run ended {rec['status']} ({rec.get('error')}); "
                           f"its record is {path}")
    throughput, row = rec["throughput"], summary_row(rec)
    clock.now += throughput["step_s"]
    return {
        "config": config.key,
        "method": config.method,
        "nproc": config.nproc,
        "tokens_per_s": throughput["tokens_per_s"],
        "step_s": throughput["step_s"],
        "timed_steps": throughput["timed_steps"],
        "comm_bytes_per_rank_step": row["comm_bytes_per_rank_step"],
        "peak_bytes_max": row["peak_bytes_max"],
        "launch_s": launch_s,
        "run_id": rec["run_id"],
    }
