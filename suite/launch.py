"""Start N workers with torch.distributed.run (torchrun): gloo on CPU, NCCL on CUDA.

On one machine the launcher starts `torchrun --standalone`; on many machines users start torchrun
themselves with its rendezvous flags and `-m suite run ...`, which then trains in place (README).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from suite.config import RunConfig
from suite.recorder import failed_record, new_run_id
from suite.records import RecordError, read_record, write_record

# glibc returns freed memory promptly with these, so the peak RSS the memory meter reads is the
# tensors' own and not the allocator's retained arenas (PRACTICE.md, Memory on CPU)
WORKER_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"}


def under_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ or "LOCAL_RANK" in os.environ


def launch(cfg: RunConfig) -> Path:
    """Run `cfg` on cfg.nproc local workers; returns the record's path (written even when it failed)."""
    if cfg.run_id is None:
        cfg.run_id = new_run_id(cfg)
    with tempfile.TemporaryDirectory(prefix="suite-launch-") as tmp:
        spec = Path(tmp) / "run.json"
        spec.write_text(cfg.to_json())
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={cfg.nproc}",
               "--log-dir", str(Path(tmp) / "logs"), "-m", "suite.worker", str(spec)]
        env = {**os.environ, **WORKER_ENV}
        proc = subprocess.run(cmd, env=env)
        if proc.returncode != 0:
            _mark_failed(cfg, f"workers exited with status {proc.returncode}; see the output above")
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
