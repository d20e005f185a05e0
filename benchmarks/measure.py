"""Measuring a pair: launch its baseline and its method one after the other and read their records.

The load of a shared machine drifts over minutes (here: 700 to 1,950 tokens/s for the same DDP run
within ten minutes, while two adjacent launches mostly stayed within 6% of each other), so a ratio is
only taken from adjacent launches: a pair reuses the previous launch when it is one of its two
configurations, and otherwise launches both. More rounds (`--rounds N`) give a median ratio.

Within a launch, a burst of load slows a few steps: a launch's speed is its median timed step (the
record's `step_s_median`; warm-up and metered steps excluded), which such a burst moves least.

A launch's wall time is mostly start-up (every worker imports torch), which no method changes. So the
time pytest-benchmark reports for a pair is the method's median step time from its record:
STEP_CLOCK is the benchmarks' timer, and measuring a pair moves it by exactly that time. Each launch's
wall time stays in extra_info as `launch_s`.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.bare_loop import BARE_LOOP
from suite.launch import launch
from suite.pairs import MICRO_BATCH, SEQ_LEN, WARMUP, Config, Pair
from suite.records import read_record, summary_row


class RecordClock:
    """A timer that moves only when a measured record says how long one training step took."""

    __name__ = "record_step_clock"

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


STEP_CLOCK = RecordClock()


def measure_bare(config: Config) -> dict:
    """The bare loop (benchmarks/bare_loop.py) with DDP on `config.nproc` workers, at the pairs' fixed shape."""
    start = time.perf_counter()
    argv = [sys.executable, "-m", "benchmarks.bare_loop", "--nproc", str(config.nproc), "--ddp"]
    argv += ["--steps", str(config.steps - WARMUP - 1), "--warmup", str(WARMUP + 1)]  # as the suite: 7 of 10
    proc = subprocess.run(
        argv + ["--micro-batch", str(MICRO_BATCH), "--seq-len", str(SEQ_LEN)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark {config.key}: the bare loop failed:\n{proc.stderr[-2000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return {
        "config": config.key,
        "tokens_per_s": out["tokens_per_s"],
        "tokens_per_s_mean": None,
        "step_s": out["step_s_median"],
        "timed_steps": out["steps"],
        "comm_bytes_per_rank_step": None,
        "peak_bytes_max": None,
        "launch_s": time.perf_counter() - start,
        "run_id": None,
    }


def measure(config: Config, results: Path) -> dict:
    """Launch `config` once: its throughput, bytes per step and peak memory from its record."""
    if config.method == BARE_LOOP:
        return measure_bare(config)
    start = time.perf_counter()
    path = launch(config.run_config(results))
    launch_s = time.perf_counter() - start
    rec = read_record(path)
    if rec["status"] != "complete":
        raise RuntimeError(
            f"benchmark {config.key}: the run ended {rec['status']} ({rec.get('error')}); its record is {path}"
        )
    throughput, row = rec["throughput"], summary_row(rec)
    return {
        "config": config.key,
        "tokens_per_s": rec["parallel"]["global_batch_tokens"] / throughput["step_s_median"],
        "tokens_per_s_mean": throughput["tokens_per_s"],
        "step_s": throughput["step_s_median"],
        "timed_steps": throughput["timed_steps"],
        "comm_bytes_per_rank_step": row["comm_bytes_per_rank_step"],
        "peak_bytes_max": row["peak_bytes_max"],
        "launch_s": launch_s,
        "run_id": rec["run_id"],
    }


class PairMeter:
    """Measures pairs round by round, reusing the last launch when a round needs that configuration again.

    Round after round of one pair thus alternates its two configurations (baseline, method, baseline,
    ...: n rounds cost n + 1 launches), and each round's ratio comes from two adjacent launches.
    """

    def __init__(self, results: Path, clock: RecordClock = STEP_CLOCK) -> None:
        self.results, self.clock = results, clock
        self.last: dict | None = None
        self.rounds: dict[str, list[dict]] = {}

    def _reuse_or_measure(self, config: Config) -> dict:
        if self.last is not None and self.last["config"] == config.key:
            return {**self.last, "reused": True}
        self.last = measure(config, self.results)
        return self.last

    def __call__(self, pair: Pair) -> dict:
        """One round: the ratio of method tokens/s to baseline tokens/s (median steps), and both measurements."""
        if self.last is not None and self.last["config"] == pair.method.key:
            method = self._reuse_or_measure(pair.method)
            baseline = self._reuse_or_measure(pair.baseline)
        else:
            baseline = self._reuse_or_measure(pair.baseline)
            method = self._reuse_or_measure(pair.method)
        self.clock.now += method["step_s"]
        result = {"ratio": method["tokens_per_s"] / baseline["tokens_per_s"], "method": method, "baseline": baseline}
        self.rounds.setdefault(pair.name, []).append(result)
        return result

    def summary(self, pair: Pair) -> dict:
        """The pair's ratio over its rounds: their median, which one launch caught in a burst of load moves least."""
        rounds = self.rounds[pair.name]
        return {
            "pair": pair.name,
            "ratio": statistics.median(r["ratio"] for r in rounds),
            "tolerance": pair.tolerance,
            "rounds": rounds,
        }
