"""Dion's plan: optimizer-step time and bytes against Muon and AdamW, and loss at equal tokens.

Smoke (this machine, 2 cores, gloo; estimated 6.1 minutes on 2 quiet cores, see smoke_wall_s): the runs its cards
read, and the sweep that picked the quality preset's rates:
- bytes (dion-ddp-bytes-low-rank, dion-fsdp-small-reductions): llama-tiny under DDP at 2 ranks (AdamW, Dion at rank
  fractions 1/4, 1/16, 1/2 and 1) and under FSDP2 at 2 (AdamW, Muon, Dion 1/4) and 4 ranks (Muon, Dion 1/4),
  BYTES_STEPS steps each: the meters' steps (FLOPs on step 0, DDP's bucket rebuild on step 1, memory and the
  communication meter's bytes on step 2), which is all these cards read;
- whole-step time (dion-whole-step-vs-muon-cpu): DDP at 4 ranks, AdamW, Muon and Dion 1/4, TIME_STEPS steps (5
  timed after the meters'), repeated over TIME_SEEDS, interleaved (every arm once, then again), so that the card's
  spread covers the machine's load; the records hold the optimizer phase beside the whole step
  (throughput.phases_s_median; the survey: never quote the optimizer step as the training step);
- microbenchmark items, one optimizer step on one square matrix of 256 to 2048 rows, AdamW, Muon and Dion at rank
  fractions 1, 1/2, 1/4, 1/16 (suite/plan/micro.py; reproductions/dion/figure.py draws them);
- the learning-rate sweep, unchanged since it picked LR_PICKED (its records in results/dion-smoke; a test checks the
  picks): llama-tiny on one process, 40 steps of 8 x 128 tokens, every rate of LR_GRID on seed 0 (AlgoPerf's rule:
  tuned on one budget, reported on other seeds), recorded as reproduction SWEEP so that no verdict counts a tuning
  run as evidence. One rule for the parameters no matrix optimizer takes (embeddings, head, norms): every arm trains
  them with AdamW at AdamW's picked rate (SCALAR_LR), so the arms differ in the matrix optimizer and its rate only;
- everything at fp32; Muon's Newton-Schulz runs in bf16 as specified (slow on an AVX2-only CPU, which
  this comparison does not hide).
No smoke card reads runs at 1 rank, DDP+Muon at 2 ranks, Dion at full rank at 4, FSDP2+AdamW at 4, or the
1-process quality arms at the picked rates (the quality cards read the quality preset's stdlib runs): issue 25 cut
them (tests/test_card_commands.py checks that every smoke run is read by a card).
Tune (CPU, 966 s measured on 2 cores, results/dion-tune): AdamW, Muon and Dion at rank 1/4 on seed 0, TUNE_STEPS
steps of the quality preset's corpus and schedule rule, six rates each (TUNE_GRID), filed as TUNE_SWEEP; its
winners are LR_TUNED, which the quality preset took until the tune at the cards' horizon replaced them (a rate
tuned at 200 steps was used at 500 and 1,000, and the AdamW arm's at 2e-3 beside the AdamW part of Muon and Dion at
1e-3).
Tune-adamw and tune-matrix (CPU, estimated 25 and 60 minutes): the tune at the cards' horizon (issue 41 item 8) in
two stages on seed 0 at each quality budget (LONG_STEPS), filed as TUNE_SWEEP; suite.judge.sweeps names each budget's
arm apart (budget=...). Stage one, the AdamW arm at every rate of TUNE_GRID; its winners (ADAMW_TUNED) train the
AdamW part of Muon and Dion at that budget in stage two, Muon and Dion at rank 1/4 at every rate of that budget's
HORIZON_MATRIX_GRID.
Quality (CPU, 3,795 s measured on 2 cores, results/dion-quality; estimated 64 minutes, see quality_wall_s): the four
quality arms (AdamW, Muon, Dion at rank 1/4 and at full rank, micro-batch 8, one process; the claims name them by
their micro-batch, the cost runs' is 4) on the stdlib corpus at two budgets a factor 2 apart (LONG_STEPS), seeds
QUALITY_SEEDS, one schedule for every arm (QUALITY_SCHEDULE: warm-up over 10% of the steps,
then cosine over the budget), each at its rate from the tune at that budget (ADAMW_TUNED and MATRIX_TUNED, the
AdamW part of Muon and Dion at the AdamW arm's rate; Dion's rate serves both of its ranks);
Trend (CPU, estimated at most 34 minutes): the two half cards' Muon and Dion arms (rank 1/4 and full) at widths 64
and 128 (TREND_MODELS), as the quality preset runs them at 500 steps on llama-tiny (width 256): the points of those
cards' trend along the width (suite/judge/trends.py).
GPU: llama-134m, the quality arms (sweep, then seeds at the picked rates) and every cost arm (GPU_DDP_ARMS over
TIME_SEEDS, GPU_FSDP_ARMS once) on every visible GPU: the wall-clock claims are about GPUs, and this
machine's CPU timings do not test them. Target (8+ GPUs): llama-1b, AdamW and Dion at rank 1/4 to one validation
loss (TARGET_LOSS), three seeds, the wall-clock card's runs. Paper: the paper's 3B runs are not in reach; the
preset names the configuration it would take and refuses to run.
"""

