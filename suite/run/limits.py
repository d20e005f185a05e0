"""Limits of a run's values and of this machine, checked before any worker starts.

Each value here passed the older checks and then failed inside the workers (a traceback, a `failed`
record, or the kernel's OOM killer): a cadence of 0 divides by zero, a sequence beyond the model's RoPE
table has no angles, an infinite timeout overflows a timedelta, and a batch this machine cannot hold is
killed half-way. The machine's own limits (memory, cores) are a lower bound and a rule of thumb, so
`--over-limits` runs past them; the value checks hold everywhere.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import zipfile
from functools import cache
from pathlib import Path

from suite.config import RunConfig, check_settings
from suite.run.reserve import RECORD_BYTES

WORKERS_PER_CORE = 4  # gloo workers per core before the run is mostly waiting (tests run 4 on 2 cores)
_CGROUP = Path("/sys/fs/cgroup")
# Above any device's rate, so that a budget's time at them is a lower bound: a CPU core at 3 GHz doing two 16-wide
# fp32 fused multiply-adds a cycle gives 1.9e11 FLOP/s, and no GPU this suite knows has a dense peak above 2e15
CORE_FLOPS, GPU_FLOPS = 2e11, 2e15
LONGEST_S = 30 * 86400  # a budget that needs longer than this even at those rates is refused


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
        from suite.run.checkpoint import latest, run_folder  # here: DCP and DTensor cost runs without checkpoints 1 s

        _check_writable(Path(cfg.checkpoint_dir), "checkpoint_dir")
        # the newest checkpoint and the one being written; resuming, the newest is already on the disk
        held = cfg.run_id is not None and latest(run_folder(cfg)) is not None
        need = checkpoint_bytes(cfg) * (1 if held else 2)
        what = f"{'one more checkpoint' if held else 'checkpoints'} (estimated: 12 bytes a parameter a worker each)"
        _check_free(Path(cfg.checkpoint_dir), need, what)
    _check_free(Path(cfg.results), 2 * RECORD_BYTES, "the run record and the room kept for its last write")


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
    return _params(cfg.model)


@cache
def _params(model: str) -> int:
    # the memory, checkpoint and budget checks all ask, for every run of a plan: one build per model
    import torch

    from suite import models

    with torch.device("meta"):
        return models.num_params(models.build_model(model))


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
    if cfg.emulate:
        _check_replicas(cfg)
        return
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


def replica_bytes(cfg: RunConfig) -> int:
    """A lower bound of one emulated worker's memory: worker_bytes of a worker that holds the whole model (a
    logical worker of a replicated method does; one of a sharded group holds less, so this plans for the most)."""
    return worker_bytes(dataclasses.replace(cfg, nproc=1))


def _check_replicas(cfg: RunConfig) -> None:
    """Every logical worker's model, gradients, optimizer state and activations live in this one process (CPU
    memory, or the one GPU's)."""
    one = replica_bytes(cfg)
    have = machine_bytes() if cfg.device == "cpu" else _gpu_bytes()
    if cfg.nproc * one > have:
        raise ValueError(
            f"{cfg.nproc} emulated workers need at least {cfg.nproc * one / 2**30:.1f} GiB (a lower bound), this "
            f"{cfg.device} has {have / 2**30:.1f} GiB: at most --nproc {have // one} fits; lower --nproc, "
            "micro_batch or seq_len, or add --over-limits to run anyway"
        )


def _gpu_bytes() -> int:
    import torch

    return torch.cuda.get_device_properties(0).total_memory if torch.cuda.is_available() else 0


def check_budget(cfg: RunConfig) -> None:
    """A budget this machine cannot finish: longer than LONGEST_S, a time or, for tokens and FLOPs, estimated at a
    rate above its devices' peak (6 FLOPs a parameter a token); ValueError naming --over-limits."""
    if cfg.time_s is not None:
        flag, seconds, how = f"--time {cfg.time_s:g} is", cfg.time_s, ""
    else:
        tokens = cfg.tokens or cfg.max_tokens or 0
        flag = f"--flops {cfg.flops:g}" if cfg.flops else f"--{'tokens' if cfg.tokens else 'max-tokens'} {tokens:g}"
        flag += " takes at least"
        rate = cores() * CORE_FLOPS if cfg.device == "cpu" else cfg.nproc * GPU_FLOPS
        seconds = (cfg.flops or 6 * params_of(cfg) * tokens) / rate
        where = f"{cores()} cores" if cfg.device == "cpu" else f"{cfg.nproc} GPUs"
        how = f" (estimated: 6 FLOPs a parameter a token at {rate:.1e} FLOP/s, above the peak of {where})"
    if seconds > LONGEST_S:
        raise ValueError(
            f"{flag} {_duration(seconds)}{how}, over the {LONGEST_S // 86400} days a run may take; "
            "lower the budget, or add --over-limits to run anyway"
        )


def _duration(seconds: float) -> str:
    days = seconds / 86400
    return f"{days / 365.25:,.3g} years" if days > 365.25 else f"{days:,.0f} days"


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
        check_budget(cfg)
