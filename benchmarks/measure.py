"""Measuring a pair: launch its baseline and its method one after the other and read their records.

The load of a shared machine drifts over minutes (here: 750 to 1,250 tokens/s for the same DDP run
within five minutes, while two adjacent launches stayed within 6% of each other), so a ratio is only
taken from adjacent launches: a pair reuses the previous launch when it is one of its two
configurations, and otherwise launches both.

A launch's wall time is mostly start-up (every worker imports torch), which no method changes. So the
time pytest-benchmark reports for a pair is the method's mean step time from its record (after
warm-up, metered steps excluded): STEP_CLOCK is the benchmarks' timer, and measuring a pair moves it
by exactly that time. Each launch's wall time stays in extra_info as `launch_s`.
"""

from __future__ import annotations

import time
from pathlib import Path

from benchmarks.pairs import Config, Pair
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


def measure(config: Config, results: Path) -> dict:
    """Launch `config` once: its throughput, bytes per step and peak memory from its record."""
    start = time.perf_counter()
    path = launch(config.run_config(results))
    launch_s = time.perf_counter() - start
    rec = read_record(path)
    if rec["status"] != "complete":
        raise RuntimeError(f"benchmark {config.key}: the run ended {rec['status']} ({rec.get('error')}); "
                           f"its record is {path}")
    throughput, row = rec["throughput"], summary_row(rec)
    return {
        "config": config.key,
        "tokens_per_s": throughput["tokens_per_s"],
        "step_s": throughput["step_s"],
        "timed_steps": throughput["timed_steps"],
        "comm_bytes_per_rank_step": row["comm_bytes_per_rank_step"],
        "peak_bytes_max": row["peak_bytes_max"],
        "launch_s": launch_s,
        "run_id": rec["run_id"],
    }


class PairMeter:
    """Measures pairs in turn, reusing the last launch when a pair needs that configuration again."""

    def __init__(self, results: Path, clock: RecordClock = STEP_CLOCK) -> None:
        self.results, self.clock = results, clock
        self.last: dict | None = None

    def _reuse_or_measure(self, config: Config) -> dict:
        if self.last is not None and self.last["config"] == config.key:
            return {**self.last, "reused": True}
        self.last = measure(config, self.results)
        return self.last

    def __call__(self, pair: Pair) -> dict:
        """The pair's ratio (method tokens/s over baseline tokens/s) and both measurements."""
        if self.last is not None and self.last["config"] == pair.method.key:
            method = self._reuse_or_measure(pair.method)
            baseline = self._reuse_or_measure(pair.baseline)
        else:
            baseline = self._reuse_or_measure(pair.baseline)
            method = self._reuse_or_measure(pair.method)
        self.clock.now += method["step_s"]
        return {"pair": pair.name, "ratio": method["tokens_per_s"] / baseline["tokens_per_s"],
                "tolerance": pair.tolerance, "method": method, "baseline": baseline}
