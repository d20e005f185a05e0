"""Start N workers with torch.distributed.run (torchrun): gloo on CPU, NCCL on CUDA.

On one machine the launcher starts the workers through torchrun's own API (`elastic_launch`, what
`torchrun --standalone` runs); on many machines users start torchrun
themselves with its rendezvous flags and `-m suite run ...`, which then trains in place (README).
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.launcher.api import LaunchConfig, elastic_launch

from suite.config import RunConfig
from suite.records import FINISHED, RecordError, read_record
from suite.run import reserve
from suite.run.faults import LAUNCHER_PID
from suite.run.limits import oom_kills
from suite.run.recorder import failed_record, new_run_id


def under_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ or "LOCAL_RANK" in os.environ


def launch(cfg: RunConfig) -> Path:
    """Run `cfg` on cfg.nproc local workers; returns the record's path (written even when it failed)."""
    if cfg.run_id is None:
        cfg.run_id = new_run_id(cfg)
    if cfg.emulate:
        return _emulated(cfg)
    with tempfile.TemporaryDirectory(prefix="suite-launch-") as tmp:
        spec = Path(tmp) / "run.json"
        spec.write_text(cfg.to_json())
        kills = oom_kills()
        try:
            # each restart resumes from the newest checkpoint (suite/run/resume.py)
            start_workers(cfg.nproc, cfg.run_id, cfg.max_restarts, "suite.run.worker", spec)
        except ChildFailedError as err:
            rank, failure = err.get_first_failure()
            oom = kills is not None and (oom_kills() or 0) > kills
            _mark_failed(cfg, f"worker {rank} {exit_text(failure.exitcode, oom)}")
        finally:
            reserve.release(cfg.record_path())  # a worker killed before its last write left it
    return cfg.record_path()


def _emulated(cfg: RunConfig) -> Path:
    """cfg.nproc logical workers as threads of this process (suite/run/emulate.py)."""
    from suite.run.emulate import WorkerFailed, run_threads
    from suite.run.train import train

    since = time.time()  # the workers start now, in a process that may have run a plan's earlier runs
    try:
        run_threads(cfg, lambda worker_cfg: train(worker_cfg, since=since))
    except WorkerFailed as err:
        _mark_failed(cfg, str(err))
    finally:
        reserve.release(cfg.record_path())
    return cfg.record_path()


def start_workers(nproc: int, run_id: str, max_restarts: int, module: str, spec: Path) -> None:
    """`python -m module spec` on `nproc` local workers under torchrun; ChildFailedError when one fails."""
    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=nproc,
        run_id=run_id,
        rdzv_backend="c10d",
        rdzv_endpoint="localhost:0",
        max_restarts=max_restarts,
        monitor_interval=0.1,
    )
    # Workers get the allocator's defaults: the glibc thresholds once set here made every timed step
    # 1.7-1.9x slower and changed no tensor-level peak (issue 19; numbers in suite/meters/memory.py).
    # torchrun's command line sets this; its API does not, and oversubscribed threads cost 5-10x here. Set for
    # this launch only: left in the environment, a plan's first launch (1 worker, 2 threads) gave its 2 and 4
    # workers 2 threads each too (results/dion-smoke: DDP at 4 ranks 5-10x slower per step than sdp-smoke's).
    # A value the user set is kept.
    chosen = os.environ.get("OMP_NUM_THREADS")
    if chosen is None:
        os.environ["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // nproc))
    os.environ[LAUNCHER_PID] = str(os.getpid())  # the workers end when this process does (suite/run/faults.py)
    try:
        elastic_launch(config, sys.executable)("-m", module, str(spec))
    finally:
        if chosen is None:
            os.environ.pop("OMP_NUM_THREADS", None)


def exit_text(code: int, oom: bool = False) -> str:
    if oom and code == -signal.SIGKILL:  # the cgroup's oom_kill count rose while the workers ran
        return "was killed by the kernel's out-of-memory killer (SIGKILL): lower micro_batch, seq_len or --nproc"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            pass
    return f"exited with status {code}"


def _mark_failed(cfg: RunConfig, error: str) -> None:
    """The launcher's account of a failed run: which worker failed first, then what rank 0 saw (it writes the
    record when it can, but a worker waiting on a dead peer only sees the connection drop). The record says
    `incomplete` when a checkpoint can resume the run, `failed` otherwise."""
    # imported here: checkpoints bring DCP and DTensor, 1 s of every launch that ends well
    from suite.run.checkpoint import newest_intact, run_folder

    resumable = newest_intact(run_folder(cfg))[0] is not None

    def account(seen: str | None) -> str:
        text = error + (f"; rank 0 reported: {seen}" if seen else "")
        if resumable and "--resume" not in text:
            text += f"; resume it with python -m suite run --resume {cfg.record_path()}"
        return text

    close_record(cfg, "incomplete" if resumable else "failed", account)


def close_record(cfg: RunConfig, status: str, account: Callable[[str | None], str]) -> None:
    """Write `cfg`'s record with `status` and the error `account(what the workers had written)`; a finished
    (complete or diverged) record stays as it is, and a missing or unreadable one is made from the config."""
    path = cfg.record_path()
    try:
        rec = read_record(path)
    except (RecordError, OSError):
        rec = failed_record(cfg, cfg.nproc, "")
    if rec["status"] in FINISHED:
        return
    rec["status"], rec["error"] = status, account(rec.get("error") or None)
    try:
        reserve.write_last(rec, path)
    except OSError as err:  # a full disk even so: the run's own account goes to stderr instead
        print(f"could not write the record {path} ({err}); the run ended: {rec['error']}", file=sys.stderr)
