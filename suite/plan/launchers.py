"""The one interface a plan's launchers share, so that `reproduce` (suite/plan/command.py) runs, dry-runs and
reports a plan the same way whichever of them runs its runs: LocalLauncher (suite/plan/reproduce.py: workers on
this machine) and SlurmLauncher (suite/plan/slurm.py: one batch job per run). They are peers: both stand on
suite/plan/folder.py (the results folder, what is done, the planned runs) and suite/plan/items.py (the items
that run in this process), and neither imports the other.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Protocol, runtime_checkable

from suite.errors import UsageError
from suite.plan.plans import Plan
from suite.timing import PlanTimer


@runtime_checkable
class Launcher(Protocol):
    on_this_machine: bool  # whether the runs run here: then they are checked against this machine's devices

    def run(self, plan: Plan, results: Path, fresh: bool, timer: PlanTimer) -> tuple[list[dict], int]:
        """Run the plan into `results`, skipping what is done unless `fresh`; (the plan's records, how many
        runs left no record). Raises suite.plan.folder.Interrupted on a signal, what was written kept."""
        ...

    def dry_run(self, plan: Plan, results: Path, fresh: bool) -> None:
        """Print what `run` would do; run nothing, write nothing."""
        ...


def launcher_for(args: argparse.Namespace) -> Launcher:
    """The launcher `--launcher` names, with its options; UsageError for options it does not take."""
    from suite.plan.reproduce import LocalLauncher
    from suite.plan.slurm import SlurmLauncher, given, options_from_args

    if args.launcher == "slurm":
        return SlurmLauncher(options_from_args(args))
    if given(args):
        raise UsageError(f"{', '.join(given(args))}: options of --launcher slurm; add it, or drop them")
    return LocalLauncher()
