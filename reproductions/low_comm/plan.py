"""The low-communication row's plan: Streaming DiLoCo beside DiLoCo and DDP at equal tokens.

Smoke (this machine, 2 cores, gloo): llama-tiny (4 blocks, 3.1M parameters) at the paper's 2 replicas (M = 2, one
rank each), H = SYNC steps, for the meters' two warm-up steps and one whole period (the ledger counts steps 2 to
H + 1, in which every fragment exchanges once): DDP, DiLoCo, and Streaming DiLoCo with P = 2 strided fragments,
tau 1 and alpha 0.5, its outer gradients in E3M0 and in FP32. Bytes and calls per period come from the ledger
(tests/test_streaming_diloco.py checks them against the derived count); the row's cards are not written yet.
"""

from __future__ import annotations

from suite.config import RunConfig
from suite.plan.plans import Plan

SYNC, WORLD = 8, 2
COMMON = dict(model="llama-tiny", device="cpu", nproc=WORLD, micro_batch=4, seq_len=128, eval_every=100, eval_batches=1)
STEPS = 2 + SYNC
# (method, variant): the baseline, the method's parent and the method with its outer gradients in 4 bits and in 32
ARMS = (
    ("ddp", {}),
    ("diloco", {"F": SYNC}),
    ("streaming-diloco", {"F": SYNC}),
    ("streaming-diloco", {"F": SYNC, "quantize": "none"}),
)
PRESETS = ("smoke",)


def smoke_runs() -> list[RunConfig]:
    """Every arm of ARMS for STEPS steps of equal tokens."""
    tokens = STEPS * WORLD * COMMON["micro_batch"] * COMMON["seq_len"]
    return [RunConfig(method=method, variant=variant, tokens=tokens, **COMMON) for method, variant in ARMS]


def plan(preset: str) -> Plan:
    if preset != "smoke":
        raise ValueError(f"the low-comm plan has the presets {', '.join(PRESETS)}, not {preset!r}")
    notes = ["2 replicas of llama-tiny on CPU: the paper's 1B-4B quality and bandwidth claims are not tested here"]
    return Plan(preset, smoke_runs(), protocol="equal tokens; bytes and calls of one period", notes=notes)
