"""Paper-scale estimates on one machine: memory, FLOPs and bytes of a training step at any world size.

`estimate(cfg)` runs the suite's own Worker, strategy and meters for each estimated rank in this one
process, on fake tensors and torch's fake process group (suite/estimate/fake.py), so no method needs
code of its own here. Ranks whose local tensors and groups match rank 0's (their signature) are not
stepped: rank 0 stands for them, and the record says which ranks were checked. A checked rank that differs
is stepped as soon as it is built, and only the ranks not yet stepped are built afterwards: each rank is
built once (a rank's numbers depend only on its own build and steps, not on what this process ran before,
as the sequential `processes=1` path already relies on). The result is a run
record with provenance `estimated`.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Literal

from suite.config import RunConfig
from suite.estimate.rank import RankEstimate, estimate_rank
from suite.estimate.record import build_record
from suite.recorder import new_run_id
from suite.strategy import methods
from suite.timing import load_average

RANK_POLICIES = ("auto", "all")


def sampled_ranks(world_size: int) -> list[int]:
    """The ranks whose signature `auto` compares with rank 0's: the next one and the last one."""
    return sorted({1, world_size - 1} - {0} & set(range(world_size)))


def check_estimable(method: str) -> None:
    """ValueError (one line) for a method whose step cannot run on the fake process group (Strategy.not_estimable)."""
    why = getattr(methods().get(method), "not_estimable", "")
    if why:
        raise ValueError(f"{method} cannot be estimated: {why}")


def prepare(cfg: RunConfig) -> RunConfig:
    """A copy of `cfg` the fake Worker can run: cpu tensors, meters on, a budget and an id of its own."""
    if cfg.nproc < 1:
        raise ValueError(f"--world-size must be at least 1, got {cfg.nproc}")
    check_estimable(cfg.method)
    out = dataclasses.replace(cfg, device="cpu", meters=True, variant=dict(cfg.variant))
    if out.tokens is None and out.flops is None and out.time_s is None and out.target is None:
        out.tokens = 1.0  # the Worker wants a budget; an estimate runs a fixed number of steps
    if out.run_id is None:
        out.run_id = f"estimate-{new_run_id(out)}"
    return out


def _step_ranks(cfg: RunConfig, ranks: list[int], gpus_per_node: int, processes: int | None) -> list[RankEstimate]:
    """Estimate `ranks`, in up to `processes` parallel processes (default: one per core): each rank is
    independent, and a method whose ranks differ (SDP) needs every one stepped, which takes minutes at paper
    scale."""
    workers = min(len(ranks), processes or os.cpu_count() or 1)
    if workers < 2:
        return [estimate_rank(cfg, r, gpus_per_node) for r in ranks]
    # spawn: a fresh interpreter per worker, with no fake process group or fake mode inherited
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(estimate_rank, [cfg] * len(ranks), ranks, [gpus_per_node] * len(ranks)))


def estimate(
    cfg: RunConfig, gpus_per_node: int = 8, ranks: Literal["auto", "all"] = "auto", processes: int | None = None
) -> dict:
    """The run record (provenance `estimated`) of `cfg` on `cfg.nproc` ranks, nodes of `gpus_per_node`.

    ranks="auto" steps rank 0 and compares its signature with `sampled_ranks`'; if one differs, every
    rank is stepped. ranks="all" steps every rank. `processes`: how many processes may step ranks at once
    (default: one per core; 1 where estimates already run side by side, suite/reproduce.py).
    """
    if ranks not in RANK_POLICIES:
        raise ValueError(f"ranks must be one of {', '.join(RANK_POLICIES)}, got {ranks!r}")
    if gpus_per_node < 1:
        raise ValueError(f"--gpus-per-node must be at least 1, got {gpus_per_node}")
    cfg = prepare(cfg)
    world = cfg.nproc
    start, load_start = time.perf_counter(), load_average()
    first = estimate_rank(cfg, 0, gpus_per_node)
    checked = sampled_ranks(world) if ranks == "auto" else []
    others = [estimate_rank(cfg, r, gpus_per_node, unless=first.signature) for r in checked]
    if ranks == "auto" and not any(o.stepped for o in others):
        symmetry = (
            f"ranks {', '.join(map(str, [0, *checked]))} have the same local tensors (names, storage "
            f"bytes, dtypes) and groups (sizes, tiers); rank 0 stands for all {world}"
        )
        if any(o.numels != first.numels for o in others):
            bound = all(n <= first.numels[k] for o in others for k, n in o.numels.items())
            symmetry += "; some ranks use less of that storage (uneven shards), so their optimizer state " + (
                "is smaller: rank 0's numbers are their upper bound" if bound else "differs"
            )
        estimated, stands_for = [first], dict.fromkeys(range(world), 0)
    else:
        symmetry = None
        done = {o.rank: o for o in others if o.stepped}
        rest = _step_ranks(cfg, [r for r in range(1, world) if r not in done], gpus_per_node, processes)
        estimated = sorted([first, *done.values(), *rest], key=lambda e: e.rank)
        stands_for = {r: r for r in range(world)}
    wall_s = time.perf_counter() - start
    return build_record(estimated, stands_for, symmetry, checked, gpus_per_node, wall_s, load_start)
