"""Builds the run record of docs/architecture.md from a config and what the loop measured."""

from __future__ import annotations

import datetime as dt
import platform
import socket
import subprocess
import uuid
from pathlib import Path

import torch

from suite.config import RunConfig
from suite.records import SCHEMA_VERSION


def new_run_id(cfg: RunConfig) -> str:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return f"{cfg.method}-{cfg.model}-n{cfg.nproc}-s{cfg.seed}-{stamp}-{uuid.uuid4().hex[:6]}"


REPOSITORY = Path(__file__).resolve().parents[2]


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, timeout=5, cwd=REPOSITORY)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def git_sha() -> str | None:
    return (_git("rev-parse", "HEAD") or "").strip() or None


def git_dirty() -> bool | None:
    """Whether tracked files differ from the commit (untracked files do not change what ran); None: no git."""
    status = _git("status", "--porcelain", "--untracked-files=no")
    return None if status is None else bool(status.strip())


def repository_path(path: str | Path) -> str:
    """`path` relative to the repository when inside it (so a recorded command re-runs from a clone)."""
    resolved = Path(path).resolve()
    try:
        return str(resolved.relative_to(REPOSITORY))
    except ValueError:
        return str(path)


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def new_record(cfg: RunConfig, world_size: int, device: torch.device, backend: str, peak_flops: float | None) -> dict:
    """A record with every required field, status `incomplete` until the loop fills and closes it."""
    return {
        "schema": SCHEMA_VERSION,
        "run_id": cfg.run_id,
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "status": "incomplete",
        "error": None,
        "command": cfg.command,
        "reproduction": cfg.reproduction,
        "method": cfg.method,
        "variant": dict(cfg.variant),
        "baseline": True,
        "model": {"name": cfg.model, "params": 0, "config": {}},
        "data": {"name": cfg.data or "", "source": ""},
        "parallel": {
            "world_size": world_size,
            "strategy": cfg.method,
            "mesh": None,
            "global_batch_tokens": 0,
            "micro_batch": cfg.micro_batch,
            "grad_accum": cfg.grad_accum,
            # logical workers as threads of one process (suite/run/emulate.py): memory and time are not per device
            "emulated": cfg.emulate,
            "processes": 1 if cfg.emulate else world_size,
        },
        "protocol": {"kind": "tokens", "budget": None, "target": None, "reached": None},
        "totals": {"steps": 0, "tokens": 0, "flops": 0, "wall_s": 0.0},
        "curve": [],
        "memory": {"method": "", "per_rank": []},
        "comm": {"method": "", "steps": 0, "per_rank": []},
        "throughput": {"tokens_per_s": None, "samples_per_s": None, "mfu": None},
        "evals": {},
        "env": {
            "torch": torch.__version__,
            "device": device.type,
            "device_name": device_name(device),
            "backend": backend,
            "world_size": world_size,
            "git_sha": git_sha(),
            "git_dirty": git_dirty(),
            "seed": cfg.seed,
            "peak_flops": peak_flops,
            "hostname": socket.gethostname(),
            "threads": torch.get_num_threads(),
        },
        "settings": {k: v for k, v in vars(cfg).items() if k not in ("variant", "command", "run_id", "resume")},
        "provenance": "measured",
    }


def failed_record(cfg: RunConfig, world_size: int, error: str) -> dict:
    """What the launcher writes when the workers died before rank 0 could write anything."""
    rec = new_record(cfg, world_size, torch.device(cfg.device), "gloo" if cfg.device == "cpu" else "nccl", None)
    rec["status"], rec["error"] = "failed", error
    return rec
