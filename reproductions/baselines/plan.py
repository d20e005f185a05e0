"""The harness's own comparison: DDP, FSDP2, HSDP, activation checkpointing and bf16, and the model-parallel
methods (ZeRO-1, TP, PP, CP, EP and the 2-D compositions FSDP+TP and PP+FSDP), equal tokens.

Smoke: llama-tiny on the embedded text with 2 gloo workers (4 for HSDP and the two compositions, which need a
2 x 2 mesh), a few seconds each. Every arm trains the same global batch (GLOBAL_SEQUENCES) for the same tokens:
only data-parallel replicas split it, so a TP, PP or CP rank reads the whole batch (micro_batch 16) and a
composition's two replicas half each. EP runs on llama-tiny-moe (8 experts, top-2), beside DDP on the same model.
GPU: llama-134m on every visible GPU with NCCL, the data-parallel arms only (ARMS). Paper: not defined (no paper
claim here).
"""

from __future__ import annotations

from pathlib import Path

from suite.config import RunConfig
from suite.plan.plans import Plan

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
PP_SCHEDULE = {"schedule": "1f1b"}  # 2 stages (one per rank) and the default 2 microbatches
MOE = {"model": "llama-tiny-moe"}
# (method, workers, data-parallel replicas, extra settings): the model-parallel arms of issue 29 in the smoke preset
MODEL_PARALLEL = [
    ("zero1", 2, 2, {}),
    ("tp", 2, 1, {}),
    ("pp", 2, 1, {"variant": PP_SCHEDULE}),
    ("cp", 2, 1, {}),
    ("fsdp-tp", 4, 2, {}),
    ("pp-fsdp", 4, 2, {"variant": PP_SCHEDULE}),
    ("ddp", 2, 2, MOE),  # EP's baseline: the same mixture-of-experts model, every expert on every rank
    ("ep", 2, 2, MOE),
]


def native_bf16_cpu() -> bool:
    """Without AVX-512 BF16 or AMX, bf16 matmuls on CPU are emulated (measured 30x slower than fp32 here)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def _smoke() -> list[RunConfig]:
    arms = [(m, n, n, extra) for m, n, extra in ARMS if native_bf16_cpu() or extra.get("precision") != "bf16"]
    return [
        RunConfig(method=m, nproc=n, **{**SMOKE, "micro_batch": GLOBAL_SEQUENCES // replicas, **extra})
        for m, n, replicas, extra in arms + MODEL_PARALLEL
    ]


def _gpu(gpus: int) -> list[RunConfig]:
    """Every data-parallel arm on all GPUs (same global batch); HSDP needs at least 4 to have 2 x 2. The
    model-parallel arms (MODEL_PARALLEL) are smoke-only so far."""
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
