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
each matrix optimizer (embeddings, head, norms) at AdamW's rate, as in Dion's plan.

Tune-adamw (stage one of the tune at the quality cards' horizon, as Dion's): the AdamW arm on one process, QUALITY
(llama-tiny-w64, micro-batch 8 x 128 tokens of the stdlib corpus), QUALITY_STEPS steps under one schedule rule
(QUALITY_SCHEDULE), seed 0, every rate of ADAMW_GRID, filed as TUNE_SWEEP so that no verdict counts a tuning run.
Its winner (ADAMW_TUNED) becomes the rate of the AdamW part of every matrix optimizer in stage two, so every arm
of a card trains its embeddings, head and norms at one rate.
Tune-matrix (stage two): Muon, NorMuon, Dion2 (fraction 1/4), Dion3 and SOAP likewise, each at every rate of its
grid (TUNE_GRIDS: Dion's matrix grid for the orthogonalizing four, AdamW's for SOAP, whose update is Adam's in a
rotated basis), six trials each as AdamW had, rate by rate.
Tune-extend (round two of both stages): Dion2 and Dion3 were best at their grid's lowest rate, so the matrix grid
extends by two factor-2 rates below it (EXTENSION) and, for equal trials, every other arm's grid by two too: Muon's
and NorMuon's as Dion2's, AdamW's and SOAP's one rate on each side. Every arm then has eight trials (TUNE_GRIDS), its
winner inside them (TUNED, checked against the three folders by suite.judge.sweeps' rule in a test).
Quality: every arm of the tune at its TUNED rate on seeds QUALITY_SEEDS (the tune's seed 0 left out, AlgoPerf's rule),
seed by seed, the cards' evidence: final validation loss and tokens to the baseline's final loss.

The trend along width (the quality cards' second point, TREND_MODEL): the tune and the quality preset again at width
128, since rates tuned at one width need not be best at another (AdamW's under the standard parametrization moves
with width). Trend-tune-adamw and trend-tune-matrix are the tune's two stages with three factor-2 rates per arm
centred on its width-64 winner (TREND_GRIDS), the AdamW part of stage two at stage one's winner there; NorMuon's
winner sat at its lowest rate, so trend-tune-extend gives every arm a fourth (TREND_EXTENSION: equal trials, every
winner inside its grid, TREND_TUNED); trend is the quality preset at width 128 and those winners. About 0.7 s a step
for Muon and 1.1 s for NorMuon at width 128 on this CPU (the bf16 orthogonalization): stage two took 44 minutes on
2 cores and the trend about an hour, so the tune there cannot be the eight rates of width 64.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from suite.config import RunConfig
from suite.plan.plans import Plan, Schedule

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
QUALITY = dict(
    model=MODEL, device="cpu", nproc=1, micro_batch=8, seq_len=128, data="stdlib", eval_every=25, log_every=10
)
QUALITY_STEPS, QUALITY_SCHEDULE = 300, Schedule(warmup=0.1)
TUNE_SWEEP = "matrix-optimizers-lr-sweep"
ADAMW_GRID = (5e-4, 1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2)  # factor-2 steps, Dion's tune grid for AdamW
MATRIX_GRID = (0.0125, 0.025, 0.05, 0.1, 0.2, 0.4)  # Dion's tune grid for Muon and Dion
QUALITY_ARMS = ("adamw", "muon", "normuon", "dion2", "dion3", "soap")
ADAMW_FAMILY = ("adamw", "soap")
EXTENSION = {"adamw": (2.5e-4, 3.2e-2), "matrix": (0.003125, 0.00625)}  # round two's rates (tune-extend)
FIRST_GRIDS = {arm: ADAMW_GRID if arm in ADAMW_FAMILY else MATRIX_GRID for arm in QUALITY_ARMS}
EXTENDED = {arm: EXTENSION["adamw" if arm in ADAMW_FAMILY else "matrix"] for arm in QUALITY_ARMS}
TUNE_GRIDS = {arm: tuple(sorted(FIRST_GRIDS[arm] + EXTENDED[arm])) for arm in QUALITY_ARMS}
ADAMW_TUNED = 4e-3  # stage one's winner (results/matrix-optimizers-tune-adamw; a test checks it)
# stage two's winners inside their grids (results/matrix-optimizers-tune-matrix; a test checks them); Dion2's and
# Dion3's are at their grid's lowest rate, 0.0125, so their grid extends below it (tune-extend)
MATRIX_TUNED = {"muon": 0.05, "normuon": 0.05, "soap": 0.008}
AT_EDGE = ("dion2", "dion3")
# every arm's winner over its eight trials (the three tune folders; a test checks it): round two moved none of round
# one's, and put Dion2's and Dion3's 0.0125 inside their grid
TUNED = {"adamw": ADAMW_TUNED, **MATRIX_TUNED, "dion2": 0.0125, "dion3": 0.0125}
QUALITY_SEEDS = (1, 2, 3)
# each tune preset's arms and their grids: stage one, stage two, then round two of both
TUNE_PRESETS = {
    "tune-adamw": (QUALITY_ARMS[:1], FIRST_GRIDS),
    "tune-matrix": (QUALITY_ARMS[1:], FIRST_GRIDS),
    "tune-extend": (QUALITY_ARMS, EXTENDED),
}
# The trend along width: width 128, three rates per arm centred on its width-64 winner, the tune's two stages there
TREND_MODEL = "llama-tiny-w128"
TREND_GRIDS = {arm: (TUNED[arm] / 2, TUNED[arm], TUNED[arm] * 2) for arm in QUALITY_ARMS}
# stage one's winner at width 128 (results/matrix-optimizers-trend-tune-adamw; a test checks it)
TREND_ADAMW_TUNED = 4e-3
# Round two at width 128 (trend-tune-extend): NorMuon was best at its grid's lowest rate (0.025), so its grid extends
# below it, and every other arm's by one rate too (equal trials), on the side of its better neighbour, where the loss
# may still fall (results/matrix-optimizers-trend-tune-adamw and -trend-tune-matrix: the rates and losses in README)
TREND_EXTENSION = {"adamw": 1e-3, "muon": 0.0125, "normuon": 0.0125, "dion2": 0.05, "dion3": 0.05, "soap": 0.002}
# each trend tune preset's arms, the AdamW part of its matrix optimizers and their grids
TREND_TUNE_PRESETS = {
    "trend-tune-adamw": (QUALITY_ARMS[:1], ADAMW_TUNED, TREND_GRIDS),
    "trend-tune-matrix": (QUALITY_ARMS[1:], TREND_ADAMW_TUNED, TREND_GRIDS),
    "trend-tune-extend": (QUALITY_ARMS, TREND_ADAMW_TUNED, {a: (lr,) for a, lr in TREND_EXTENSION.items()}),
}
# every arm's winner over its four trials at width 128 (the three trend tune folders; a test checks it)
TREND_TUNED = {
    "adamw": TREND_ADAMW_TUNED,
    "muon": 0.05,
    "normuon": 0.025,
    "dion2": 0.0125,
    "dion3": 0.0125,
    "soap": 0.008,
}
PRESETS = ("smoke", *TUNE_PRESETS, "quality", *TREND_TUNE_PRESETS, "trend")


def _tokens(steps: int, nproc: int, common: dict) -> int:
    return steps * nproc * common["micro_batch"] * common["seq_len"]


def _arm(arm: str, scalar_lr: float) -> tuple[str, dict]:
    """Arm `arm` of ARMS as (optimizer, its parameters), a matrix optimizer's AdamW part at `scalar_lr`."""
    optimizer, variant = ARMS[arm]
    return optimizer, variant if optimizer == "adamw" else {**variant, "scalar_lr": scalar_lr}


def cost_run(method: str, nproc: int, arm: str, seed: int, steps: int) -> RunConfig:
    """Arm `arm` of ARMS under `method` at `nproc` ranks for `steps` steps, at its optimizer's COST_LR."""
    optimizer, variant = _arm(arm, SCALAR_LR)
    return RunConfig(
        method=method,
        nproc=nproc,
        optimizer=optimizer,
        lr=COST_LR[optimizer],
        seed=seed,
        tokens=_tokens(steps, nproc, COMMON),
        variant=variant,
        **COMMON,
    )


def smoke_runs() -> list[RunConfig]:
    """The bytes arms once, then the whole-step arms seed by seed (every arm once, then again)."""
    runs = [cost_run(method, BYTES_WORLD, arm, 0, BYTES_STEPS) for method, arms in BYTES_ARMS for arm in arms]
    return runs + [cost_run("ddp", TIME_WORLD, arm, seed, TIME_STEPS) for seed in TIME_SEEDS for arm in TIME_ARMS]


def quality_run(arm: str, lr: float, seed: int, scalar_lr: float, model: str = MODEL) -> RunConfig:
    """Arm `arm` of ARMS on QUALITY at `model` for QUALITY_STEPS steps under QUALITY_SCHEDULE at `lr`, its AdamW part
    (a matrix optimizer's) at `scalar_lr`."""
    optimizer, variant = _arm(arm, scalar_lr)
    return RunConfig(
        optimizer=optimizer,
        lr=lr,
        seed=seed,
        variant=variant,
        tokens=_tokens(QUALITY_STEPS, QUALITY["nproc"], QUALITY),
        **{**QUALITY, "model": model},
        **QUALITY_SCHEDULE.settings(QUALITY_STEPS),
    )


def tune_runs(
    arms: tuple[str, ...], grids: dict[str, tuple[float, ...]], scalar_lr: float = ADAMW_TUNED, model: str = MODEL
) -> list[RunConfig]:
    """Seed 0 of each arm at `model` at every rate of its grid in `grids`, rate by rate (a tune stopped midway leaves
    every arm with nearly as many trials), the matrix optimizers' AdamW part at `scalar_lr`."""
    return [
        replace(quality_run(arm, grids[arm][i], 0, scalar_lr, model), reproduction=TUNE_SWEEP)
        for i in range(len(grids[arms[0]]))
        for arm in arms
    ]


def quality_runs(model: str = MODEL) -> list[RunConfig]:
    """Every arm at `model` at its rate tuned there (TUNED at MODEL, TREND_TUNED at TREND_MODEL) on each of
    QUALITY_SEEDS, seed by seed (every arm once, then again)."""
    rates, scalar_lr = (TUNED, ADAMW_TUNED) if model == MODEL else (TREND_TUNED, TREND_ADAMW_TUNED)
    return [quality_run(arm, rates[arm], seed, scalar_lr, model) for seed in QUALITY_SEEDS for arm in QUALITY_ARMS]


def plan(preset: str) -> Plan:
    if preset == "smoke":
        runs, protocol = smoke_runs(), "every arm at a fixed rate per optimizer (time and bytes only)"
        notes = ["CPU timings at width 64: the papers' GPU step times and 300M-1.2B quality claims are not tested here"]
    elif preset in TUNE_PRESETS:
        runs = tune_runs(*TUNE_PRESETS[preset])
        protocol, notes = "a learning-rate sweep on seed 0, filed apart from the evidence", []
    elif preset in TREND_TUNE_PRESETS:
        arms, scalar_lr, grids = TREND_TUNE_PRESETS[preset]
        runs = tune_runs(arms, grids, scalar_lr, TREND_MODEL)
        protocol, notes = f"a learning-rate sweep on seed 0 at {TREND_MODEL}, filed apart from the evidence", []
    elif preset == "quality":
        runs, protocol = quality_runs(), "every arm at its tuned rate (eight trials each, seed 0), seeds 1-3"
        notes = ["llama-tiny-w64 (0.22M parameters) on one CPU process: the papers' 300M-3B claims are not tested here"]
    elif preset == "trend":
        runs = quality_runs(TREND_MODEL)
        protocol = f"every arm at its rate tuned at {TREND_MODEL} (four trials each, seed 0), seeds 1-3"
        notes = [
            f"{TREND_MODEL} on one CPU process: the quality cards' second point along width, not the papers' scale"
        ]
    else:
        raise ValueError(f"the matrix-optimizers plan has the presets {', '.join(PRESETS)}, not {preset!r}")
    return Plan(
        preset,
        runs,
        protocol=f"equal tokens in every comparison; {protocol}",
        claims=Path(__file__).with_name("claims.yaml"),
        notes=notes,
    )
