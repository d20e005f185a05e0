"""Limits of a run's values and of this machine, checked before any worker starts.

Each value here passed the older checks and then failed inside the workers (a traceback, a `failed`
record, or the kernel's OOM killer): a cadence of 0 divides by zero, a sequence beyond the model's RoPE
table has no angles, an infinite timeout overflows a timedelta, and a batch this machine cannot hold is
killed half-way. The machine's own limits (memory, cores) are a lower bound and a rule of thumb, so
`--over-limits` runs past them; the value checks hold everywhere.
"""

from __future__ import annotations

import os
import shutil
import zipfile
from pathlib import Path

from suite.config import RunConfig, check_settings
from suite.run.checkpoint import latest, run_folder

RECORD_BYTES = 16 * 2**20  # room for a record and its temporary (a long curve is a few MB)
WORKERS_PER_CORE = 4  # gloo workers per core before the run is mostly waiting (tests run 4 on 2 cores)
_CGROUP = Path("/sys/fs/cgroup")


def check_seq_len(cfg: RunConfig) -> None:
    """A sequence the model can take (each setting's own range is declared with it: suite/config.py)."""
    from suite import models

    if models.kind_of(cfg.model) != "lm":
        return
    longest = models.model_config(cfg.model)["max_seq_len"]
    if cfg.seq_len > longest:
        raise ValueError(f"seq_len {cfg.seq_len} is beyond {cfg.model}'s max_seq_len {longest}; lower --set seq_len")


def check_paths(cfg: RunConfig) -> None:
    """The final-model checkpoint and the checkpoint folder can be written, and the disks have room."""
    if cfg.checkpoint:
        path = Path(cfg.checkpoint)
        if path.exists() and not (path.is_file() and zipfile.is_zipfile(path)):
            raise ValueError(f"--checkpoint {str(path)!r} exists and is not a model checkpoint; give a new path")
        _check_writable(path.parent, "--checkpoint's folder")
    if cfg.checkpoint_every or cfg.max_restarts:
        _check_writable(Path(cfg.checkpoint_dir), "checkpoint_dir")
        # the newest checkpoint and the one being written; resuming, the newest is already on the disk
        held = cfg.run_id is not None and latest(run_folder(cfg)) is not None
        need = checkpoint_bytes(cfg) * (1 if held else 2)
        what = f"{'one more checkpoint' if held else 'checkpoints'} (estimated: 12 bytes a parameter a worker each)"
        _check_free(Path(cfg.checkpoint_dir), need, what)
    _check_free(Path(cfg.results), RECORD_BYTES, "the run record")


def _check_writable(folder: Path, what: str) -> None:
    existing = next((p for p in [folder, *folder.parents] if p.exists()), Path("."))
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"cannot write {what} {str(folder)!r} ({str(existing)!r} is not a writable folder)")


def _check_free(folder: Path, need: int, what: str) -> None:
    existing = next((p for p in [folder, *folder.parents] if p.exists()), Path("."))
    free = shutil.disk_usage(existing).free
    if free < need:
        raise ValueError(
            f"no space left on the disk of {str(existing)!r} for {what}: {free:,} bytes free, {need:,} needed"
        )


def params_of(cfg: RunConfig) -> int:
    """The model's parameter count, built on the meta device (no memory)."""
    import torch

    from suite import models

    with torch.device("meta"):
        return models.num_params(models.build_model(cfg.model))


def checkpoint_bytes(cfg: RunConfig) -> int:
    """What one checkpoint holds at least: weights and AdamW's two moments, fp32, on every worker (a DDP
    worker holds the whole model)."""
    return 12 * params_of(cfg) * cfg.nproc


def worker_bytes(cfg: RunConfig) -> int:
    """A lower bound of one worker's memory in an fp32 step: its share of weights, gradients and AdamW's
    moments when fully sharded (16 bytes a parameter over the workers), plus, for a language model, the
    logits and their gradient (2 x 4 bytes x micro_batch x seq_len x vocabulary) and each block's input,
    kept even under activation checkpointing (4 bytes x micro_batch x seq_len x dim x (layers + 4))."""
    from suite import models

    state = 16 * params_of(cfg) // cfg.nproc
    if models.kind_of(cfg.model) != "lm":
        return state
    m = models.model_config(cfg.model)
    tokens = cfg.micro_batch * cfg.seq_len
    return state + 4 * tokens * (2 * m["vocab_size"] + m["dim"] * (m["n_layers"] + 4))


def machine_bytes() -> int:
    """Memory this process may use: the machine's, or its cgroup's limit where lower."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        limit = (_CGROUP / "memory.max").read_text().strip()
    except OSError:
        return total
    return min(total, int(limit)) if limit.isdigit() else total


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def check_machine(cfg: RunConfig) -> None:
    """A CPU run this machine cannot hold or drive; ValueError naming --over-limits."""
    if cfg.device != "cpu":
        return
    if cfg.nproc > WORKERS_PER_CORE * cores():
        raise ValueError(
            f"--nproc {cfg.nproc} on {cores()} cores: at most {WORKERS_PER_CORE * cores()} workers here; "
            "lower --nproc, or add --over-limits to run anyway"
        )
    need, have = cfg.nproc * worker_bytes(cfg), machine_bytes()
    if need > have:
        raise ValueError(
            f"{cfg.nproc} workers need at least {need / 2**30:.1f} GiB (a lower bound), this machine has "
            f"{have / 2**30:.1f} GiB; lower micro_batch, seq_len or --nproc, or add --over-limits to run anyway"
        )


def oom_kills() -> int | None:
    """How many processes the kernel's OOM killer has killed in this cgroup (None where it does not say)."""
    try:
        for line in (_CGROUP / "memory.events").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
    except (OSError, ValueError):
        pass
    return None


def check(cfg: RunConfig, machine: bool = True) -> None:
    """Every setting's declared check (suite/config.py check_settings) and every limit above (`machine`: also this
    machine's memory and cores)."""
    check_settings(cfg)
    check_seq_len(cfg)
    check_paths(cfg)
    if machine:
        check_machine(cfg)
