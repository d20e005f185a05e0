"""Project a run record (measured or estimated) onto a topology: step time and tokens/s, labelled simulated.

Communication per step: each rank's ledger, op by op, priced by suite.sim.collectives on the tier its
group spans (the group's ranks come from the record's `parallel.groups`; a group not listed there is
placed by its size and tier label); the slowest rank sets the step. Compute per step: a time given by
the caller (measured on the target GPU), or the busiest rank's hardware FLOPs / (peak x MFU).
Overlap: the stated fraction of the shorter of compute and communication hidden behind the other;
0 adds them (an upper bound), 1 takes the larger (a lower bound); both bounds are printed.
"""

from __future__ import annotations

import copy
import datetime as dt
from dataclasses import asdict, dataclass, field

from suite.sim.collectives import ALGORITHMS, cost
from suite.sim.topology import Topology, packed_ranks
from suite.timing import load_average, load_timing


@dataclass
class OpTime:
    rank: int
    op: str
    group: str
    group_size: int
    tier: str
    calls: float
    payload: float
    seconds: float


@dataclass
class Projection:
    topology: Topology
    algorithm: str
    overlap: float
    compute_s: float
    compute_source: str
    comm_s: float
    step_s: float
    step_s_bounds: tuple[float, float]
    tokens_per_s: float
    mfu: float | None
    world_size: int
    source_run_id: str
    source_provenance: str
    ops: list[OpTime] = field(default_factory=list)
    load_start: float | None = None  # the machine's load average when the projection began (the record's timing)


def _rank_flops(record: dict) -> float:
    """Hardware FLOPs per step of the busiest rank (an estimate lists each rank's; a measured run the sum)."""
    per_rank = record.get("estimate", {}).get("hardware_flops_per_rank_step")
    if per_rank:
        return float(max(per_rank.values()))
    flops = record["totals"].get("hardware_flops") or record["totals"]["flops"]
    return flops / record["totals"]["steps"] / record["parallel"]["world_size"]


def comm_times(record: dict, topology: Topology, algorithm: str) -> list[OpTime]:
    """Per-step time of every (rank, op, group) of the record's ledger on `topology`."""
    steps = record["comm"].get("steps") or 0
    if steps <= 0:
        raise ValueError(f"record {record['run_id']} has no communication ledger (run with meters on)")
    # the schema leaves groups free-form: one without its ranks falls back to packed ranks below
    ranks_of = {g.get("name"): g.get("ranks") for g in record["parallel"].get("groups", []) if isinstance(g, dict)}
    out = []
    for entry in record["comm"]["per_rank"]:
        for op in entry["ops"]:
            ranks = ranks_of.get(op["group"])
            if ranks is None or len(ranks) != op["group_size"]:
                ranks = packed_ranks(op["group_size"], op.get("tier", "inter-node"), topology.gpus_per_node)
            tier, bandwidth, latency = topology.link(ranks)
            calls, payload = op["count"] / steps, op["bytes"] / steps
            seconds = cost(op["op"], payload, op["group_size"], bandwidth, latency, algorithm, calls)
            out.append(OpTime(entry["rank"], op["op"], op["group"], op["group_size"], tier, calls, payload, seconds))
    return out


def project(
    record: dict,
    topology: Topology,
    overlap: float = 0.0,
    mfu: float = 0.4,
    algorithm: str = "auto",
    compute: tuple[float, str] | None = None,
) -> Projection:
    """Step time and tokens/s of `record`'s run on `topology`; `compute` = (seconds, where from) if measured."""
    load_start = load_average()
    if record["provenance"] == "simulated":
        raise ValueError(f"record {record['run_id']} is itself simulated; project the measured or estimated one")
    if not 0.0 <= overlap <= 1.0:
        raise ValueError(f"overlap must be in [0, 1], got {overlap}")
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {', '.join(ALGORITHMS)}, got {algorithm!r}")
    ops = comm_times(record, topology, algorithm)
    per_rank: dict[int, float] = {}
    for t in ops:
        per_rank[t.rank] = per_rank.get(t.rank, 0.0) + t.seconds
    slowest = max(per_rank, key=per_rank.get) if per_rank else 0
    comm_s = per_rank.get(slowest, 0.0)
    if compute is None:
        if not 0.0 < mfu <= 1.0:
            raise ValueError(f"mfu must be in (0, 1], got {mfu}")
        if topology.peak_flops is None:
            raise ValueError(f"topology {topology.name} has no peak FLOP/s; give a measured compute time")
        compute = (
            _rank_flops(record) / (topology.peak_flops * mfu),
            f"busiest rank's hardware FLOPs per step / ({topology.peak_flops:.3g} FLOP/s x MFU {mfu})",
        )
    compute_s, source = compute
    if compute_s < 0:
        raise ValueError(f"compute time must be >= 0 seconds per step, got {compute_s}")
    step_s = compute_s + comm_s - overlap * min(compute_s, comm_s)
    model_flops = record["totals"]["flops"] / record["totals"]["steps"]
    world = record["parallel"]["world_size"]
    return Projection(
        topology=topology,
        algorithm=algorithm,
        overlap=overlap,
        compute_s=compute_s,
        compute_source=source,
        comm_s=comm_s,
        step_s=step_s,
        step_s_bounds=(max(compute_s, comm_s), compute_s + comm_s),
        tokens_per_s=record["parallel"]["global_batch_tokens"] / step_s if step_s > 0 else float("inf"),
        mfu=model_flops / (step_s * topology.peak_flops * world) if topology.peak_flops and step_s > 0 else None,
        world_size=world,
        source_run_id=record["run_id"],
        source_provenance=record["provenance"],
        ops=[t for t in ops if t.rank == slowest],
        load_start=load_start,
    )


