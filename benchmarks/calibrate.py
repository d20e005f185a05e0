"""Calibration kernels: this machine's speed at this moment, timed right before each launch of the bench.

A fixed fp32 matmul on one thread (the workers of a 2-rank launch run one thread each) and a fixed gloo
all-reduce between two ranks. Both ranks of the all-reduce live in this process as two threads, each
with its own ProcessGroupGloo over one in-memory store: gloo's transport is the same TCP loopback the
workers use, and no second interpreter (seconds of importing torch) has to start.

A launch's step time divided by the calibration's time is its step time in units of the machine's speed
then (benchmarks/gate.py: `cpu_units`, `wall_units`): a slowdown of the shared loop or of a baseline moves
it, while ratios of two launches cannot see it.
"""

from __future__ import annotations

import statistics
import threading
import time

import torch
import torch.distributed as dist

MATMUL_N = 384  # 2 * 384^3 = 113 MFLOP per product, about 1-2 ms on one core of the CPU machines
MATMUL_REPEAT = 20
ALLREDUCE_FLOATS = 1 << 20  # 4 MiB, about the gradient bytes of llama-tiny per bucket
ALLREDUCE_REPEAT = 10
SAMPLES = 5  # each kernel is timed SAMPLES times; the median is kept


def matmul_seconds() -> tuple[float, float]:
    """(CPU seconds, wall seconds) of MATMUL_REPEAT fp32 products on one thread: the median of SAMPLES."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        gen = torch.Generator().manual_seed(0)
        a, b = (torch.randn(MATMUL_N, MATMUL_N, generator=gen) for _ in range(2))
        torch.mm(a, b)  # first call allocates and picks the kernel
        cpu, wall = [], []
        for _ in range(SAMPLES):
            c0, w0 = time.thread_time(), time.perf_counter()
            for _ in range(MATMUL_REPEAT):
                torch.mm(a, b)
            cpu.append(time.thread_time() - c0)
            wall.append(time.perf_counter() - w0)
    finally:
        torch.set_num_threads(threads)
    return statistics.median(cpu), statistics.median(wall)


def _groups(world: int = 2) -> list[dist.ProcessGroup]:
    store = dist.PrefixStore(f"calibrate-{time.monotonic_ns()}", dist.HashStore())
    groups: dict[int, dist.ProcessGroup] = {}

    def make(rank: int) -> None:
        groups[rank] = dist.ProcessGroupGloo(store, rank, world)

    _in_threads(make, world)
    return [groups[r] for r in range(world)]


def _in_threads(fn, world: int) -> None:
    threads = [threading.Thread(target=fn, args=(rank,)) for rank in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def allreduce_seconds(world: int = 2) -> float:
    """Wall seconds of ALLREDUCE_REPEAT gloo all-reduces of ALLREDUCE_FLOATS floats: the median of SAMPLES."""
    groups = _groups(world)
    tensors = [torch.ones(ALLREDUCE_FLOATS) for _ in range(world)]
    samples: dict[int, list[float]] = {r: [] for r in range(world)}

    def run(rank: int) -> None:
        groups[rank].allreduce([tensors[rank]]).wait()  # connects
        for _ in range(SAMPLES):
            start = time.perf_counter()
            for _ in range(ALLREDUCE_REPEAT):
                groups[rank].allreduce([tensors[rank]]).wait()
            samples[rank].append(time.perf_counter() - start)

    _in_threads(run, world)
    return statistics.median(samples[0])


def calibrate() -> dict[str, float]:
    """The calibration kernels' times now, in seconds."""
    cpu, wall = matmul_seconds()
    return {"matmul_cpu_s": cpu, "matmul_wall_s": wall, "allreduce_wall_s": allreduce_seconds()}
