"""`python -m suite run`: one run launched on this machine's workers (or trained in place under a user's torchrun),
from a config the command line built (suite/cli.py), or continued from an incomplete run's record (`--resume`)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys

from suite.config import RunConfig
from suite.errors import UsageError
from suite.records import FINISHED, shown_path
from suite.run.checks import check_config


def resume_config(record_path: str) -> RunConfig:
    """The config of the incomplete run `record_path`, set to continue from its newest checkpoint."""
    from suite.records import RecordError, read_record
    from suite.run import checkpoint

    try:
        rec = read_record(record_path)
    except FileNotFoundError:
        raise UsageError(f"no record at {record_path!r}; give the path `run` printed") from None
    except RecordError as err:
        raise UsageError(str(err)) from None
    if rec["status"] in FINISHED:
        raise UsageError(f"{record_path} is {rec['status']}: nothing to resume")
    try:
        return checkpoint.resumable_config(rec | {"_path": record_path})
    except checkpoint.CheckpointError as err:
        raise UsageError(f"{record_path} cannot be resumed: {err}; run it again instead") from None


def run(cfg: RunConfig, over_limits: bool = False, resuming: bool = False) -> int:
    """Check `cfg`, then train it in place (under torchrun) or launch its workers; prints the record's path last.
    The exit status: 0 for a finished run, 1 for one that failed, 128 + the signal for one a signal stopped."""
    from suite.run.launch import launch, under_torchrun

    if under_torchrun():
        cfg.nproc = int(os.environ["WORLD_SIZE"])
    check_config(cfg, machine=not over_limits)
    if under_torchrun():
        from suite.run.train import train

        path = train(cfg)
        if int(os.environ.get("RANK", 0)) == 0:
            print(path)
        return 0
    from torch.distributed.elastic.multiprocessing.api import SignalException

    from suite.run.lock import one_writer

    try:
        with contextlib.ExitStack() as held:
            if resuming:  # one writer of the record's folder and of the checkpoints it continues (suite/run/lock.py)
                from suite.run.checkpoint import run_folder

                held.enter_context(one_writer(cfg.results, "run --resume"))
                held.enter_context(one_writer(run_folder(cfg), "run --resume of these checkpoints"))
            path = launch(cfg)
    except SignalException as err:  # SIGTERM or SIGINT while the workers ran: recorded, no traceback
        from suite.run.launch import close_record

        name = signal.Signals(err.sigval).name
        close_record(cfg, "incomplete", lambda seen: f"interrupted by {name}" + (f"; {seen}" if seen else ""))
        print(f"interrupted by {name}", file=sys.stderr)
        print(shown_path(cfg.record_path()))
        return 128 + err.sigval
    from suite.records import read_record

    record = read_record(path) if path.exists() else {"status": "failed", "error": None}
    if record["status"] not in FINISHED:  # torch's own lines end the console otherwise; this one says what happened
        error = record.get("error") or "no error recorded"
        print(f"error: the run ended {record['status']}: {error}; its record: {shown_path(path)}", file=sys.stderr)
    print(shown_path(path))
    return 0 if record["status"] in FINISHED else 1
