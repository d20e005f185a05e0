"""`python -m suite verdicts`: every claim's verdict over the records of the folders given, as a table or JSON, with
where each folder's records come from (one clean commit, or not)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from suite.errors import ClaimsError, UsageError
from suite.records import shown_path

GPU_CHECK = "benchmarks/gpu_check.py"  # what a GPU check's summary.json names ("what"; docs/gpu-check.md)


def gpu_checks(folder: Path) -> list[Path]:
    """The folders below `folder` that hold a GPU check's records (its summary.json names GPU_CHECK): runs
    shortened and items cut at each step's share of the check's budget, a check of the machinery, not a plan run.
    No plan run's report reads them (a report reads its reproduction's plan runs, suite/plan/command.py plan_runs;
    reports/gpu shows them apart, said to be a check), so `verdicts` over a folder above one leaves it out; named
    itself, it is read like any folder."""
    return [
        s.parent
        for s in sorted(Path(folder).rglob("summary.json"))
        if s.parent != Path(folder) and is_gpu_check(s.parent)
    ]


def is_gpu_check(folder: Path) -> bool:
    """Whether `folder` holds a GPU check: its summary.json names GPU_CHECK."""
    try:
        return GPU_CHECK in str(json.loads((Path(folder) / "summary.json").read_text()).get("what", ""))
    except (OSError, ValueError, AttributeError):
        return False


def verdicts(folders: list[str], as_json: bool = False) -> int:
    """Print the verdict of every claim the records of `folders` bear on; exit status 0."""
    from suite.judge.verdicts import origin, verdict_rows, verdict_table
    from suite.records import load_records

    records, origins = [], []
    for folder in folders:
        if not Path(folder).is_dir():
            raise UsageError(f"no results folder {shown_path(folder)}; give folders that hold run records")
        checks = gpu_checks(Path(folder))
        loaded, skipped = load_records(folder)
        found = [r for r in loaded if not any(Path(r["_path"]).is_relative_to(c) for c in checks)]
        origins += [
            f"{shown_path(c)}: left out, a GPU check's records ({GPU_CHECK}; its own report; name it to judge it)"
            for c in checks
        ]
        # a damaged record judged nothing: never left out without a word (the report names them too)
        origins += [f"{shown_path(path)}: not read, {_reason(path, why)}" for path, why in skipped]
        records += found
        env = [r["env"] for r in found]
        commits = origin([e.get("git_sha") for e in env], [e.get("git_dirty") for e in env]) or "no run records"
        origins.append(f"{shown_path(folder)}: {commits}")
    try:
        rows = verdict_rows(records)
    except ClaimsError as err:
        raise UsageError(str(err)) from None
    print(json.dumps(rows, indent=1, default=str) if as_json else verdict_table(rows))
    # a folder's records from several commits or a dirty tree are no one reproducible state: said every time
    print("\n".join(origins), file=sys.stderr if as_json else sys.stdout)
    return 0


def _reason(path: str, why: str) -> str:
    """Why a file was not read, on one line and without its path again."""
    return " ".join(why.removeprefix(f"{path}: ").split())
