"""What `reproduce --dry-run` prints for the local launcher: the plan (preset, protocol, notes), each item's command
in the order the plan would make it, the items a finished record in --results already covers (they would be
skipped, in the words the plan itself uses), and the claim cards the plan's records would be judged against.

A dry run reads the results folder and nothing else: it writes no record, takes no lock and writes no summary or
report, so it can be run beside a plan that is writing into the same folder.
"""

from __future__ import annotations

from pathlib import Path

from suite.plan.folder import Folder, done_run, item_count, plan_run
from suite.plan.items import (
    done_estimate,
    done_micro,
    done_projection,
    estimate_command,
    micro_command,
    projection_command,
)
from suite.plan.plans import Estimate, Plan
from suite.plan.summary import claim_cards


def show_plan(plan: Plan, results: Path, fresh: bool) -> None:
    """Print the plan as the local launcher would run it into `results` (`fresh`: nothing skipped)."""
    folder, total = Folder(results), item_count(plan)
    print(f"plan {plan.name}, preset {plan.preset}, protocol: {plan.protocol}; records in {results}")
    for note in plan.notes:
        print(f"note: {note}")
    for i, cfg in enumerate(plan.runs, 1):
        cfg = plan_run(cfg, results)
        _item(f"{i}/{total}", cfg.command, done_run(cfg, folder, fresh))
    for i, est in enumerate(plan.estimates, len(plan.runs) + 1):
        done = done_estimate(est, folder, fresh)
        _item(f"{i}/{total}", estimate_command(est, results), done)
        _projections(est, done, f"{i}/{total} projection", folder)
    for i, item in enumerate(plan.micro, len(plan.runs) + len(plan.estimates) + 1):
        _item(f"{i}/{total}", micro_command(plan, item, results), done_micro(plan, item, folder, fresh))
    print(claim_cards(plan))


def _projections(est: Estimate, estimate: dict | None, progress: str, folder: Folder) -> None:
    """The estimate's projections: their commands name the estimate's record, known only when it is made."""
    for topology in est.topologies:
        if estimate is None:
            _item(progress, f"onto {topology} at mfu {est.mfu}, from the estimate's new record", None)
        else:
            command = projection_command(Path(estimate["_path"]), topology, est.mfu, folder.path)
            _item(progress, command, done_projection(estimate, topology, est.mfu, folder))


def _item(progress: str, command: str, done: dict | None) -> None:
    """One item: the line the plan prints as it makes the item, or as it skips it."""
    if done is None:
        print(f"[{progress}] {command}")
    else:
        print(f"skip [{progress}] {command}: {done['status']} record {done['_path']}")
