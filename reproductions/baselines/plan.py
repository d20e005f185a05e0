"""The harness's own comparison: DDP, FSDP2, HSDP, activation checkpointing and bf16, equal tokens.

Smoke: llama-tiny on the embedded text with 2 gloo workers (4 for HSDP), a few seconds each.
GPU: llama-134m on every visible GPU with NCCL. Paper: not defined (no paper claim here).
"""

from __future__ import annotations

from pathlib import Path

from suite.config import RunConfig
from suite.plans import Plan

SMOKE = dict(model="llama-tiny", device="cpu", tokens=81_920, seq_len=128, eval_every=10)
GPU = dict(model="llama-134m", device="cuda", tokens=8_388_608, micro_batch=8, seq_len=1024, eval_every=50, lr=1e-3)

GLOBAL_SEQUENCES = 16  # global batch of every smoke arm, in sequences
ARMS = [  # (method, workers in the smoke preset, extra settings)
    ("ddp", 2, {}),
    ("fsdp", 2, {}),
    ("hsdp", 4, {}),
    ("ddp", 2, {"ac": True}),
    ("fsdp", 2, {"ac": True}),
    ("ddp", 2, {"precision": "bf16"}),
    ("fsdp", 2, {"precision": "bf16"}),
]


def native_bf16_cpu() -> bool:
    """Without AVX-512 BF16 or AMX, bf16 matmuls on CPU are emulated (measured 30x slower than fp32 here)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def _smoke() -> list[RunConfig]:
    arms = [a for a in ARMS if native_bf16_cpu() or a[2].get("precision") != "bf16"]
    return [
        RunConfig(method=m, nproc=n, **{**SMOKE, "micro_batch": GLOBAL_SEQUENCES // n}, **extra) for m, n, extra in arms
    ]


def _gpu(gpus: int) -> list[RunConfig]:
    """Every arm on all GPUs (same global batch); HSDP needs at least 4 to have 2 x 2."""
    return [RunConfig(method=m, nproc=gpus, **GPU, **extra) for m, _, extra in ARMS if m != "hsdp" or gpus >= 4]


def plan(preset: str) -> Plan:
    if preset == "smoke":
        runs = _smoke()
    else:
        import torch

        runs = _gpu(max(torch.cuda.device_count(), 1))
    notes = (
        []
        if preset != "smoke" or native_bf16_cpu()
        else [
            "bf16 arms left out: this CPU has no native bf16 matmul (AVX-512 BF16 / AMX), so bf16 would measure an "
            "emulation; the tests still run bf16 for bytes and loss, and the gpu preset includes it"
        ]
    )
    return Plan(preset, runs, protocol="equal tokens, same global batch and seed", notes=notes)
