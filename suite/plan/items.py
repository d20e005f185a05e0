"""The items of a plan that run in this process whatever the launcher: estimates (side by side, one per core)
with their projections onto topologies, and microbenchmark items. They need no cluster, so the SLURM launcher
runs them here while its jobs wait, as the local launcher runs them after its runs.

Each item is skipped when the results folder holds its finished record of the same configuration
(suite/plan/folder.py); the dry run asks the same questions (done_estimate, done_projection, done_micro).
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
from pathlib import Path

from suite.config import command_line
from suite.plan.folder import Folder, same_item, same_settings, say
from suite.plan.micro import Microbench, micro_record
from suite.plan.plans import Estimate, Plan
from suite.records import write_record
from suite.run.recorder import repository_path


def run_items_here(plan: Plan, folder: Folder, fresh: bool, before: int, total: int) -> list[dict]:
    """The plan's estimates (side by side, then their projections) and microbenchmark items; `before`: how
    many items (the runs) precede them in the plan's `[i/total]` count."""
    records = []
    items = [(f"{i}/{total}", est) for i, est in enumerate(plan.estimates, before + 1)]
    done = [_skip_estimate(est, folder, progress, fresh) for progress, est in items]
    with folder.timer.item("estimates"):
        made = iter(_estimates([item for item, rec in zip(items, done, strict=True) if rec is None], folder.path))
    for (progress, est), record in zip(items, done, strict=True):
        if record is None:
            record = next(made)
            folder.add(record, Path(record["_path"]))
        records += [record, *_projections(est, record, folder, progress)]
    for i, item in enumerate(plan.micro, before + len(plan.estimates) + 1):
        records.append(_micro_item(plan, item, folder, f"{i}/{total}", fresh))
    return records


def micro_command(plan: Plan, item: Microbench, results: Path) -> str:
    return f"python -m suite micro {plan.name} {item.name} --preset {plan.preset} --results {repository_path(results)}"


def run_micro(plan: Plan, item: Microbench, results: Path, progress: str) -> dict:
    """Measure one microbenchmark item of `plan` in this process and write its record into `results`."""
    command = micro_command(plan, item, results)
    say(f"[{progress}] {command}")
    record = micro_record(item, plan.name, command, str(results))
    path = write_record(record, results / f"{record['run_id']}.json")
    record["_path"] = str(path)
    say(str(path))
    return record


def done_micro(plan: Plan, item: Microbench, folder: Folder, fresh: bool) -> dict | None:
    """The item's finished record of this configuration, unless `fresh`: it is skipped."""
    return None if fresh else folder.done(micro_command(plan, item, folder.path), same_item(item))


def _micro_item(plan: Plan, item: Microbench, folder: Folder, progress: str, fresh: bool) -> dict:
    done = done_micro(plan, item, folder, fresh)
    if done is not None:
        say(f"skip [{progress}] {micro_command(plan, item, folder.path)}: {done['status']} record {done['_path']}")
        return done
    with folder.timer.item("microbenchmarks"):
        record = run_micro(plan, item, folder.path, progress)
    folder.add(record, Path(record["_path"]))
    return record


def estimate_command(est: Estimate, results: Path) -> str:
    where = repository_path(results)
    return f"{command_line(est.cfg, 'estimate')} --gpus-per-node {est.gpus_per_node} --results {where}"


def projection_command(source: Path, topology: str, mfu: float, results: Path) -> str:
    return (
        f"python -m suite simulate {repository_path(source)} --topology {topology} --mfu {mfu} "
        f"--write {repository_path(results)}"
    )


def _estimate(est: Estimate, results: Path, progress: str, processes: int | None = None) -> dict:
    from suite.estimate.scale import estimate

    command = estimate_command(est, results)
    say(f"[{progress}] {command}")
    cfg = dataclasses.replace(est.cfg, results=str(results), command=command)
    record = estimate(cfg, est.gpus_per_node, processes=processes)
    record["_path"] = str(write_record(record, results / f"{record['run_id']}.json"))
    say(record["_path"])
    return record


def _estimates(items: list[tuple[str, Estimate]], results: Path) -> list[dict]:
    """Estimate `items` ((progress, estimate) pairs): side by side, one per core, each stepping its ranks in
    turn, where there are cores for more than one. An estimate is CPU-bound Python on fake tensors, and its
    ranks are independent: this keeps every core busy with the imports paid once per core."""
    workers = min(len(items), os.cpu_count() or 1)
    if workers < 2:
        return [_estimate(est, results, progress) for progress, est in items]
    # spawn: fresh interpreters, with no fake process group or fake mode inherited (suite/estimate); a Pool,
    # not a ProcessPoolExecutor: leaving its block on Ctrl-C or a signal terminates the workers instead of
    # waiting for their estimates to finish
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        return pool.starmap(_estimate, [(est, results, progress, 1) for progress, est in items], chunksize=1)


def _project(source: dict, topology: str, mfu: float, results: Path) -> dict:
    from suite.sim import get_topology, project, simulated_record

    command = projection_command(Path(source["_path"]), topology, mfu, results)
    clean = {k: v for k, v in source.items() if k != "_path"}
    sim = simulated_record(clean, project(clean, get_topology(topology), mfu=mfu), command)
    sim["_path"] = str(write_record(sim, results / f"{sim['run_id']}.json"))
    say(sim["_path"])
    return sim


def run_estimate(est: Estimate, results: Path, progress: str) -> list[dict]:
    """The estimate's record and one simulated record per topology, written into `results`."""
    record = _estimate(est, results, progress)
    return [record, *(_project(record, name, est.mfu, results) for name in est.topologies)]


def done_estimate(est: Estimate, folder: Folder, fresh: bool) -> dict | None:
    """The estimate's finished record of this configuration, unless `fresh`: it is skipped."""
    from suite.estimate.scale import prepare

    command = estimate_command(est, folder.path)
    return None if fresh else folder.done(command, same_settings(dataclasses.asdict(prepare(est.cfg))))


def _skip_estimate(est: Estimate, folder: Folder, progress: str, fresh: bool) -> dict | None:
    done = done_estimate(est, folder, fresh)
    if done is not None:
        say(f"skip [{progress}] {estimate_command(est, folder.path)}: {done['status']} record {done['_path']}")
    return done


def done_projection(source: dict, topology: str, mfu: float, folder: Folder) -> dict | None:
    """The complete projection of the estimate `source` (a record in `folder`) onto `topology`, if made."""
    return folder.done(projection_command(Path(source["_path"]), topology, mfu, folder.path))


def _projections(est: Estimate, record: dict, folder: Folder, progress: str) -> list[dict]:
    """Each projection of the estimate `record`, skipped when done (made from the estimate it projects)."""
    out = []
    for name in est.topologies:
        sim = done_projection(record, name, est.mfu, folder)
        if sim is not None:
            sim_command = projection_command(Path(record["_path"]), name, est.mfu, folder.path)
            say(f"skip [{progress} projection] {sim_command}: complete record {sim['_path']}")
        else:
            with folder.timer.item("projections"):
                sim = _project(record, name, est.mfu, folder.path)
            folder.add(sim, Path(sim["_path"]))
        out.append(sim)
    return out
