"""Measuring a pair: launch its baseline and its method one after the other and read their records.

The load of a shared machine drifts over minutes (here: 700 to 1,950 tokens/s for the same DDP run
within ten minutes, while two adjacent launches mostly stayed within 6% of each other), so a ratio is
only taken from adjacent launches: a pair reuses the previous launch when it is one of its two
configurations, and otherwise launches both. Rounds alternate the two launches (ABAB...); the pair keeps
the median of its round ratios, and `RoundPolicy` chooses how many rounds from their measured spread.

Within a launch, a burst of load slows a few steps: a launch's speed is its median timed step (the
record's `step_s_median`; warm-up and metered steps excluded), which such a burst moves least. Beside it
each launch carries its CPU seconds per step (the record's `cpu_step_s_median`: waiting for a busy core
is not counted), the calibration kernels timed just before and after it (benchmarks/calibrate.py), its
step times in those units, and its deterministic counters (benchmarks/counters.py).

A launch's wall time is mostly start-up (every worker imports torch), which no method changes. So the
time pytest-benchmark reports for a pair is the method's median step time from its record:
STEP_CLOCK is the benchmarks' timer, and measuring a pair moves it by exactly that time. Each launch's
wall time stays in extra_info as `launch_s`.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks import slowdown
from benchmarks.bare_loop import BARE_LOOP
from benchmarks.calibrate import calibrate
from benchmarks.counters import counters, rss
from suite.plan.pairs import MICRO_BATCH, SEQ_LEN, WARMUP, Config, Pair
from suite.records import read_record
from suite.run.launch import launch

ROOT = Path(__file__).resolve().parent.parent


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
    argv = [sys.executable, "-m", "benchmarks.bare_loop", "--nproc", str(config.nproc), "--ddp"]
    argv += ["--steps", str(config.steps - WARMUP - 1), "--warmup", str(WARMUP + 1)]  # as the suite: 7 of 10
    proc = subprocess.run(
        argv + ["--micro-batch", str(MICRO_BATCH), "--seq-len", str(SEQ_LEN)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark {config.key}: the bare loop failed:\n{proc.stderr[-2000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return {
        "tokens_per_step": MICRO_BATCH * SEQ_LEN * config.nproc,
        "step_s": out["step_s_median"],
        "cpu_step_s": out["cpu_step_s_median"],
        "cpu_step_s_per_rank": out["cpu_step_s_per_rank"],
        "timed_steps": out["steps"],
        "counters": {},
        "rss": {},
        "run_id": None,
    }


def losses(rec: dict) -> list[float]:
    """The training loss of every step, in order (the golden curve the gate compares exactly)."""
    steps = [point["step"] for point in rec["curve"]]
    if steps != list(range(1, len(steps) + 1)):
        raise RuntimeError(f"run {rec['run_id']}: its curve lacks steps ({steps}); the bench logs every step")
    return [point["train_loss"] for point in rec["curve"]]


def measure_suite(config: Config, results: Path) -> dict:
    """One launch of the suite's loop: its speed, its counters and its per-step losses, from its record."""
    cfg = config.run_config(results)
    cfg.log_every = 1  # every step's loss; the loss's mean over ranks goes over the control group, off the clock
    path = launch(cfg)
    rec = read_record(path)
    if rec["status"] != "complete":
        raise RuntimeError(
            f"benchmark {config.key}: the run ended {rec['status']} ({rec.get('error')}); its record is {path}"
        )
    throughput = rec["throughput"]
    return {
        "tokens_per_step": rec["parallel"]["global_batch_tokens"],
        "step_s": throughput["step_s_median"],
        "cpu_step_s": throughput.get("cpu_step_s_median"),
        "cpu_step_s_per_rank": throughput.get("cpu_step_s_per_rank"),
        "timed_steps": throughput["timed_steps"],
        "counters": counters(rec),
        "losses": losses(rec),
        "rss": rss(rec),
        "run_id": rec["run_id"],
    }


def slowdown_env() -> None:
    """With BENCH_SLOWDOWN set, the launched workers import benchmarks/slowdown.py (their cwd is ROOT)."""
    if os.environ.get(slowdown.ENV):
        slowdown.parse(os.environ[slowdown.ENV])  # a bad value fails here, once, not in every worker
        entries = [e for e in os.environ.get("SUITE_REPRODUCTIONS", "").split(os.pathsep) if e]
        if "benchmarks.slowdown" not in entries:
            os.environ["SUITE_REPRODUCTIONS"] = os.pathsep.join([*entries, "benchmarks.slowdown"])


