"""Start N workers with torch.distributed.run (torchrun): gloo on CPU, NCCL on CUDA.

On one machine the launcher starts the workers through torchrun's own API (`elastic_launch`, what
`torchrun --standalone` runs); on many machines users start torchrun
themselves with its rendezvous flags and `-m suite run ...`, which then trains in place (README).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.launcher.api import LaunchConfig, elastic_launch

from suite.config import RunConfig
from suite.recorder import failed_record, new_run_id
from suite.records import RecordError, read_record, write_record


def under_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ or "LOCAL_RANK" in os.environ


def launch(cfg: RunConfig) -> Path:
    """Run `cfg` on cfg.nproc local workers; returns the record's path (written even when it failed)."""
    if cfg.run_id is None:
        cfg.run_id = new_run_id(cfg)
    with tempfile.TemporaryDirectory(prefix="suite-launch-") as tmp:
        spec = Path(tmp) / "run.json"
        spec.write_text(cfg.to_json())
        config = LaunchConfig(
            min_nodes=1,
            max_nodes=1,
            nproc_per_node=cfg.nproc,
            run_id=cfg.run_id,
            rdzv_backend="c10d",
            rdzv_endpoint="localhost:0",
            max_restarts=0,
            monitor_interval=0.1,
        )
        # Workers get the allocator's defaults: the glibc thresholds once set here made every timed step
        # 1.7-1.9x slower and changed no tensor-level peak (issue 19; numbers in suite/meters/memory.py).
        # torchrun's command line sets this; its API does not, and oversubscribed threads cost 5-10x here
        os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // cfg.nproc)))
        try:
            elastic_launch(config, sys.executable)("-m", "suite.worker", str(spec))
        except ChildFailedError as err:
            rank, failure = err.get_first_failure()
            _mark_failed(cfg, f"worker {rank} exited with status {failure.exitcode}; its error is printed above")
    return cfg.record_path()


def _mark_failed(cfg: RunConfig, error: str) -> None:
    """Rank 0 normally records the failure; when it could not, the launcher does."""
    path = cfg.record_path()
    try:
        rec = read_record(path)
    except (RecordError, OSError):
        write_record(failed_record(cfg, cfg.nproc, error), path)
        return
    if rec["status"] == "complete":
        return
    if rec["status"] == "incomplete" and not rec.get("error"):
        rec["status"], rec["error"] = "failed", error
        write_record(rec, path)
