"""The local launcher: a reproduction's plan run on this machine. Its runs go to torchrun here, those that may
share a launch in one launch per world size and device (suite/plan/multirun.py), an incomplete run resumes from
its checkpoint, and a signal stops the plan with the run in progress recorded `incomplete`; then its estimates
and microbenchmark items (suite/plan/items.py).

Which items are skipped and which records a new one supersedes is suite/plan/folder.py, shared with the SLURM
launcher (suite/plan/slurm.py); the `reproduce` command around both is suite/plan/command.py.
"""

from __future__ import annotations

import signal
from collections import defaultdict
from pathlib import Path

from torch.distributed.elastic.multiprocessing.api import SignalException

from suite.config import RunConfig
from suite.plan.folder import Folder, Interrupted, done_run, item_count, plan_run, say
from suite.plan.items import run_items_here
from suite.plan.multirun import launch_runs, shares_launch
from suite.plan.plans import Plan
from suite.records import read_record, write_record
from suite.run.checkpoint import CheckpointError, latest, resumable_config, run_folder
from suite.run.launch import close_record, launch
from suite.run.lock import one_writer
from suite.run.recorder import failed_record, new_run_id
from suite.timing import PlanTimer


class LocalLauncher:
    """Workers on this machine (the interface: suite.plan.launchers.Launcher)."""

    on_this_machine = True  # the runs are checked against this machine's devices, memory and cores

    def run(self, plan: Plan, results: Path, fresh: bool, timer: PlanTimer) -> tuple[list[dict], int]:
        """The plan's records and how many runs left none (none here: a failed run is recorded failed)."""
        return run_plan(plan, results, fresh, timer), 0

    def dry_run(self, plan: Plan, results: Path, fresh: bool) -> None:
        from suite.plan.dry_run import show_plan

        show_plan(plan, results, fresh)


def run_plan(plan: Plan, results: Path, fresh: bool = False, timer: PlanTimer | None = None) -> list[dict]:
    """Every item of the plan in order, skipping those done (unless `fresh`); a failed run is recorded and
    the plan goes on. Returns the plan's records, skipped items' included; Interrupted on a signal.
    `timer` collects where the time went (suite/timing.py)."""
    with one_writer(results, f"reproduce {plan.name}"):
        folder = Folder(results, timer)
        total = item_count(plan)
        try:
            return run_runs(plan, folder, fresh, total) + run_items_here(plan, folder, fresh, len(plan.runs), total)
        except KeyboardInterrupt:
            raise Interrupted(signal.SIGINT) from None
        except SignalException as err:  # torchrun's agent turns SIGINT and SIGTERM into this once it has run
            raise Interrupted(err.sigval) from None


def run_runs(plan: Plan, folder: Folder, fresh: bool, total: int) -> list[dict]:
    """The plan's runs, in order of the plan's list: skipped when done; those that may share a launch
    (suite/plan/multirun.py) in one launch per world size and device, the others in a launch each."""
    out: dict[int, dict] = {}
    shared: dict[tuple, list[tuple[int, str, RunConfig]]] = defaultdict(list)
    for i, cfg in enumerate(plan.runs, 1):
        cfg, progress = plan_run(cfg, folder.path), f"{i}/{total}"
        if (done := _done_run(cfg, folder, progress, fresh)) is not None:
            out[i] = done
        elif shares_launch(cfg) and _resumable([] if fresh else folder.records_of(cfg.command), cfg) is None:
            shared[(cfg.nproc, cfg.device)].append((i, progress, cfg))
        else:
            out[i] = launch_item(cfg, folder, progress, fresh)
    for group in shared.values():
        if len(group) == 1:
            i, progress, cfg = group[0]
            out[i] = launch_item(cfg, folder, progress, fresh)
        else:
            out.update(_launch_shared(group, folder))
    return [out[i] for i in sorted(out)]