from __future__ import annotations

from pathlib import Path

import torch

from reproductions.dion.micro import OPTIMIZERS
from suite.config import RunConfig
from suite.plan.micro import Microbench
from suite.plan.plans import Plan, Schedule, StepCost, estimated_wall_s

SWEEP = "dion-lr-sweep"
RANK_FRACTIONS = (1.0, 0.5, 0.25, 0.0625)
SIZES = (256, 512, 1024, 2048)
# each grid holds its winner inside (tests/test_dion_plan.py checks the committed sweep); Muon and Dion share one
MATRIX_GRID = (0.003, 0.01, 0.02, 0.05, 0.1, 0.2)
LR_GRID = {"adamw": (3e-4, 1e-3, 3e-3, 1e-2), "muon": MATRIX_GRID, "dion": MATRIX_GRID}
# the sweep's winners on seed 0 (lowest final validation loss), from results/dion-smoke; a test checks them
LR_PICKED = {"adamw": 1e-3, "muon": 0.1, "dion": 0.05}
# the AdamW part of Muon and Dion (embeddings, head, norms) trains at AdamW's picked rate, as the AdamW arm does
SCALAR_LR = LR_PICKED["adamw"]
# the cost runs' rates: 8 steps whose time and bytes do not depend on the rate (fixed before the sweep ran)
COST_LR = {"adamw": 3e-3, "muon": 0.02, "dion": 0.02}
QUALITY = dict(model="llama-tiny", device="cpu", nproc=1, micro_batch=8, seq_len=128, eval_every=10, log_every=10)
QUALITY_STEPS, QUALITY_SEEDS, QUALITY_FRACTION = 40, (1, 2, 3), 0.25
# the quality arms: AdamW, Muon, and Dion at rank QUALITY_FRACTION and at full rank
QUALITY_ARMS = (
    ("adamw", {}),
    ("muon", {}),
    ("dion", {"rank_fraction": QUALITY_FRACTION}),
    ("dion", {"rank_fraction": 1.0}),
)
# Quality preset (issue 26): stdlib corpus (9.7M training tokens; the longer budget reads 1,000 x 1,024 = 1.0M, 0.11
# epochs), two budgets a factor 2 apart (a card per budget), one schedule rule for every arm
LONG = {**QUALITY, "data": "stdlib", "eval_every": 25}
LONG_STEPS = (500, 1000)
QUALITY_SCHEDULE = Schedule(warmup=0.1)
# Tune preset (issue 26 item 3), the first tune: the quality arms (AdamW, Muon, Dion at rank 1/4) on
# seed 0, TUNE_STEPS steps of the quality preset's corpus and schedule rule, each at every rate of its TUNE_GRID (as
# many rates for each: AlgoPerf's rule), filed as TUNE_SWEEP so that no verdict counts them; LR_TUNED holds the
# winners (tests/test_dion_plan.py checks them against results/dion-tune and that each sits inside its grid).
# Factor-2 steps around the smoke picks (LR_PICKED). The AdamW part of Muon and Dion stays at SCALAR_LR, fixed before
# the tune, so the tune moves the matrix optimizer's rate only.
TUNE_SWEEP = "dion-quality-lr-sweep"
SWEPT_ARMS = (("adamw", {}), ("muon", {}), ("dion", {"rank_fraction": QUALITY_FRACTION}))  # the sweeps' and the tune's
TUNE_STEPS = 200
TUNE_MATRIX_GRID = (0.0125, 0.025, 0.05, 0.1, 0.2, 0.4)
TUNE_GRID = {"adamw": (5e-4, 1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2), "muon": TUNE_MATRIX_GRID, "dion": TUNE_MATRIX_GRID}
# the tune's winners on seed 0 (lowest final validation loss), from results/dion-tune; a test checks them
LR_TUNED = {"adamw": 2e-3, "muon": 0.05, "dion": 0.025}
# The tune at the cards' horizon (issue 41 item 8), in two stages at each quality budget (LONG_STEPS). Stage one
# (tune-adamw, results/dion-tune-adamw): the AdamW arm at every rate of TUNE_GRID; its winners by budget (steps ->
# rate; a test checks them) train the AdamW part of Muon and Dion at that budget, so that every arm of a card trains
# its embeddings, head and norms at one rate. Stage two (tune-matrix, results/dion-tune-matrix): Muon and Dion at
# rank 1/4 at every rate of HORIZON_MATRIX_GRID at that budget, their AdamW part at stage one's winner.
ADAMW_TUNED = {500: 1e-3, 1000: 1e-3}
# Stage two's grid by budget: a first pass at 1,000 steps on TUNE_MATRIX_GRID found both optimizers best at its
# lowest rate (0.0125), an edge, so the 1,000-step grid is the same six factor-2 rates moved down a factor 4
HORIZON_MATRIX_GRID = {500: TUNE_MATRIX_GRID, 1000: tuple(lr / 4 for lr in TUNE_MATRIX_GRID)}
# stage two's winners by budget (steps -> optimizer -> rate); a test checks them against the records
MATRIX_TUNED = {500: {"muon": 0.025, "dion": 0.025}, 1000: {"muon": 0.0125, "dion": 0.0125}}
# Trend preset (issue 44): the half cards' Muon and Dion arms (Dion at rank 1/4 and at full rank) at narrower widths
# than llama-tiny's 256, whose points are the quality preset's: the same 500 steps, schedule rule, corpus, seeds and
# rates (the tune at 500 steps on llama-tiny; orthonormalized updates are scaled so that a rate carries across width,
# which the paper credits them with, and both sides of each card train at the rates of one tune). Width 512 is not
# in it: its steps measured 7.5 to 12.9 s beside another plan (Dion at full rank the most), about two hours for its
# 9 runs on 2 quiet cores, over the 90 minutes a plan may take. The AdamW card has no trend: AdamW's rate does not
# carry across width under the standard parametrization, and a tune per width is not in this budget.
TREND_MODELS = ("llama-tiny-w64", "llama-tiny-w128")
TREND_STEPS = LONG_STEPS[0]
TREND_ARMS = QUALITY_ARMS[1:]
# Wall seconds per step and per evaluation on 2 cores, from the quality runs of results/dion-smoke (medians over
# seeds; StepCost), by (optimizer, rank fraction)
QUALITY_COSTS = {
    ("adamw", None): StepCost(0.156, 0.19),
    ("muon", None): StepCost(0.196, 0.19),
    ("dion", 0.25): StepCost(0.179, 0.21),
    ("dion", 1.0): StepCost(0.267, 0.20),
}
# The cost runs (micro-batch 4): only the arms a smoke card reads. No card reads their losses, so one closing
# evaluation of one batch; eval_every beyond the run
MECH = dict(model="llama-tiny", device="cpu", micro_batch=4, seq_len=128, eval_every=100, eval_batches=1, log_every=5)
# bytes and memory (dion-ddp-bytes-low-rank, dion-fsdp-small-reductions): the meters' steps only, FLOPs on step 0,
# DDP's bucket rebuild on step 1, memory and collectives counted on step 2 (one whole period of DDP and FSDP2)
BYTES_STEPS = 3
# (method, world sizes, optimizer arms) of the bytes cards: DDP at 2 ranks, AdamW against Dion at rank 1/4, with
# rank 1/16, 1/2 and full rank beside; FSDP2 Dion 1/4 against Muon at 2 and 4 ranks, AdamW beside at 2
BYTES_ARMS = (
    (
        "ddp",
        (2,),
        (
            ("adamw", {}),
            ("dion", {"rank_fraction": 0.25}),
            ("dion", {"rank_fraction": 0.0625}),
            ("dion", {"rank_fraction": 0.5}),
            ("dion", {"rank_fraction": 1.0}),
        ),
    ),
    ("fsdp", (2,), (("adamw", {}), ("muon", {}), ("dion", {"rank_fraction": 0.25}))),
    ("fsdp", (4,), (("muon", {}), ("dion", {"rank_fraction": 0.25}))),
)
# the whole-step CPU-time card (dion-whole-step-vs-muon-cpu): DDP at 4 ranks, Dion 1/4 against Muon with AdamW
# beside, TIME_SEEDS interleaved repeats of TIME_STEPS steps (the meters' 3, then 5 timed)
TIME_WORLD, TIME_SEEDS, TIME_STEPS = 4, (0, 1, 2), 8
TIME_ARMS = (("adamw", {}), ("muon", {}), ("dion", {"rank_fraction": 0.25}))
# Smoke preset's wall time on 2 quiet cores (smoke_wall_s; estimated, not measured), per step, per evaluation and
# per metered step, by (method, world size, optimizer, rank fraction). The sweep's: QUALITY_COSTS, metered steps
# 0.45 s (its records' steps_s.metered over 2 steps). The cost runs' must come from records with one thread per
# worker, and the committed dion-smoke records of 2 and 4 workers ran 2 threads each on 2 cores (suite/run/launch.py,
# fixed): DDP at 4 ranks is results/sdp-smoke's DDP (StepCost 0.52 s, metered 0.96 s, an evaluation of one
# batch 0.3 s)
# plus each optimizer's own CPU work per step, 4 ranks x (its 1-process CPU step - AdamW's) / 2 cores (dion-smoke,
# micro-batch 4: Muon 0.17 s, Dion 1/4 0.06 s, 1/2 0.12 s, full rank 0.29 s; 1/16 0.04 s from the microbenchmark);
# DDP at 2 ranks alike (2 ranks / 2 cores); FSDP2 is the committed dion-smoke records' StepCost, an upper bound.
SWEEP_METERED_S = 0.45
SMOKE_COSTS = {
    ("ddp", 4, "adamw", None): StepCost(0.52, 0.3, metered_s=0.96),
    ("ddp", 4, "muon", None): StepCost(0.86, 0.3, metered_s=1.30),
    ("ddp", 4, "dion", 0.25): StepCost(0.64, 0.3, metered_s=1.08),
    ("ddp", 2, "adamw", None): StepCost(0.25, 0.3, metered_s=0.50),
    ("ddp", 2, "dion", 0.0625): StepCost(0.29, 0.3, metered_s=0.58),
    ("ddp", 2, "dion", 0.25): StepCost(0.31, 0.3, metered_s=0.62),
    ("ddp", 2, "dion", 0.5): StepCost(0.37, 0.3, metered_s=0.74),
    ("ddp", 2, "dion", 1.0): StepCost(0.54, 0.3, metered_s=1.08),
    ("fsdp", 2, "adamw", None): StepCost(0.32, 0.13, metered_s=0.62),
    ("fsdp", 2, "muon", None): StepCost(0.42, 0.13, metered_s=0.80),
    ("fsdp", 2, "dion", 0.25): StepCost(0.33, 0.13, metered_s=0.46),
    ("fsdp", 4, "muon", None): StepCost(1.04, 0.36, metered_s=1.78),
    ("fsdp", 4, "dion", 0.25): StepCost(0.85, 0.34, metered_s=1.46),
}
# the rest of a smoke plan, from results/dion-smoke/plan-summary.txt: start-up 5.5 s, microbenchmarks 14.9 s, report
# 4.5 s; a launch 18 s (launches and worker imports, 55 s over 3)
SMOKE_FIXED_S, SMOKE_LAUNCH_S = 25.0, 18.0
GPU = dict(model="llama-134m", device="cuda", seq_len=1024, micro_batch=8, eval_every=50, log_every=10)
GPU_STEPS, GPU_COST_STEPS = 300, 20
# the GPU preset's cost runs, on every visible GPU: the optimizer-phase card reads Dion 1/2 against Muon over
# TIME_SEEDS
GPU_DDP_ARMS = (
    ("adamw", {}),
    ("muon", {}),
    ("dion", {"rank_fraction": 1.0}),
    ("dion", {"rank_fraction": 0.25}),
    ("dion", {"rank_fraction": 0.5}),
    ("dion", {"rank_fraction": 0.0625}),
)
GPU_FSDP_ARMS = (("adamw", {}), ("muon", {}), ("dion", {"rank_fraction": 0.25}))
# wall-clock to a target loss (the paper's headline at 3B; here llama-1b, the largest model of the suite), on 8 or
# more GPUs. The paper's target is not known (docs/sources.md#dion): TARGET_LOSS is this suite's, fixed before any
# run; the rates are the smoke sweep's (tuned on llama-tiny, not at 1B), which the card states
TARGET = dict(model="llama-1b", device="cuda", seq_len=1024, micro_batch=4, eval_every=50, log_every=10)
TARGET_LOSS, TARGET_MAX_TOKENS, TARGET_GPUS = 3.5, 2e9, 8
PRESETS = ("smoke", "tune", "tune-adamw", "tune-matrix", "quality", "trend", "gpu", "target", "paper")


