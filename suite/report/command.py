"""`python -m suite report`: an HTML report from run records alone, or the index of built report folders."""

from __future__ import annotations

import argparse
from pathlib import Path

from suite.errors import UsageError


def report(args: argparse.Namespace) -> int:
    """Build the report of `args.results_dir` into `args.output`, or with `args.site` the site index; prints the
    path of what it wrote."""
    from suite.report import build_report, build_site

    if args.site is not None:
        if args.results_dir:
            raise UsageError("give results folders or --site, not both (--site reads built report folders)")
        print(build_site(args.site))
        return 0
    if not args.results_dir:
        raise UsageError("give the folder that holds the run records, or --site DIR to index built reports")
    for folder in args.results_dir:
        if not Path(folder).is_dir():
            raise UsageError(f"no results folder {folder!r}; give the folder that holds the run records")
    print(build_report(args.results_dir, args.output))
    return 0
