"""Tables from this reproduction's records: bytes per step per tier beside the ring formulas (formulas.py), and the
paper-scale projections re-priced for other F and inter-node bandwidths (labelled simulated).

    python -m reproductions.fl_fsdp.projection results/fl-fsdp-smoke

Tiers: FL methods label their groups intra-group (shard, replicate) and inter-group (fed); the baselines'
groups are mapped the way the ring model's table does (docs/sources.md#fl-fsdp: FSDP's one mesh and HSDP's
replicate dimension span the groups, HSDP's shard dimension stays inside one). Re-pricing scales the fed
all-reduce of an estimate taken at F = 1 to a period of F steps (the bytes fall as 1 / F,
tests/test_fl_fsdp_*.py) and the topology's inter-node link rate by a factor, then projects with suite.sim as
`suite reproduce` does.
"""

from __future__ import annotations

import copy
import dataclasses
import sys
from pathlib import Path

from reproductions.fl_fsdp.formulas import ring_bytes
from reproductions.fl_fsdp.mesh import INTER, INTRA
from suite.meters.comm import wire_bytes
from suite.records import read_record
from suite.sim import get_topology, project
from suite.sim.project import comm_times

BASELINE_TIERS = {("fsdp", "shard"): INTER, ("hsdp", "shard"): INTRA, ("hsdp", "replicate"): INTER}
PAIRS = (("fl-fsdp", "fsdp"), ("fl-hsdp", "hsdp"), ("fl-fsdp", "hsdp"), ("fl-hsdp", "fsdp"))


def tier_of(record: dict, op: dict) -> str:
    return BASELINE_TIERS.get((record["method"], op["group"]), op.get("tier") or "unlabelled")


def wire_per_tier(record: dict, rank: int = 0) -> dict[str, float]:
    """Ring-formula wire bytes per step of `rank`, by tier."""
    out = {INTRA: 0.0, INTER: 0.0}
    for op in record["comm"]["per_rank"][rank]["ops"]:
        tier = tier_of(record, op)
        out[tier] = out.get(tier, 0.0) + op["wire_bytes"] / record["comm"]["steps"]
    return out


def formula(record: dict) -> dict[str, float] | None:
    """The ring model (formulas.py) for the record's configuration (b: the gathered parameters' bytes)."""
    method, v, mesh = record["method"], record["variant"], record["parallel"]["mesh"]
    p, n = record["model"]["params"], record["parallel"]["world_size"]
    b = 2 if v.get("precision") == "bf16" else 4
    wide = {"b_reduce": 4, "b_param": 4}  # FSDP2's policy reduces in fp32; parameters are stored in fp32
    if method == "fsdp":
        return ring_bytes("fsdp", p, b, n, **wide)
    if method == "hsdp":
        return ring_bytes("hsdp", p, b, n, s=mesh["shard"], **wide)
    if method in ("fl-fsdp", "fl-hsdp"):
        g, s = mesh["replicate"] * mesh["shard"], mesh["shard"]
        return ring_bytes("fl-hsdp" if mesh["replicate"] > 1 else "fl-fsdp", p, b, n, g, s, v["F"], **wide)
    return None


def tier_rows(records: list[dict]) -> list[str]:
    lines = [
        "| provenance | method | world | mesh | F | intra-group MB/step (formula) | inter-group MB/step (formula) |",
        "|---|---|---|---|---|---|---|",
    ]
    seen = set()
    for rec in sorted(records, key=lambda r: (r["provenance"], r["parallel"]["world_size"], r["method"])):
        ring = formula(rec)
        key = (rec["provenance"], rec["method"], rec["parallel"]["world_size"], str(rec["parallel"]["mesh"]))
        if ring is None or key in seen or rec["provenance"] == "simulated" or not rec["comm"].get("steps"):
            continue
        seen.add(key)
        got = wire_per_tier(rec)
        cells = [f"{got[t] / 1e6:,.3f} ({ring[t] / 1e6:,.3f})" for t in (INTRA, INTER)]
        mesh = "x".join(f"{k}{v}" for k, v in rec["parallel"]["mesh"].items())
        lines.append(
            f"| {key[0]} | {key[1]} | {key[2]} | {mesh} | {rec['variant'].get('F', '-')} | " + " | ".join(cells) + " |"
        )
    return lines