def _arm(optimizer: str, variant: dict, scalar_lr: float = SCALAR_LR) -> dict:
    sets = dict(variant)
    if optimizer != "adamw":
        sets["scalar_lr"] = scalar_lr
    return sets


def _tokens(steps: int, nproc: int, common: dict) -> int:
    return steps * nproc * common["micro_batch"] * common["seq_len"]


def sweep_runs(common: dict, steps: int) -> list[RunConfig]:
    """The learning-rate sweep on seed 0, every rate of LR_GRID, `steps` steps of the same tokens each, filed as
    SWEEP (no card counts them; LR_PICKED are its winners)."""
    budget = {"tokens": _tokens(steps, common["nproc"], common)}
    return [
        RunConfig(optimizer=o, lr=lr, seed=0, variant=_arm(o, v), reproduction=SWEEP, **budget, **common)
        for o, v in SWEPT_ARMS
        for lr in LR_GRID[o]
    ]


def quality_runs(common: dict, steps: int, seeds: tuple[int, ...]) -> list[RunConfig]:
    """The sweep (sweep_runs), then `seeds` at the picked rates; Dion also at full rank; every run `steps` steps of
    the same tokens."""
    return sweep_runs(common, steps) + picked_runs(common, steps, seeds)


def picked_runs(
    common: dict,
    steps: int,
    seeds: tuple[int, ...],
    rates: dict[str, float] = LR_PICKED,
    scalar_lr: float = SCALAR_LR,
    arms: tuple = QUALITY_ARMS,
) -> list[RunConfig]:
    """`arms` (the four quality arms) at `rates` (by optimizer; Dion's rate serves both of its ranks), the AdamW part
    of Muon and Dion at `scalar_lr`, `steps` steps of the same tokens each, seed by seed."""
    budget = {"tokens": _tokens(steps, common["nproc"], common)}
    return [
        RunConfig(optimizer=o, lr=rates[o], seed=s, variant=_arm(o, v, scalar_lr), **budget, **common)
        for s in seeds
        for o, v in arms
    ]


