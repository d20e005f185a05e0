"""An estimate's run record: the record the Worker built, filled from the ranks' estimates.

Ranks that were not stepped take the numbers of a stepped rank: rank 0's where every rank matches it (then the
record lists rank 0 alone, for all), or their class's (suite/estimate/classes.py: every rank listed, under its
own group names); the record lists which ranks were estimated and checked, and why the others are taken to be
equal.
"""

from __future__ import annotations

import copy

from suite.data import epochs_seen
from suite.estimate.fake import BACKEND
from suite.estimate.rank import RankEstimate
from suite.meters.base import write_sections
from suite.timing import load_timing

FAKE_DEVICE_NAME = "fake tensors (torch FakeTensorMode) on cpu, fake process group"


def build_record(
    ranks: list[RankEstimate],
    results: dict[int, dict],
    symmetry: str | None,
    checked: list[int],
    gpus_per_node: int,
    wall_s: float,
    load_start: float,
) -> dict:
    """The record of an estimate from its stepped `ranks` (rank 0 first); `results[r]`: the meter results the record
    lists for rank r (rank 0's alone where it stands for every rank); `load_start`: the machine's load average when
    the estimate began (the record's `timing`, as a run's)."""
    first = ranks[0]
    rec = copy.deepcopy(first.record)
    steps = first.steps
    tokens = steps * rec["parallel"]["global_batch_tokens"]
    world = rec["parallel"]["world_size"]
    weight = dict.fromkeys(results, 1) if len(results) == world else {0: world}
    flops = {r: res.get("flops") or {"model": 0, "hardware": 0} for r, res in sorted(results.items())}
    rec.update(
        {
            "status": "complete",
            "provenance": "estimated",
            "curve": [],
            "protocol": {"kind": "tokens", "budget": tokens, "target": None, "reached": True},
            "totals": {
                "steps": steps,
                "tokens": tokens,
                "flops": 0,
                "hardware_flops": 0,
                "optimizer_flops": 0,
                "wall_s": 0.0,
                "epochs": epochs_seen(tokens, rec["data"]),
            },
            "throughput": {"tokens_per_s": None, "samples_per_s": None, "step_s": None, "mfu": None},
            "estimate": {
                "estimated_ranks": [e.rank for e in ranks],
                "checked_ranks": checked,
                "symmetry": symmetry,
                "steps": steps,
                "gpus_per_node": gpus_per_node,
                "wall_s": wall_s,
                "flops_per_rank_step": {str(r): f["model"] for r, f in flops.items()},
                "hardware_flops_per_rank_step": {str(r): f["hardware"] for r, f in flops.items()},
            },
        }
    )
    rec["timing"] = load_timing(load_start)
    write_sections(first.meters, results, rec, weight)
    rec["env"].update(
        {
            "backend": BACKEND,
            "device": "cpu",
            "device_name": FAKE_DEVICE_NAME,
            "peak_flops": None,
            "gpus_per_node": gpus_per_node,
        }
    )
    return rec


def kept(first: RankEstimate, rank: int, results: dict) -> dict:
    """What an estimate's record keeps of rank `rank`'s meter results (the sections its meters write: an estimate
    drops what says nothing of the estimated rank, such as the estimating process's RSS)."""
    rec = {**copy.deepcopy(first.record), "provenance": "estimated"}
    rec["totals"] = {"steps": first.steps}
    write_sections(first.meters, {rank: results}, rec)
    return rec


def format_estimate(rec: dict) -> str:
    """The estimate as text: memory per rank, FLOPs and bytes per step."""
    est, steps = rec["estimate"], rec["totals"]["steps"]
    gib = 2**30
    lines = [
        f"ESTIMATED (fake tensors, fake process group): {rec['method']} {rec['model']['name']} "
        f"({rec['model']['params']:,} params) on {rec['parallel']['world_size']} ranks, "
        f"{est['gpus_per_node']} per node; {steps} steps, {est['wall_s']:.1f} s",
        f"  ranks: {est['symmetry'] or 'every rank estimated'}",
        f"  {'rank':>5}"
        + "".join(
            f"{c:>13}"
            for c in ("peak GiB", "params", "grads", "optimizer", "activations", "comm_buf", "other", "state")
        ),
    ]
    for m in rec["memory"]["per_rank"]:
        lines.append(
            f"  {m['rank']:>5}"
            + "".join(
                f"{m[c] / gib:>13.3f}"
                for c in (
                    "peak_bytes",
                    "params",
                    "grads",
                    "optimizer",
                    "activations",
                    "comm_buffers",
                    "other",
                    "state_bytes",
                )
            )
        )
    lines.append(
        f"  FLOPs per step, all ranks: model {rec['totals']['flops'] / steps:.4g}, "
        f"hardware {rec['totals']['hardware_flops'] / steps:.4g}"
    )
    comm_steps = rec["comm"]["steps"]
    for entry in rec["comm"]["per_rank"][:1]:
        for op in entry["ops"]:
            lines.append(
                f"  rank {entry['rank']}: {op['op']} on {op['group']} ({op['group_size']}, {op.get('tier')}): "
                f"{op['count'] / comm_steps:g} calls, {op['bytes'] / comm_steps / 2**20:,.1f} MiB per step"
            )
    return "\n".join(lines)
