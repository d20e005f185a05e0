"""Microbenchmark items: a function timed and metered on given shapes, written as a run record.

A plan may hold them beside runs and estimates (a kernel claim, such as FlashAttention's HBM bytes, is
about one function, not a training run). An item names a function `module:function`; for each shape it
is called as `function(device=..., **shape)` and returns the zero-argument callable to measure (set-up,
such as making inputs, stays outside the measurement). The callable is run `warmup` times, then timed
`repeat` times (the median is the item's time), once under FlopCounterMode and once under the memory
tracker, each off the clock. If it returns a dict of numbers, those are recorded beside the meters' (an
instrumented kernel reports its own counts this way). The record has the item's provenance (`measured`;
`counted` for an item whose numbers are an instrumented algorithm's exact counts), the command that re-runs
the item, the machine's load average at its start and end (`timing.load_average`, as a run's), and a
`micro` section with one row per shape.
"""

from __future__ import annotations

import importlib
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from suite.config import RunConfig
from suite.meters.flops import FlopMeter
from suite.meters.process import peak_rss_bytes, reset_peak_rss
from suite.run.recorder import new_record, new_run_id
from suite.timing import load_average, load_timing


@dataclass
class Microbench:
    name: str
    function: str  # "package.module:function"
    shapes: list[dict] = field(default_factory=list)
    device: str = "cpu"
    warmup: int = 1
    repeat: int = 5
    provenance: str = "measured"  # or "counted": the item's numbers are exact counts, not measurements
    # one call per shape, its result the row: an item that runs an outside profiler (Nsight Compute) would run it
    # again for each timed, FLOP-counting and memory call, and those meters would read the profiler's parent only
    once: bool = False


def resolve(function: str) -> Callable:
    module, sep, name = function.partition(":")
    if not sep:
        raise ValueError(f"a microbenchmark function is 'module:function', got {function!r}")
    try:
        return getattr(importlib.import_module(module), name)
    except (ModuleNotFoundError, AttributeError):
        raise ValueError(f"no function {function!r}; give an importable 'module:function'") from None


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(work: Callable, device: torch.device, warmup: int, repeat: int) -> list[float]:
    for _ in range(warmup):
        work()
    times = []
    for _ in range(repeat):
        _sync(device)
        start = time.perf_counter()
        work()
        _sync(device)
        times.append(time.perf_counter() - start)
    return times


def _peak_bytes(work: Callable, device: torch.device) -> tuple[int, int | None]:
    """(tensor peak over one call, process peak RSS over it on CPU or None): the CUDA allocator's peak on CUDA."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        work()
        _sync(device)
        return torch.cuda.max_memory_allocated(device), None
    # imported here: torch.distributed._tools brings dynamo and inductor, 1.6 s for every command that parses
    from torch.distributed._tools.mem_tracker import MemTracker

    resettable = reset_peak_rss()
    tracker = MemTracker()
    with tracker:
        work()
    peak = tracker.get_tracker_snapshot("peak").get(device, {}).get("Total", 0)
    return peak, peak_rss_bytes() if resettable else None


def measure_shape(item: Microbench, shape: dict) -> dict:
    device = torch.device(item.device)
    work = resolve(item.function)(device=device, **shape)
    if item.once:
        start = time.perf_counter()
        extra = work()
        times, flops, peak, rss = [time.perf_counter() - start], 0, None, None
    else:
        times = _timed(work, device, item.warmup, item.repeat)
        with FlopMeter() as meter:
            extra = work()
        flops = meter.model_flops
        peak, rss = _peak_bytes(work, device)
    return {
        "shape": shape,
        "time_s_median": statistics.median(times),
        "time_s": times,
        "flops": flops,
        "peak_bytes": peak,
        "rss_peak_bytes": rss,
        "extra": extra if isinstance(extra, dict) else {},
    }


def micro_record(item: Microbench, reproduction: str, command: str, results: str) -> dict:
    """Measure every shape of `item` in this process; the record to write (the caller writes it)."""
    device = torch.device(item.device)
    cfg = RunConfig(
        method=item.name,
        model=item.function,
        nproc=1,
        device=item.device,
        reproduction=reproduction,
        results=results,
        command=command,
        meters=True,
    )
    cfg.run_id = f"micro-{new_run_id(cfg)}".replace(":", "-").replace("/", "-")
    rec = new_record(cfg, 1, device, "none", None)
    start, load_start = time.perf_counter(), load_average()
    rows = [measure_shape(item, shape) for shape in item.shapes]
    rec.update(
        {
            "kind": "microbenchmark",
            "status": "complete",
            "provenance": item.provenance,
            "baseline": False,
            "model": {"name": item.function, "params": 0, "config": {}},
            "data": {"name": "synthetic", "source": "inputs made by the benchmarked function"},
            "totals": {
                "steps": len(rows),
                "tokens": 0,
                "flops": sum(r["flops"] for r in rows),
                "wall_s": time.perf_counter() - start,
            },
            "memory": {
                "method": "MemTracker peak of live tensors over one call (cpu); cuda max_memory_allocated",
                "per_rank": [],
            },
            "timing": load_timing(load_start),
            "micro": {
                "function": item.function,
                "warmup": item.warmup,
                "repeat": item.repeat,
                "rows": rows,
                "method": "one call per shape, its result the row (the item runs an outside profiler); wall "
                "seconds of that call, no FLOP or memory meters"
                if item.once
                else f"median of {item.repeat} timed calls after {item.warmup} warm-up; FLOPs by "
                "FlopCounterMode and memory on separate calls, off the clock",
            },
        }
    )
    return rec
