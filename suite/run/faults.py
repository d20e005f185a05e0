"""Faults: injected ones (tests, demonstrations), bounded waits, torchrun's restarts, and the record's account.

The record's `faults` section says how the run was kept alive (checkpoint cadence and folder, restarts
allowed, collective timeout, the injected fault) and lists each resume: the step it continued from, the
failure it recovered from (an injected fault leaves its rank, step and time in the run's checkpoint folder
before it strikes), the seconds from the failure to the new attempt's start (`restart_s`), to its first
step (`ready_s` after the start), the steps done again, and `recovery_s`: from the failure until the run
is past the step it died at.
"""

from __future__ import annotations

import ctypes
import datetime as dt
import json
import os
import signal
import sys
import threading
import time
import traceback
from types import ModuleType

import torch.distributed as dist

from suite.config import RunConfig
from suite.run.recorder import repository_path

LAUNCHER_PID = "SUITE_LAUNCHER_PID"  # set by suite.run.launch for its workers: the process they must not outlive
RENDEZVOUS_S = 300.0  # one machine's workers meet in seconds; one that waits this long waits for no one
_PR_SET_PDEATHSIG = 1  # linux/prctl.h
_met = threading.Event()


def die_with_launcher(poll_s: float = 0.5) -> None:
    """This worker ends when its launcher does: the kernel sends SIGKILL when the parent dies (Linux's
    PR_SET_PDEATHSIG; no library does it for torchrun's workers, which run in sessions of their own), and a
    thread watches the parent's pid everywhere else. Under suite.run.launch, a rendezvous that has not completed
    within RENDEZVOUS_S ends the worker too (`rendezvous_done` marks it complete)."""
    parent = int(os.environ.get(LAUNCHER_PID, os.getppid()))
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    deadline = time.monotonic() + RENDEZVOUS_S if LAUNCHER_PID in os.environ else None

    def watch() -> None:
        while True:
            if os.getppid() != parent:  # reparented: the launcher died (maybe before prctl above)
                os.kill(os.getpid(), signal.SIGKILL)
            if deadline is not None and not _met.is_set() and time.monotonic() > deadline:
                print(f"the workers did not meet within {RENDEZVOUS_S:g} s; stopping", file=sys.stderr, flush=True)
                os._exit(1)
            time.sleep(poll_s)

    threading.Thread(target=watch, name="launcher-watch", daemon=True).start()


def rendezvous_done() -> None:
    _met.set()


def restart_count() -> int:
    """How many times torchrun has restarted this run's workers (0 in the first attempt)."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))


def set_collective_timeout(seconds: float) -> dt.timedelta:
    """Every process group of the run, the ones methods and DeviceMesh create too, waits at most `seconds`
    for a collective: torch gives a new group its module's default timeout, not the world group's."""
    timeout = dt.timedelta(seconds=seconds)
    dist.distributed_c10d.default_pg_timeout = timeout
    dist.distributed_c10d.default_pg_nccl_timeout = timeout
    return timeout


def attempt_store(timeout: dt.timedelta) -> dict:
    """After a torchrun restart, a store of the attempt's own (`init_process_group` keyword arguments).

    Restarted workers meet in the agent's store, where the dead attempt's gloo addresses still lie: at 4
    workers the new attempt read some of them and failed to connect ("Connection refused"). A prefix per
    attempt keeps each attempt's keys apart.
    """
    if restart_count() == 0 or "MASTER_ADDR" not in os.environ:
        return {}
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False, timeout=timeout)
    return {
        "store": dist.PrefixStore(f"suite/attempt{restart_count()}", store),
        "rank": int(os.environ["RANK"]),
        "world_size": int(os.environ["WORLD_SIZE"]),
    }


def _checkpoints() -> ModuleType:
    """suite.run.checkpoint, imported on first use: it brings DCP and DTensor, 1 s of every launcher's start,
    which imports this module for LAUNCHER_PID alone."""
    from suite.run import checkpoint

    return checkpoint


def _note_fault(cfg: RunConfig, event: dict) -> None:
    """Append one injected fault; written before the fault so that a killed worker leaves its time behind."""
    path = _checkpoints().run_folder(cfg) / "faults.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(event) + "\n")
        f.flush()


def _injected(cfg: RunConfig) -> list[dict]:
    path = _checkpoints().run_folder(cfg) / "faults.jsonl"
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut by the kill it announced
    return out


def section(cfg: RunConfig) -> dict:
    """The record's `faults` section of a run that has not failed yet."""
    injected = {"kill_rank": cfg.kill_rank, "hang_rank": cfg.hang_rank, "at_step": cfg.fault_step}
    return {
        "checkpoint_every": cfg.checkpoint_every,
        "checkpoints": repository_path(_checkpoints().run_folder(cfg)),
        "max_restarts": cfg.max_restarts,
        "collective_timeout_s": cfg.collective_timeout_s,
        "injected": injected if cfg.fault_step is not None else None,
        "checkpoints_written": 0,
        "checkpoint_s": 0.0,
        "resumes": [],
    }


def note_resume(cfg: RunConfig, faults: dict, step: int, started: float) -> None:
    """Add the resume from `step` of an attempt that started at `started` (its process's time) to `faults`."""
    failure = next((f for f in reversed(_injected(cfg)) if f["time"] < started), None)
    faults["resumes"].append(
        {
            "from_step": step,
            "attempt": restart_count(),
            "how": "torchrun restart" if restart_count() > 0 else "resumed from its record",
            "failure": failure,
            "restart_s": started - failure["time"] if failure else None,
            "ready_s": time.time() - started,
            "lost_steps": failure["step"] - step if failure else None,
            "recovery_s": None,
        }
    )


def note_progress(faults: dict, step: int) -> None:
    """Once the run is past the step an injected fault struck at, the recovery time of that fault."""
    last = faults["resumes"][-1] if faults["resumes"] else None
    if last and last["failure"] and last["recovery_s"] is None and step > last["failure"]["step"]:
        last["recovery_s"] = time.time() - last["failure"]["time"]


def inject(cfg: RunConfig, rank: int, step: int) -> None:
    """Worker `rank` dies (--kill-rank) or stops answering (--hang-rank) as it starts step --at-step.

    The caller injects in a run's first attempt only: a resumed run must be able to pass that step."""
    if step != cfg.fault_step:
        return
    kind = "killed" if cfg.kill_rank == rank else "hung" if cfg.hang_rank == rank else None
    if kind is None:
        return
    _note_fault(cfg, {"event": kind, "rank": rank, "step": step, "time": time.time()})
    print(f"fault injection: worker {rank} {kind} at step {step}", file=sys.stderr, flush=True)
    if kind == "killed":
        os.kill(os.getpid(), signal.SIGKILL)
    while True:  # stops answering: the other workers' next collective times out
        time.sleep(3600)


def failure_text(err: BaseException, cfg: RunConfig) -> str:
    """The error as one line of the record, with what to do about it."""
    text = "".join(traceback.format_exception_only(type(err), err)).strip()
    if "timed out" in text.lower() or "timeout" in text.lower():
        text = (
            f"a collective waited longer than collective_timeout_s={cfg.collective_timeout_s:g} s: a worker stopped "
            f"answering (or raise --collective-timeout); {text}"
        )
    checkpoints = _checkpoints()
    if checkpoints.newest_intact(checkpoints.run_folder(cfg))[0] is not None:  # never advice to load a damaged one
        text += f"; resume it with python -m suite run --resume {cfg.record_path()}"
    return text
