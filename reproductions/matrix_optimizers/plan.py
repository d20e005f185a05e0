"""The matrix-optimizer row's plan: bytes per step of every distributed variant and the whole step's cost.

Smoke (this machine, 2 cores, gloo): llama-tiny-w64 (28 matrices of 64 x 64, 160 x 64 and 64 x 160; 0.22M
parameters) for every run. The optimizers orthogonalize in bf16 as their references do, and on an AVX2 CPU without
bf16 kernels that takes 0.27 s per 256 x 256 matrix against 0.0075 s at width 64 (8 s a step for llama-tiny's 28),
so llama-tiny would make this preset a test of the CPU's bf16 emulation. The bytes do not depend on the width's
speed; the step times do, and their cards say which CPU and width they come from.
- bytes (BYTES_ARMS): DDP and FSDP2 at BYTES_WORLD ranks, every optimizer of the row and AdamW, BYTES_STEPS steps
  each (the meters' steps: FLOPs on step 0, DDP's bucket rebuild on step 1, collectives and memory on step 2);
- the whole step (TIME_ARMS): DDP at TIME_WORLD ranks, TIME_STEPS steps (5 timed after the meters' 3), over
  TIME_SEEDS interleaved (every arm once, then again), so that each card's spread covers the machine's load; the
  records hold the optimizer phase beside the whole step (throughput.phases_s_median), which the survey's
  warning card reads side by side.
Every run at a fixed rate per optimizer (COST_LR): a few steps' time and bytes do not depend on it; the AdamW part of
each matrix optimizer (embeddings, head, norms) at AdamW's rate, as in Dion's plan. Quality at equal tokens with
tuned rates, and its trend along width, are not in this plan yet (README, "Not yet measured").
"""

from __future__ import annotations

from pathlib import Path

from suite.config import RunConfig
from suite.plan.plans import Plan

MODEL = "llama-tiny-w64"
COMMON = dict(model=MODEL, device="cpu", micro_batch=4, seq_len=128, eval_every=100, eval_batches=1, log_every=5)
COST_LR = {"adamw": 3e-3, "muon": 0.02, "normuon": 0.02, "dion2": 0.02, "dion3": 0.02, "soap": 3e-3}
SCALAR_LR = COST_LR["adamw"]
# the arms by name: (optimizer, its parameters); Dion2 at the paper's fraction 1/4 and at the maintainer's 1/2
ARMS = {
    "adamw": ("adamw", {}),
    "muon": ("muon", {"layerwise": False}),
    "muon-layerwise": ("muon", {"layerwise": True}),
    "normuon": ("normuon", {}),
    "dion2": ("dion2", {"fraction": 0.25}),
    "dion2-half": ("dion2", {"fraction": 0.5}),
    "dion3": ("dion3", {}),
    "soap": ("soap", {}),
}
# 4 ranks: each shape's matrices split evenly over them (16, 8 and 4), and apart from the time runs' 2
BYTES_WORLD, BYTES_STEPS = 4, 3
# (method, arms): layer-wise Muon is a DDP variant only (baselines/muon.py refuses it elsewhere)
BYTES_ARMS = (
    ("ddp", ("adamw", "muon", "muon-layerwise", "normuon", "dion2", "dion3", "soap")),
    ("fsdp", ("adamw", "muon", "normuon", "dion2", "dion3", "soap")),
)
TIME_WORLD, TIME_SEEDS, TIME_STEPS = 2, (0, 1, 2), 8
TIME_ARMS = ("adamw", "muon", "muon-layerwise", "normuon", "dion2-half", "soap")
PRESETS = ("smoke",)


def _steps_tokens(steps: int, nproc: int) -> int:
    return steps * nproc * COMMON["micro_batch"] * COMMON["seq_len"]


def cost_run(method: str, nproc: int, arm: str, seed: int, steps: int) -> RunConfig:
    """Arm `arm` of ARMS under `method` at `nproc` ranks for `steps` steps, at its optimizer's COST_LR."""
    optimizer, variant = ARMS[arm]
    if optimizer != "adamw":
        variant = {**variant, "scalar_lr": SCALAR_LR}
    return RunConfig(
        method=method,
        nproc=nproc,
        optimizer=optimizer,
        lr=COST_LR[optimizer],
        seed=seed,
        tokens=_steps_tokens(steps, nproc),
        variant=variant,
        **COMMON,
    )


def smoke_runs() -> list[RunConfig]:
    """The bytes arms once, then the whole-step arms seed by seed (every arm once, then again)."""
    runs = [cost_run(method, BYTES_WORLD, arm, 0, BYTES_STEPS) for method, arms in BYTES_ARMS for arm in arms]
    return runs + [cost_run("ddp", TIME_WORLD, arm, seed, TIME_STEPS) for seed in TIME_SEEDS for arm in TIME_ARMS]


def plan(preset: str) -> Plan:
    if preset not in PRESETS:
        raise ValueError(f"the matrix-optimizers plan has the presets {', '.join(PRESETS)}, not {preset!r}")
    return Plan(
        preset,
        smoke_runs(),
        protocol="equal tokens in every comparison; every arm at a fixed rate per optimizer (time and bytes only)",
        claims=Path(__file__).with_name("claims.yaml"),
        notes=["CPU timings at width 64: the papers' GPU step times and 300M-1.2B quality claims are not tested here"],
    )