def measure(config: Config, results: Path) -> dict:
    """Launch `config` once, between two calibrations: speed (wall and CPU), both in machine units, counters."""
    slowdown_env()
    before = calibrate()
    start = time.perf_counter()
    out = measure_bare(config) if config.method == BARE_LOOP else measure_suite(config, results)
    launch_s = time.perf_counter() - start
    after = calibrate()
    calib = {k: (before[k] + after[k]) / 2 for k in before}
    cpu = out["cpu_step_s"]
    return {
        "config": config.key,
        **out,
        "tokens_per_s": out["tokens_per_step"] / out["step_s"],
        "cpu_tokens_per_s": out["tokens_per_step"] / cpu if cpu else None,
        "calibration": calib,
        "calibration_spread": {k: after[k] / before[k] - 1 for k in before},
        # step times in units of the calibration kernels' times at that moment
        "cpu_units": cpu / calib["matmul_cpu_s"] if cpu else None,
        "wall_units": out["step_s"] / calib["matmul_wall_s"],
        "launch_s": launch_s,
        "slowdown": os.environ.get(slowdown.ENV) or None,
    }


def spread(ratios: list[float]) -> float:
    """The robust spread of round ratios: 1.4826 x the median absolute deviation of their logarithms
    (a standard deviation for normal noise, which one launch caught in a burst of load moves little)."""
    logs = [math.log(r) for r in ratios]
    mid = statistics.median(logs)
    return 1.4826 * statistics.median(abs(x - mid) for x in logs)


@dataclass(frozen=True)
class RoundPolicy:
    """How many rounds a pair gets: `fixed`, or from the spread of the first `least` rounds' ratios.

    The median of n rounds has a standard error of about 1.2533 x spread / sqrt(n); rounds are added until
    `z` standard errors fit within `margin` (a fraction: half the distance from no change to the change the
    gate must catch), at most `most`.
    """

    fixed: int | None = 1
    least: int = 3
    most: int = 7
    margin: float = 0.05
    z: float = 2.0

    def needed(self, ratios: list[float]) -> int:
        """Rounds this pair needs, given the ratios measured so far."""
        if self.fixed is not None:
            return self.fixed
        if len(ratios) < self.least:
            return self.least
        n = math.ceil((self.z * 1.2533 * spread(ratios) / self.margin) ** 2)
        return max(self.least, min(self.most, n))

    @classmethod
    def parse(cls, text: str) -> RoundPolicy:
        """`N` (fixed) or `auto` or `auto:LEAST-MOST`."""
        if text.isdigit() and int(text) >= 1:
            return cls(fixed=int(text))
        if text == "auto":
            return cls(fixed=None)
        if text.startswith("auto:"):
            least, _, most = text[5:].partition("-")
            if least.isdigit() and most.isdigit() and 1 <= int(least) <= int(most):
                return cls(fixed=None, least=int(least), most=int(most))
        raise ValueError(f"rounds {text!r}: expected a whole number of at least 1, 'auto' or 'auto:LEAST-MOST'")


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
        cpu = method.get("cpu_tokens_per_s") and baseline.get("cpu_tokens_per_s")
        result = {
            "ratio": method["tokens_per_s"] / baseline["tokens_per_s"],
            "cpu_ratio": method["cpu_tokens_per_s"] / baseline["cpu_tokens_per_s"] if cpu else None,
            "method": method,
            "baseline": baseline,
        }
        self.rounds.setdefault(pair.name, []).append(result)
        return result

    def measure_rounds(self, pair: Pair, policy: RoundPolicy) -> dict:
        """As many rounds as `policy` asks for, given the spread of the wall and CPU ratios so far; the clock
        moves by the method's median step over them."""
        start = self.clock.now
        while True:
            rounds = self.rounds.get(pair.name, [])
            needed = max(
                policy.needed([r["ratio"] for r in rounds]),
                policy.needed([r["cpu_ratio"] for r in rounds if r["cpu_ratio"]] if rounds else []),
            )
            if len(rounds) >= needed:
                self.clock.now = start + statistics.median(r["method"]["step_s"] for r in rounds)
                return self.summary(pair)
            self(pair)

    def summary(self, pair: Pair) -> dict:
        """The pair's ratios over its rounds: their medians, which one launch caught in a burst of load moves least."""
        rounds = self.rounds[pair.name]
        cpu = [r["cpu_ratio"] for r in rounds if r["cpu_ratio"] is not None]
        return {
            "pair": pair.name,
            "ratio": statistics.median(r["ratio"] for r in rounds),
            "cpu_ratio": statistics.median(cpu) if cpu else None,
            "spread": spread([r["ratio"] for r in rounds]),
            "cpu_spread": spread(cpu) if cpu else None,
            "tolerance": pair.tolerance,
            "rounds": rounds,
        }