def _long() -> list[RunConfig]:
    return [
        cfg
        for steps in LONG_STEPS
        for cfg in picked_runs(
            {**LONG, **QUALITY_SCHEDULE.settings(steps)},
            steps,
            QUALITY_SEEDS,
            {"adamw": ADAMW_TUNED[steps], **MATRIX_TUNED[steps]},
            ADAMW_TUNED[steps],
        )
    ]


def trend_runs() -> list[RunConfig]:
    """The half cards' Muon and Dion arms (TREND_ARMS) on each model of TREND_MODELS, narrowest first, as the quality
    preset runs them on llama-tiny: its seeds, steps, schedule rule, corpus and rates at that budget."""
    common = {**LONG, **QUALITY_SCHEDULE.settings(TREND_STEPS)}
    return [
        cfg
        for model in TREND_MODELS
        for cfg in picked_runs(
            {**common, "model": model},
            TREND_STEPS,
            QUALITY_SEEDS,
            MATRIX_TUNED[TREND_STEPS],
            ADAMW_TUNED[TREND_STEPS],
            TREND_ARMS,
        )
    ]


def tune_runs(
    steps: int = TUNE_STEPS, arms: tuple = SWEPT_ARMS, scalar_lr: float = SCALAR_LR, grid: dict = TUNE_GRID
) -> list[RunConfig]:
    """Seed 0 of `arms` (AdamW, Muon and Dion at rank 1/4), `steps` steps each under the quality schedule rule, at
    every rate of its `grid`, rate by rate (a tune stopped midway leaves every optimizer with nearly as many
    trials); the AdamW part of Muon and Dion at `scalar_lr`."""
    common = {**LONG, **QUALITY_SCHEDULE.settings(steps)}
    budget = {"tokens": _tokens(steps, common["nproc"], common)}
    return [
        RunConfig(
            optimizer=o,
            lr=grid[o][i],
            seed=0,
            variant=_arm(o, v, scalar_lr),
            reproduction=TUNE_SWEEP,
            **budget,
            **common,
        )
        for i in range(len(TUNE_MATRIX_GRID))
        for o, v in arms
    ]


