"""Run a reproduction's plan, print its comparison table, and write its HTML report."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from suite.config import command_line
from suite.launch import launch
from suite.micro import Microbench, micro_record
from suite.plans import Estimate, Plan
from suite.recorder import repository_path
from suite.records import read_record, summary_row, write_record

MB = 1e6


def run_plan(plan: Plan, results: Path) -> list[dict]:
    """Launch every run of the plan in order; a failed run is recorded and the plan goes on."""
    records = []
    for i, cfg in enumerate(plan.runs, 1):
        cfg.results = str(results)
        cfg.command = f"{command_line(cfg)} --results {repository_path(results)}"
        print(f"[{i}/{len(plan.runs)}] {cfg.command}", file=sys.stderr, flush=True)
        path = launch(cfg)
        records.append(read_record(path))
        print(path, file=sys.stderr, flush=True)
    for i, est in enumerate(plan.estimates, 1):
        records += run_estimate(est, results, f"estimate {i}/{len(plan.estimates)}")
    for i, item in enumerate(plan.micro, 1):
        records.append(run_micro(plan, item, results, f"micro {i}/{len(plan.micro)}"))
    return records


def run_micro(plan: Plan, item: Microbench, results: Path, progress: str) -> dict:
    """Measure one microbenchmark item of `plan` in this process and write its record into `results`."""
    where = repository_path(results)
    command = f"python -m suite micro {plan.name} {item.name} --preset {plan.preset} --results {where}"
    print(f"[{progress}] {command}", file=sys.stderr, flush=True)
    record = micro_record(item, plan.name, command, str(results))
    print(write_record(record, results / f"{record['run_id']}.json"), file=sys.stderr, flush=True)
    return record


def run_estimate(est: Estimate, results: Path, progress: str) -> list[dict]:
    """The estimate's record and one simulated record per topology, written into `results`."""
    from suite.estimate import estimate
    from suite.sim import get_topology, project, simulated_record

    command = (
        f"{command_line(est.cfg, 'estimate')} --gpus-per-node {est.gpus_per_node} --results {repository_path(results)}"
    )
    print(f"[{progress}] {command}", file=sys.stderr, flush=True)
    record = estimate(dataclasses.replace(est.cfg, results=str(results), command=command), est.gpus_per_node)
    path = write_record(record, results / f"{record['run_id']}.json")
    print(path, file=sys.stderr, flush=True)
    out = [record]
    for name in est.topologies:
        sim = simulated_record(
            record,
            project(record, get_topology(name), mfu=est.mfu),
            f"python -m suite simulate {repository_path(path)} --topology {name} --mfu {est.mfu} "
            f"--write {repository_path(results)}",
        )
        print(write_record(sim, results / f"{sim['run_id']}.json"), file=sys.stderr, flush=True)
        out.append(sim)
    return out


def _label(rec: dict) -> str:
    """method, its parameters and its composition options: `b-sdp C=0.5+ac`."""
    v = dict(rec["variant"])
    extras = [
        x for x, on in (("ac", v.pop("ac", False)), (v.get("precision"), v.pop("precision", "fp32") != "fp32")) if on
    ]
    params = " ".join(f"{k}={val}" for k, val in sorted(v.items()))
    return "+".join([" ".join(filter(None, [rec["method"], params])), *extras])


def table(records: list[dict]) -> str:
    """tokens/s, peak memory per rank, bytes per step per rank and final loss, one row per run."""
    header = (
        f"{'run':<36} {'workers':>7} {'tokens/s':>9} {'peak MB/rank':>12} {'state MB/rank':>13} "
        f"{'comm MB/step/rank':>17} {'final val loss':>14} {'status':>9}"
    )
    lines = [header, "-" * len(header)]
    for rec in records:
        row = summary_row(rec)

        def fmt(value, scale=1.0, spec=".1f"):
            return "-" if value is None else format(value / scale, spec)

        lines.append(
            f"{_label(rec):<36} {row['world_size']:>7} {fmt(row['tokens_per_s'], spec=',.0f'):>9} "
            f"{fmt(row['peak_bytes_max'], MB):>12} {fmt(row['state_bytes_max'], MB):>13} "
            f"{fmt(row['comm_bytes_per_rank_step'], MB, '.2f'):>17} "
            f"{fmt(row['final_val_loss'], spec='.4f'):>14} {rec['status']:>9}"
        )
    return "\n".join(lines)
