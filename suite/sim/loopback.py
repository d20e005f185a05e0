"""Collective timings on this machine (gloo over loopback) and an alpha-beta tier fitted to them.

The cost model's check against reality: fit alpha and bandwidth to one collective's timings, then
compare its predictions for other sizes, ops and group sizes with their measured timings.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from suite.sim.collectives import coefficients
from suite.sim.topology import Tier

OPS = ("all_reduce", "all_gather", "broadcast")


def _call(op: str, tensor: torch.Tensor, out: torch.Tensor) -> None:
    if op == "all_reduce":
        dist.all_reduce(tensor)
    elif op == "all_gather":
        dist.all_gather_into_tensor(out, tensor)
    elif op == "broadcast":
        dist.broadcast(tensor, src=0)
    else:
        raise ValueError(f"no loopback timing for {op!r}; choose one of {', '.join(OPS)}")


def _worker(rank: int, world: int, init: str, ops: tuple[str, ...], sizes: list[int], reps: int, out: str) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    rows = []
    for op in ops:
        for size in sizes:
            # the ledger's payload: all-gather's is the gathered output, the others' the tensor
            local = size // world if op == "all_gather" else size
            tensor = torch.ones(max(local // 4, 1))
            gathered = torch.empty(tensor.numel() * world)
            times = []
            for _ in range(reps + 1):
                dist.barrier()
                start = time.perf_counter()
                _call(op, tensor, gathered)
                times.append(time.perf_counter() - start)
            slowest = torch.tensor(times[1:], dtype=torch.float64)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            payload = tensor.numel() * 4 * (world if op == "all_gather" else 1)
            rows.append({"op": op, "n": world, "payload": payload, "seconds": statistics.median(slowest.tolist())})
    if rank == 0:
        Path(out).write_text(json.dumps(rows))
    dist.destroy_process_group()


def measure(world: int, sizes: list[int], ops: tuple[str, ...] = OPS, reps: int = 5) -> list[dict]:
    """Median seconds per call (slowest rank) of each op and payload size on `world` local gloo processes."""
    if world < 2:
        raise ValueError(f"a collective needs at least 2 processes, got {world}")
    with tempfile.TemporaryDirectory(prefix="suite-loopback-") as tmp:
        out = os.path.join(tmp, "timings")
        init = f"file://{os.path.join(tmp, 'rendezvous')}"
        mp.spawn(_worker, args=(world, init, ops, sizes, reps, out), nprocs=world, join=True)
        return json.loads(Path(out).read_text())


def fit_tier(timings: list[dict], algorithm: str = "ring", name: str = "loopback") -> Tier:
    """Least-squares latency and bandwidth for `timings` under the alpha-beta formulas of `algorithm`."""
    if len(timings) < 2:
        raise ValueError("fitting latency and bandwidth needs timings of at least two payloads")
    rows = [coefficients(t["op"], algorithm, t["n"]) for t in timings]
    design = np.array([[a, b * t["payload"]] for (a, b), t in zip(rows, timings)])
    seconds = np.array([t["seconds"] for t in timings])
    (latency, per_byte), *_ = np.linalg.lstsq(design, seconds, rcond=None)
    if per_byte <= 0:
        raise ValueError("the timings do not grow with payload; measure larger payloads")
    return Tier(name, 1.0 / per_byte, max(latency, 0.0))