def tune_adamw_runs() -> list[RunConfig]:
    """Stage one of the tune at the cards' horizon: the AdamW arm at each quality budget (LONG_STEPS); its winners
    (ADAMW_TUNED) become the rate of the AdamW part of Muon and Dion at that budget."""
    return [cfg for steps in LONG_STEPS for cfg in tune_runs(steps, SWEPT_ARMS[:1])]


def tune_matrix_runs() -> list[RunConfig]:
    """Stage two: Muon and Dion at rank 1/4 at each quality budget on that budget's grid (HORIZON_MATRIX_GRID), their
    AdamW part at stage one's winner there."""
    return [
        cfg
        for steps in LONG_STEPS
        for cfg in tune_runs(
            steps, SWEPT_ARMS[1:], ADAMW_TUNED[steps], dict.fromkeys(("muon", "dion"), HORIZON_MATRIX_GRID[steps])
        )
    ]


def quality_wall_s(runs: list[RunConfig]) -> float:
    """Estimated wall seconds of the quality preset's runs on 2 quiet cores (QUALITY_COSTS; not measured)."""
    items = []
    for cfg in runs:
        steps = cfg.tokens / _tokens(1, cfg.nproc, LONG)
        cost = QUALITY_COSTS[(cfg.optimizer, cfg.variant.get("rank_fraction"))]
        items.append((cost, steps, int(steps // cfg.eval_every)))
    return estimated_wall_s(items)


def _cost_run(method: str, nproc: int, optimizer: str, variant: dict, seed: int, steps: int, common: dict):
    return RunConfig(
        method=method,
        nproc=nproc,
        optimizer=optimizer,
        lr=COST_LR[optimizer],
        seed=seed,
        tokens=_tokens(steps, nproc, common),
        variant=_arm(optimizer, variant),
        **common,
    )


def mechanism_runs(common: dict) -> list[RunConfig]:
    """The bytes cards' arms once, BYTES_STEPS steps each (BYTES_ARMS), then the whole-step card's arms (TIME_ARMS,
    DDP at TIME_WORLD) over TIME_SEEDS, seed by seed (every arm once, then again), TIME_STEPS steps each."""
    runs = [
        _cost_run(method, nproc, optimizer, variant, 0, BYTES_STEPS, common)
        for method, sizes, arms in BYTES_ARMS
        for nproc in sizes
        for optimizer, variant in arms
    ]
    return runs + [
        _cost_run("ddp", TIME_WORLD, optimizer, variant, seed, TIME_STEPS, common)
        for seed in TIME_SEEDS
        for optimizer, variant in TIME_ARMS
    ]


def gpu_cost_runs(common: dict, steps: int, world: int) -> list[RunConfig]:
    """Every DDP arm (GPU_DDP_ARMS) over TIME_SEEDS, seed by seed, and every FSDP2 arm once, at `world`."""
    runs = [
        _cost_run("ddp", world, optimizer, variant, seed, steps, common)
        for seed in TIME_SEEDS
        for optimizer, variant in GPU_DDP_ARMS
    ]
    return runs + [_cost_run("fsdp", world, o, v, 0, steps, common) for o, v in GPU_FSDP_ARMS]


def _steps(cfg: RunConfig) -> int:
    return cfg.tokens // (cfg.nproc * cfg.micro_batch * cfg.seq_len)


def smoke_wall_s(runs: list[RunConfig]) -> float:
    """Estimated wall seconds of the smoke preset on 2 quiet cores (SMOKE_COSTS, QUALITY_COSTS; not measured)."""
    items = []
    for cfg in runs:
        steps = _steps(cfg)
        if cfg.reproduction == SWEEP:
            base = QUALITY_COSTS[(cfg.optimizer, cfg.variant.get("rank_fraction"))]
            cost = StepCost(base.step_s, base.eval_s, metered_s=SWEEP_METERED_S)
        else:
            cost = SMOKE_COSTS[(cfg.method, cfg.nproc, cfg.optimizer, cfg.variant.get("rank_fraction"))]
        evals = max(steps // cfg.eval_every, 1)  # a run that ends between evaluations closes with one
        # the meters' steps (suite/meters/schedule.py; DDP and FSDP2 have period 1): FLOPs on one, memory and
        # collectives on another
        metered = len({cfg.flop_step, cfg.mem_step, cfg.comm_step} & set(range(steps)))
        items.append((cost, steps, evals, metered))
    launches = len({cfg.nproc for cfg in runs})
    return SMOKE_FIXED_S + estimated_wall_s(items, launch_s=SMOKE_LAUNCH_S, launches=launches)


def micro_items(device: str = "cpu", sizes: tuple[int, ...] = SIZES) -> list[Microbench]:
    items = []
    for optimizer in OPTIMIZERS:
        fractions = RANK_FRACTIONS if optimizer == "dion" else (1.0,)
        shapes = [dict(optimizer=optimizer, rows=n, cols=n, rank_fraction=f) for n in sizes for f in fractions]
        items.append(
            Microbench(
                f"{optimizer}-step", "reproductions.dion.micro:optimizer_step", shapes, device, warmup=1, repeat=3
            )
        )
    return items


def _gpu() -> tuple[list[RunConfig], list[Microbench]]:
    gpus = torch.cuda.device_count()
    if gpus < 1:
        raise ValueError("the dion gpu preset needs a CUDA device; use --preset smoke on CPU")
    common = {**GPU, "nproc": gpus}
    quality = quality_runs(common, GPU_STEPS, QUALITY_SEEDS)
    return [*quality, *gpu_cost_runs(GPU, GPU_COST_STEPS, gpus)], micro_items("cuda", (1024, 2048, 4096, 8192))


def _target() -> list[RunConfig]:
    gpus = torch.cuda.device_count()
    if gpus < TARGET_GPUS:
        raise ValueError(f"the dion target preset needs {TARGET_GPUS} or more CUDA devices, found {gpus}")
    arms = (("adamw", {}), ("dion", {"rank_fraction": QUALITY_FRACTION}))
    return [
        RunConfig(
            optimizer=o,
            lr=LR_PICKED[o],
            seed=s,
            variant=_arm(o, v),
            nproc=gpus,
            target=TARGET_LOSS,
            max_tokens=TARGET_MAX_TOKENS,
            **TARGET,
        )
        for s in QUALITY_SEEDS
        for o, v in arms
    ]


def plan(preset: str) -> Plan:
    notes = []
    if preset == "smoke":
        runs = [*mechanism_runs(MECH), *sweep_runs(QUALITY, QUALITY_STEPS)]
        micro = micro_items()
        notes.append("CPU timings: the GPU wall-clock claims are not testable here (--preset gpu)")
        notes.append(f"estimated wall time {smoke_wall_s(runs) / 60:.1f} minutes on 2 quiet cores (not measured)")
    elif preset == "quality":
        runs, micro = _long(), []
        notes.append(f"estimated wall time {quality_wall_s(runs) / 60:.0f} minutes on 2 quiet cores (not measured)")
        notes.append("learning rates from the tune at each budget (the tune-adamw and tune-matrix presets)")
    elif preset == "trend":
        runs, micro = trend_runs(), []
        notes.append(
            f"estimated wall time at most {quality_wall_s(runs) / 60:.0f} minutes on 2 quiet cores (not measured: "
            "llama-tiny's step costs, which a narrower model's steps do not exceed)"
        )
        notes.append(f"width 256 is the quality preset's llama-tiny; this preset adds {', '.join(TREND_MODELS)}")
    elif preset == "tune":
        runs, micro = tune_runs(), []
        notes.append(f"estimated wall time {quality_wall_s(runs) / 60:.0f} minutes on 2 quiet cores (not measured)")
        notes.append(
            f"a learning-rate sweep filed as {TUNE_SWEEP}: suite.judge.sweeps.sweep_winners picks each optimizer's rate"
        )
    elif preset in ("tune-adamw", "tune-matrix"):
        runs, micro = (tune_adamw_runs() if preset == "tune-adamw" else tune_matrix_runs()), []
        notes.append(f"estimated wall time {quality_wall_s(runs) / 60:.0f} minutes on 2 quiet cores (not measured)")
    elif preset == "gpu":
        runs, micro = _gpu()
    elif preset == "target":
        runs, micro = _target(), []
        notes.append("learning rates from the smoke sweep (llama-tiny), not tuned at llama-1b")
    else:
        raise ValueError(
            "the dion paper preset (3B models to a target loss on GPUs) is not in reach of this suite's models; "
            "use --preset smoke, gpu or target"
        )
    return Plan(
        preset,
        runs,
        protocol="equal tokens in every comparison; quality runs: learning rate per optimizer from a recorded "
        "seed-0 sweep with as many rates for each (the quality preset's: at its budget), the AdamW part of Muon and "
        "Dion at the AdamW arm's rate",
        claims=Path(__file__).with_name("claims.yaml"),
        notes=notes,
        micro=micro,
    )