def repriced(record: dict, f: int) -> dict:
    """`record` (an estimate at F = 1) with its fed all-reduce spread over a period of F steps."""
    rec = copy.deepcopy(record)
    f0 = rec["variant"].get("F", 1)
    for entry in rec["comm"]["per_rank"]:
        for op in entry["ops"]:
            if op["group"] == "fed":
                for k in ("count", "bytes", "wire_bytes"):
                    op[k] = op[k] * f0 / f
    rec["variant"] = {**rec["variant"], "F": f}
    return rec


def tokens_per_s(record: dict, bandwidth_scale: float, topology: str) -> float:
    topo = get_topology(topology)
    inter = dataclasses.replace(topo.inter, bandwidth=topo.inter.bandwidth * bandwidth_scale)
    return project(record, dataclasses.replace(topo, inter=inter)).tokens_per_s


def projection_rows(records: list[dict], topology: str, fs=(1, 2, 8, 32), scales=(0.25, 1.0, 4.0)) -> list[str]:
    """Simulated tokens/s ratios FL / baseline at paper scale for each F and inter-node bandwidth factor."""
    est = {r["method"]: r for r in records if r["provenance"] == "estimated" and r["parallel"]["world_size"] >= 64}
    lines = [
        f"SIMULATED on {topology} (alpha-beta, no overlap, compute = FLOPs / (peak x 0.4)); ratio of tokens/s",
        "",
        "| pair | inter-node bandwidth x | " + " | ".join(f"F={f}" for f in fs) + " |",
        "|---|---|" + "---|" * len(fs),
    ]
    for method, baseline in PAIRS:
        if method not in est or baseline not in est:
            continue
        for scale in scales:
            base = tokens_per_s(est[baseline], scale, topology)
            cells = [f"{tokens_per_s(repriced(est[method], f), scale, topology) / base:.2f}" for f in fs]
            lines.append(f"| {method}/{baseline} | {scale:g} | " + " | ".join(cells) + " |")
    return lines


def node_tier_rows(records: list[dict], topology: str) -> list[str]:
    """Paper-scale wire bytes per rank per step by the physical tier each group spans on `topology` (rank 0):
    where FL+HSDP's intra-group replicate all-reduce crosses nodes, it moves about HSDP's inter-node bytes."""
    topo = get_topology(topology)
    lines = [
        f"Estimated ledgers placed on {topology} (rank 0; wire bytes by the ring formula, GB per step)",
        "",
        "| method | mesh | F | intra-node | inter-node | inter-node collectives per step (group size) |",
        "|---|---|---|---|---|---|",
    ]
    for rec in sorted(records, key=lambda r: r["method"]):
        if rec["provenance"] != "estimated" or rec["parallel"]["world_size"] < 64:
            continue
        by_tier: dict[str, float] = {}
        groups: dict[str, str] = {}
        for t in comm_times(rec, topo, "ring"):
            if t.rank != 0:
                continue
            by_tier[t.tier] = by_tier.get(t.tier, 0.0) + wire_bytes(t.op, t.payload, t.group_size)
            if t.tier == topo.inter.name:
                groups[t.group] = f"{t.group} {t.calls:g} x {t.op} ({t.group_size})"
        mesh = "x".join(f"{k}{v}" for k, v in rec["parallel"]["mesh"].items())
        intra, inter = by_tier.get(topo.intra.name, 0.0), by_tier.get(topo.inter.name, 0.0)
        f = rec["variant"].get("F", "-")
        crossing = "; ".join(groups.values())
        lines.append(f"| {rec['method']} | {mesh} | {f} | {intra / 1e9:,.2f} | {inter / 1e9:,.2f} | {crossing} |")
    return lines


def main(folder: str) -> None:
    records = [read_record(p) for p in sorted(Path(folder).glob("*.json"))]
    records = [r for r in records if r.get("status") == "complete" and r.get("comm")]
    print("\n".join(tier_rows(records)))
    print()
    print("\n".join(node_tier_rows(records, "4xA100-nvlink-4x200gbIB")))
    print()
    print("\n".join(projection_rows(records, "4xA100-nvlink-4x200gbIB")))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "results/fl-fsdp-smoke")
