"""One launch for several runs of one world size: every worker process runs the runs in turn.

A separate launch per run pays, each time, for torchrun and its workers to start and for every worker to
import torch (5-15 s a launch on 2 cores, more than a smoke run's training). Here the workers start once and
give each run a world of its own, as a fresh launch would: a new default process group met in a store
prefix of the run's own (the earlier runs' gloo addresses stay in the agent's store, as after a restart:
suite/faults.attempt_store), a new Worker with its seed, ledger, meters and memory tracker, and the earlier
run's objects collected before the next is built. tests/test_multirun.py checks that each record equals the
record of a separate launch: losses, bytes, counts, FLOPs and memory categories.

What keeps a run alive is a separate launch's business: a run with checkpoints, restarts or an injected fault
(config.OPERATIONAL) is launched alone (`shares_launch`). A run that fails ends its worker process, as in a
separate launch (torchrun stops the others); the launcher records it failed and launches the runs after it
again.
"""

from __future__ import annotations

import datetime as dt
import gc
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

from suite.config import RunConfig
from suite.exit import leave
from suite.records import RecordError, read_record
from suite.run.faults import die_with_launcher
from suite.run.launch import close_record, exit_text, start_workers
from suite.run.recorder import new_run_id


def shares_launch(cfg: RunConfig) -> bool:
    """Whether `cfg` may run in a launch shared with other runs: nothing keeps it alive across failures, and its
    workers are processes (emulated ones are threads of their own launch, suite/run/emulate.py)."""
    return not (cfg.checkpoint_every or cfg.max_restarts or cfg.resume or cfg.fault_step is not None or cfg.emulate)


def _complete(cfg: RunConfig) -> bool:
    try:
        return read_record(cfg.record_path())["status"] == "complete"
    except (RecordError, OSError):
        return False


def launch_runs(runs: list[tuple[str, RunConfig]]) -> list[Path]:
    """Run `runs` ((progress line, config) pairs, one world size) in as few launches as failures allow;
    returns their records' paths in order (each written, a failed run's too)."""
    for _, cfg in runs:
        cfg.run_id = cfg.run_id or new_run_id(cfg)
    pending = list(runs)
    while pending:
        first = pending[0][1]
        with tempfile.TemporaryDirectory(prefix="suite-multirun-") as tmp:
            spec = Path(tmp) / "runs.json"
            spec.write_text(json.dumps([{"progress": p, "config": c.to_json()} for p, c in pending]))
            try:
                start_workers(first.nproc, first.run_id, 0, "suite.plan.multirun", spec)
                error = None
            except ChildFailedError as err:
                rank, failure = err.get_first_failure()
                error = f"worker {rank} {exit_text(failure.exitcode)}"
        done = 0
        while done < len(pending) and _complete(pending[done][1]):
            done += 1
        if done < len(pending):  # the first run without a complete record is the one that failed
            close_record(pending[done][1], "failed", _account(error or "the workers ended before it closed"))
            done += 1
        pending = pending[done:]
    return [cfg.record_path() for _, cfg in runs]


def _account(error: str) -> Callable[[str | None], str]:
    return lambda seen: error + (f"; rank 0 reported: {seen}" if seen else "")


def _store(index: int, timeout: dt.timedelta) -> dict:
    """init_process_group's store arguments for the `index`-th run of this launch: its own key prefix."""
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False, timeout=timeout)
    return {
        "store": dist.PrefixStore(f"suite/run{index}", store),
        "rank": int(os.environ["RANK"]),
        "world_size": int(os.environ["WORLD_SIZE"]),
    }


def main(spec: Path) -> None:
    """A worker of a shared launch: each run of `spec` in turn, in a world of its own."""
    from suite.run.train import train  # the worker's imports, paid once for every run of the launch

    since = None
    for index, item in enumerate(json.loads(spec.read_text())):
        cfg = RunConfig.from_json(item["config"])
        if os.environ.get("RANK") == "0":
            print(item["progress"], file=sys.stderr, flush=True)
        path = train(cfg, _store(index, dt.timedelta(seconds=cfg.collective_timeout_s)), since)
        gc.collect()  # the finished run's model, optimizer and buffers, before the next run measures memory
        if os.environ.get("RANK") == "0":
            print(path, file=sys.stderr, flush=True)
        since = time.time()


if __name__ == "__main__":
    die_with_launcher()
    main(Path(sys.argv[1]))
    leave(0)