def simulated_record(record: dict, proj: Projection, command: str) -> dict:
    """`record` re-labelled `simulated`, with the projection's throughput, how it was computed, and the
    `python -m suite simulate` command that made it. Its `timing` is the projection's own (the machine's load
    average when it began and now), never the source's: a projection measures nothing of the source's run."""
    rec = copy.deepcopy(record)
    rec.pop("_path", None)
    steps = rec["totals"]["steps"]
    rec.update(
        {
            "run_id": f"sim-{proj.topology.name}-{record['run_id']}",
            "command": command,
            "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "status": "complete",
            "provenance": "simulated",
            "curve": [],
            "throughput": {
                "tokens_per_s": proj.tokens_per_s,
                "samples_per_s": None,
                "step_s": proj.step_s,
                "mfu": proj.mfu,
            },
            "simulation": {
                **{k: v for k, v in asdict(proj).items() if k not in ("topology", "ops", "load_start")},
                "topology": proj.topology.describe(),
                "ops": [asdict(t) for t in proj.ops],
            },
        }
    )
    rec["totals"]["wall_s"] = steps * proj.step_s
    rec["timing"] = load_timing(load_average() if proj.load_start is None else proj.load_start)
    rec["env"].update(
        {
            "device": "cuda",
            "device_name": proj.topology.gpu,
            "backend": "nccl (simulated)",
            "peak_flops": proj.topology.peak_flops,
            "gpus_per_node": proj.topology.gpus_per_node,
        }
    )
    return rec


def format_projection(proj: Projection) -> str:
    """The projection as text, with every assumption it rests on."""
    t = proj.topology
    lines = [
        f"SIMULATED projection of {proj.source_run_id} ({proj.source_provenance} ledger) on {t.name}",
        f"  topology: {t.gpus_per_node} x {t.gpu} per node; intra-node {t.intra.name} "
        f"{t.intra.bandwidth / 1e9:g} GB/s, {t.intra.latency * 1e6:g} us; inter-node {t.nics_per_node} x "
        f"{t.inter.name} {t.inter.bandwidth / 1e9:g} GB/s, {t.inter.latency * 1e6:g} us",
        f"  algorithm: {proj.algorithm} (alpha-beta); world size {proj.world_size}",
        f"  overlap assumption: {proj.overlap:g} of min(compute, communication) hidden (0 = none, 1 = perfect)",
        f"  compute: {proj.compute_source}",
        "",
        f"  {'op':<15}{'group':<22}{'n':>5} {'tier':<12}{'calls/step':>11}{'MB/step':>12}{'ms/step':>11}",
    ]
    for o in sorted(proj.ops, key=lambda o: -o.seconds):
        lines.append(
            f"  {o.op:<15}{o.group[:21]:<22}{o.group_size:>5} {o.tier[:11]:<12}{o.calls:>11.2f}"
            f"{o.payload / 1e6:>12.2f}{o.seconds * 1e3:>11.3f}"
        )
    low, high = proj.step_s_bounds
    lines += [
        "",
        f"  communication {proj.comm_s * 1e3:.3f} ms/step (slowest rank), compute {proj.compute_s * 1e3:.3f} ms/step",
        f"  step {proj.step_s * 1e3:.3f} ms (perfect overlap {low * 1e3:.3f}, none {high * 1e3:.3f}); "
        f"{proj.tokens_per_s:,.0f} tokens/s" + (f"; MFU {proj.mfu:.3f}" if proj.mfu is not None else ""),
    ]
    return "\n".join(lines)
