"""`python -m suite reproduce`, in one place: suite/cli.py parses the arguments and hands them here.

A plan is checked before anything runs, so that a mistake costs one line naming the fix (UsageError, exit status 2)
instead of a half-run plan; then the launcher `--launcher` names (suite/plan/launchers.py) runs it, or prints it
(`--dry-run`), and its table, verdicts, report and summary follow, the same for every launcher. Each run is checked
as `run` checks one (suite/run/checks.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from suite.config import FIELDS
from suite.errors import UsageError
from suite.records import FINISHED
from suite.run.checks import check_config, check_writable

# type hints only: what the command runs is imported when it runs (as in suite/cli.py), so that suite.cli, which
# imports this module (plan_runs), starts without it
if TYPE_CHECKING:
    from suite.plan.launchers import Launcher
    from suite.plan.plans import Plan
    from suite.timing import PlanTimer


def reproduce(args: argparse.Namespace) -> int:
    """Run the plan `args` names (or print it: --dry-run). The exit status: 0 when every item finished, 1 when one
    did not, 128 + the signal when one stopped the plan."""
    from suite.plan.launchers import launcher_for
    from suite.timing import PlanTimer

    timer = PlanTimer()
    if args.list:
        return list_reproductions()
    plan, results = _plan(args)
    _check_claims(plan)
    launcher = launcher_for(args)
    _check_runs(plan, args, launcher.on_this_machine)
    for note in plan.notes:
        print(f"note: {note}", file=sys.stderr)
    if args.dry_run:
        launcher.dry_run(plan, results, args.fresh)
        return 0
    return _run(args, plan, results, launcher, timer)


def _plan(args: argparse.Namespace) -> tuple[Plan, Path]:
    """The plan `args` name, at their preset or this machine's default, and its results folder (checked)."""
    from suite.plan.plans import load_plan

    if args.name is None:
        raise UsageError("name a reproduction: python -m suite reproduce NAME (`--list` shows them)")
    preset = args.preset or default_preset()
    try:
        plan = load_plan(args.name, preset)
    except ValueError as err:
        raise UsageError(str(err)) from None
    results = Path(args.results or f"results/runs/{args.name}-{preset}")
    check_writable(results)
    return plan, results


def _check_claims(plan: Plan) -> None:
    """The claim cards the plan's records will be judged against load before anything runs: a card that cannot be
    judged (a field the records lack, sides that can never pair) is one line naming the fix, not a verdict missing
    after the plan's hours."""
    from suite.judge.claims import ClaimsError, claims_for
    from suite.plan.summary import judged_by

    try:
        for name in judged_by(plan):
            claims_for(name)
    except ClaimsError as err:
        raise UsageError(str(err)) from None


def _check_runs(plan: Plan, args: argparse.Namespace, here: bool) -> None:
    """Give every run how it is kept alive (--checkpoint-every, --max-restarts: not part of what the run is,
    config.OPERATIONAL), then check it; `here`: the runs run on this machine."""
    for cfg in plan.runs:
        for name, f in FIELDS.items():
            if f.metadata["reproduce"]:
                setattr(cfg, name, getattr(args, name))
    for cfg in plan.runs:
        # a cluster's nodes have the GPUs this machine (a login node) may lack
        check_config(cfg if here else dataclasses.replace(cfg, device="cpu"), here)


def _run(args: argparse.Namespace, plan: Plan, results: Path, launcher: Launcher, timer: PlanTimer) -> int:
    """Run the plan, then its table, verdicts, report and summary; the exit status."""
    from suite.plan.folder import Interrupted
    from suite.timing import render

    try:
        records, missing = launcher.run(plan, results, args.fresh, timer)
    except Interrupted as err:
        print(
            f"{err}: the records written so far stay in {results}; "
            "run the same command again to resume (complete records are skipped)",
            file=sys.stderr,
        )
        print(render(timer.breakdown()), file=sys.stderr)
        return 128 + err.signum
    _report(args, results, records, timer)
    return 0 if not missing and all(r["status"] in FINISHED for r in records) else 1


def _report(args: argparse.Namespace, results: Path, records: list[dict], timer: PlanTimer) -> None:
    """Print the plan's table and verdicts, write its report (and the reports' index), keep its summary."""
    from suite.extensions import get_reproduction
    from suite.plan.summary import table, verdict_summary, write_summary

    summary = f"{table(records)}\n\n{verdict_summary(records)}"
    print(summary)
    report = Path(args.report or f"reports/{args.name}")
    with timer.item("report"):
        try:
            from suite.report import build_report, build_site

            print(build_report(plan_runs(results, args.name), report))
        except ImportError as err:
            print(f"report not written: {err}", file=sys.stderr)
        if (own := get_reproduction(args.name).report) is not None:
            print(own(results, report))
        if args.report is None:  # reports/NAME: the index of all reproductions (reports/index.html) follows it
            print(build_site(report.parent))
    print(write_summary(results, summary, timer))


def plan_runs(results: Path, name: str) -> list[Path]:
    """`results` and the other plan runs of reproduction `name` beside it (NAME-PRESET folders, one per preset,
    as `reproduce` names them): one reproduction's report shows every preset's records."""
    from suite.extensions import get_reproduction

    siblings = [results.parent / f"{name}-{preset}" for preset in get_reproduction(name).presets]
    return sorted({results, *(p for p in siblings if p.is_dir())})


def list_reproductions() -> int:
    """`reproduce --list`: every reproduction found, with its description and what it adds."""
    from suite.extensions import reproductions

    found = reproductions()
    width = max((len(name) for name in found), default=0)
    for name, rep in sorted(found.items()):
        adds = [
            f"{len(items)} {kind}"
            for kind in ("methods", "optimizers", "meters", "pairs")
            if (items := getattr(rep, kind))
        ]
        print(f"{name:<{width}}  {rep.description}" + (f" [{', '.join(adds)}]" if adds else ""))
    return 0


def default_preset() -> str:
    import torch

    return "gpu" if torch.cuda.is_available() else "smoke"


def micro(args: argparse.Namespace) -> int:
    """`python -m suite micro NAME ITEM`: one microbenchmark item of a reproduction's plan; prints its record's path."""
    from suite.plan.items import run_micro
    from suite.plan.plans import load_plan

    try:
        plan = load_plan(args.name, args.preset)
    except ValueError as err:
        raise UsageError(str(err)) from None
    items = {item.name: item for item in plan.micro}
    if args.item not in items:
        known = ", ".join(items) or "none"
        raise UsageError(f"{args.name} ({args.preset}) has no microbenchmark {args.item!r}; its items: {known}")
    results = Path(args.results)
    check_writable(results)
    record = run_micro(plan, items[args.item], results, "micro")
    print(results / f"{record['run_id']}.json")
    return 0
