"""Paper-scale estimates on one machine: memory, FLOPs and bytes of a training step at any world size.

`estimate(cfg)` runs the suite's own Worker, strategy and meters for each estimated rank in this one
process, on fake tensors and torch's fake process group (suite/estimate/fake.py), so no method needs
code of its own here. Ranks whose local tensors and groups match rank 0's (their signature, names included)
are not stepped: rank 0 stands for them, and the record says which ranks were checked. Where a sampled rank
differs (SDP's ranks hold different blocks), the ranks are classed on what their numbers depend on, names
aside (suite/estimate/classes.py): one rank per class is stepped for it and one more checked in full. Each
rank is stepped as soon as it is built where it needs its steps, never built twice but where a check fails (a
rank's numbers depend only on its own build and steps, not on what this process ran before, as the sequential
`processes=1` path already relies on). The result is a run record with provenance `estimated`.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from typing import Literal

from suite.config import RunConfig
from suite.estimate.classes import RankClasses
from suite.estimate.rank import RankEstimate, estimate_rank
from suite.estimate.record import build_record, kept
from suite.run.recorder import new_run_id
from suite.run.strategy import methods
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
    independent, and stepping every rank (ranks="all", or a rank class whose check failed) takes minutes at
    paper scale."""
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

    ranks="auto" steps rank 0 and compares its signature with `sampled_ranks`'; if one differs, the ranks are
    classed (suite/estimate/classes.py) and one rank per class is stepped, one more checked; if a check fails,
    every rank is stepped. ranks="all" steps every rank. `processes`: how many processes may step ranks at once
    where every rank is stepped (default: one per core; 1 where estimates already run side by side,
    suite/plan/items.py).
    """
    if ranks not in RANK_POLICIES:
        raise ValueError(f"ranks must be one of {', '.join(RANK_POLICIES)}, got {ranks!r}")
    if gpus_per_node < 1:
        raise ValueError(f"--gpus-per-node must be at least 1, got {gpus_per_node}")
    cfg = prepare(cfg)
    start, load_start = time.perf_counter(), load_average()
    if ranks == "all":
        first = estimate_rank(cfg, 0, gpus_per_node)
        ests = {0: first, **{e.rank: e for e in _step_ranks(cfg, list(range(1, cfg.nproc)), gpus_per_node, processes)}}
        listed, symmetry, checked = {r: e.results for r, e in ests.items()}, None, []
    else:
        ests, listed, symmetry, checked = _auto(cfg, gpus_per_node, processes)
    wall_s = time.perf_counter() - start
    estimated = sorted((e for e in ests.values() if e.stepped), key=lambda e: e.rank)
    return build_record(estimated, listed, symmetry, checked, gpus_per_node, wall_s, load_start)


def _auto(
    cfg: RunConfig, gpus_per_node: int, processes: int | None
) -> tuple[dict[int, RankEstimate], dict[int, dict], str | None, list[int]]:
    """Rank 0 for all where the sampled ranks match it, names included; else one rank per class. Returns the
    ranks built, the meter results of the ranks the record lists, the symmetry note and the checked ranks."""
    world, classes = cfg.nproc, RankClasses()
    first = estimate_rank(cfg, 0, gpus_per_node, classes.add)
    sampled = sampled_ranks(world)
    # a sampled rank unlike rank 0 is stepped as soon as it is built where its class needs it
    ests = {0: first}
    for r in sampled:
        ests[r] = estimate_rank(cfg, r, gpus_per_node, lambda e: e.signature != first.signature and classes.add(e))
    if all(ests[r].signature == first.signature for r in sampled):
        return ests, {0: first.results}, _same_as_rank_0(first, [ests[r] for r in sampled], world), sampled
    for r in range(1, world):
        if r not in ests:
            ests[r] = estimate_rank(cfg, r, gpus_per_node, classes.add)
        elif r not in classes and classes.add(ests[r]):  # built as rank 0's equal, but its class needs its steps
            ests[r] = estimate_rank(cfg, r, gpus_per_node)
    if failed := classes.failed(ests, partial(kept, first)):
        print(f"rank classes do not hold (ranks {failed} differ from their class): every rank stepped", file=sys.stderr)
        rest = [r for r, e in ests.items() if not e.stepped]
        ests.update({e.rank: e for e in _step_ranks(cfg, rest, gpus_per_node, processes)})
        return ests, {r: ests[r].results for r in sorted(ests)}, None, sampled
    return ests, classes.results(ests), classes.describe(), classes.checked()


def _same_as_rank_0(first: RankEstimate, others: list[RankEstimate], world: int) -> str:
    """The symmetry note of an estimate whose rank 0 stands for all."""
    ranks = ", ".join(str(e.rank) for e in [first, *others])
    symmetry = (
        f"ranks {ranks} have the same local tensors (names, storage bytes, dtypes) and groups (sizes, tiers); "
        f"rank 0 stands for all {world}"
    )
    if any(o.numels != first.numels for o in others):
        bound = all(n <= first.numels[k] for o in others for k, n in o.numels.items())
        symmetry += "; some ranks use less of that storage (uneven shards), so their optimizer state " + (
            "is smaller: rank 0's numbers are their upper bound" if bound else "differs"
        )
    return symmetry
