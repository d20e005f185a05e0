"""`python -m suite simulate`: a record's ledger projected onto a cluster topology, printed and optionally written
as a record labelled simulated."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from suite.errors import UsageError


def simulate(args: argparse.Namespace, command: str) -> int:
    """Project the record `args.record` onto `args.topology` (overlap, MFU or measured compute, algorithm); with
    `args.write`, write the simulated record (`command` is the command line it records) and print its path last."""
    from suite.records import RecordError, read_record, write_record
    from suite.run.checks import check_writable
    from suite.sim import format_projection, get_topology, project, simulated_record

    try:
        record = read_record(args.record)
    except FileNotFoundError:
        raise UsageError(f"no record at {args.record!r}; give the path `run` or `estimate` printed") from None
    except OSError as err:
        raise UsageError(f"cannot read {args.record!r} ({err.strerror}); give a readable record") from None
    except RecordError as err:
        raise UsageError(str(err)) from None
    for flag, value in (("--overlap", args.overlap), ("--mfu", args.mfu), ("--compute-s", args.compute_s)):
        if value is not None and not math.isfinite(value):  # a NaN passes every comparison and breaks the record
            raise UsageError(f"{flag} must be a finite number, got {value}")
    compute = (args.compute_s, f"given: {args.compute_s} s per step") if args.compute_s is not None else None
    try:
        proj = project(record, get_topology(args.topology), args.overlap, args.mfu, args.algorithm, compute)
    except ValueError as err:
        raise UsageError(str(err)) from None
    print(format_projection(proj))
    if args.write:
        check_writable(Path(args.write))
        sim = simulated_record(record, proj, command)
        print(write_record(sim, Path(args.write) / f"{sim['run_id']}.json"))
    return 0