def _launch_shared(group: list[tuple[int, str, RunConfig]], folder: Folder) -> dict[int, dict]:
    """Runs of one world size in one launch; their records by plan position."""
    cfgs = [cfg for _, _, cfg in group]
    for cfg in cfgs:
        cfg.run_id = cfg.run_id or new_run_id(cfg)
    say(f"one launch of {cfgs[0].nproc} workers for runs {', '.join(p for _, p, _ in group)}")
    made: list[dict] = []
    with folder.timer.launch(made):
        try:
            paths = launch_runs([(f"[{progress}] {cfg.command}", cfg) for _, progress, cfg in group])
        except (KeyboardInterrupt, SignalException) as err:
            # the runs done settle; the one in progress (the first not complete) says it was interrupted
            for cfg in cfgs:
                _close_interrupted(cfg, err)
                _settle(folder, cfg.record_path())
                if read_record(cfg.record_path())["status"] != "complete":
                    break
            raise
        except Exception as err:  # the launcher itself failed: every run it did not finish is recorded failed
            for cfg in cfgs:
                close_record(cfg, "failed", lambda seen, err=err: f"the launcher failed: {err}")
            paths = [cfg.record_path() for cfg in cfgs]
        made += [_settle(folder, path) for path in paths]
    return {i: rec for (i, _, _), rec in zip(group, made, strict=True)}


def _done_run(cfg: RunConfig, folder: Folder, progress: str, fresh: bool) -> dict | None:
    done = done_run(cfg, folder, fresh)
    if done is not None:
        say(f"skip [{progress}] {cfg.command}: {done['status']} record {done['_path']}")
    return done


def launch_item(cfg: RunConfig, folder: Folder, progress: str, fresh: bool) -> dict:
    """One planned run in a launch of its own (resumed from its checkpoint where one can)."""
    say(f"[{progress}] {cfg.command}")
    cfg.run_id = cfg.run_id or new_run_id(cfg)
    made: list[dict] = []
    with folder.timer.launch(made):
        try:
            path = _run_one(cfg, [] if fresh else folder.records_of(cfg.command))
        except (KeyboardInterrupt, SignalException) as err:
            _close_interrupted(cfg, err)
            _settle(folder, cfg.record_path())  # a run that completed as the signal came still replaces older ones
            raise
        record = _settle(folder, path)
        made.append(record)
    say(str(path))
    return record


def _run_one(cfg: RunConfig, existing: list[dict]) -> Path:
    """Run one planned configuration; returns its record's path (written even when the run failed).

    `existing`: the folder's earlier records of this configuration (none under --fresh). An incomplete one
    that a checkpoint can resume is resumed (`run --resume`) instead of started again.
    """
    try:
        resumed = _resumable(existing, cfg)
        if resumed is not None:
            say(f"resume {resumed.record_path()} from {latest(run_folder(resumed))}")
        return launch(resumed or cfg)
    except (KeyboardInterrupt, SignalException):
        raise
    except Exception as err:  # the launcher itself failed (no rendezvous, no fork): recorded, the plan goes on
        write_record(failed_record(cfg, cfg.nproc, f"the launcher failed: {err}"), cfg.record_path())
        return cfg.record_path()


def _resumable(existing: list[dict], planned: RunConfig) -> RunConfig | None:
    """The planned config continuing the newest incomplete record of the configuration from its checkpoint,
    when the checkpoints beside it are of that very configuration (suite.run.checkpoint.resumable_config)."""
    for rec in sorted((r for r in existing if r["status"] == "incomplete"), key=lambda r: r["created"], reverse=True):
        try:
            return resumable_config(rec, planned)
        except CheckpointError as err:
            if (rec.get("faults") or {}).get("checkpoint_every"):  # it made checkpoints: say why they are not used
                say(f"not resuming {rec['_path']}: {err}")
    return None


def _close_interrupted(cfg: RunConfig, err: BaseException) -> None:
    """The interrupted run's record says `incomplete`, with the signal (written here if no worker could)."""
    sig = signal.Signals(getattr(err, "sigval", signal.SIGINT)).name

    def account(seen: str | None) -> str:
        return f"interrupted by {sig}: the plan was stopped" + (f"; the workers reported: {seen}" if seen else "")

    close_record(cfg, "incomplete", account)


def _settle(folder: Folder, path: Path) -> dict:
    record = read_record(path)
    folder.add(record, path)
    return record
