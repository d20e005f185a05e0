"""The low-communication row's plan: Streaming DiLoCo and IsoLoCo beside DiLoCo (and DDP) at equal tokens.

Smoke (this machine, 2 cores, gloo): llama-tiny (4 blocks, 3.1M parameters) at the Streaming DiLoCo paper's 2
replicas (M = 2, one rank each), H = SYNC steps, for the meters' two warm-up steps and one whole period (the ledger
counts steps 2 to H + 1, in which every fragment exchanges once): DDP, DiLoCo, IsoLoCo, and Streaming DiLoCo with
P = 2 strided fragments, tau 1 and alpha 0.5, its outer gradients in E3M0 and in FP32. Bytes and calls per period
come from the ledger (tests/test_low_comm.py checks them against the derived count).

Tune and trend (the quality cards, along workers): llama-tiny-w64 (0.22M parameters) on the stdlib corpus, every run
emulated (suite/run/emulate.py: K workers as threads of one process, the arithmetic of K real ones), GLOBAL_ROWS
sequences of 128 tokens a step over all workers (K workers read GLOBAL_ROWS / K each), so every point of the axis
trains the same tokens in the same QUALITY_STEPS steps, H = QUALITY_SYNC, AdamW inside at INNER_LR under one
schedule (warm-up 10%, cosine). What the methods change is the outer step, so what is tuned is the outer rate:
`tune` sweeps the outer_lr of DiLoCo, Streaming DiLoCo and IsoLoCo over their OUTER_GRIDS at TUNE_WORKERS workers on
seed 0, and `tune-sgd` that of IsoLoCo's merge under outer SGD without momentum (the abstract's "DiLoCo SGD with
Iso-C", added after the first had run), and `tune-bytes` that of DiLoCo at H = BYTES_SYNC, about Streaming DiLoCo's
bytes (the comparison at equal bytes): three rates each, equal trials, filed as TUNE_SWEEP so that no verdict counts
a tuning run (suite.judge.sweeps picks the winners, OUTER_TUNED). `trend` runs every arm of TREND_ARMS at its winner
at each of WORKERS, and DiLoCo at H = BYTES_SYNC at TUNE_WORKERS, on seeds 1-3. The inner rate is the matrix-
optimizer row's AdamW winner at this model (4e-3 at 1,024 tokens a step on one process), not retuned here: it is the
same for every arm.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from suite.config import RunConfig
from suite.plan.plans import Plan, Schedule

SYNC, WORLD = 8, 2
COMMON = dict(model="llama-tiny", device="cpu", nproc=WORLD, micro_batch=4, seq_len=128, eval_every=100, eval_batches=1)
STEPS = 2 + SYNC
# (method, variant): the baseline, the methods' parent, IsoLoCo, and Streaming DiLoCo in 4 bits and in 32
ARMS = (
    ("ddp", {}),
    ("diloco", {"F": SYNC}),
    ("isoloco", {"F": SYNC}),
    ("streaming-diloco", {"F": SYNC}),
    ("streaming-diloco", {"F": SYNC, "quantize": "none"}),
)

QUALITY = dict(model="llama-tiny-w64", device="cpu", seq_len=128, data="stdlib", eval_every=32, log_every=8)
GLOBAL_ROWS, QUALITY_STEPS, QUALITY_SYNC, INNER_LR = 16, 256, 16, 4e-3
# DiLoCo's H at about Streaming DiLoCo's bytes at H = QUALITY_SYNC and TUNE_WORKERS: the ledger's payload of its E3M0
# all-gather at 4 workers (every worker's message) is 4 x 68 / 512 = 0.53 of DiLoCo's FP32 all-reduce at one H, so
# DiLoCo every 32 steps sends 0.94 of Streaming DiLoCo's payload (on a ring's wire, (K - 1) / K of the gathered
# output against 2 (K - 1) / K of the reduced tensor, equal bytes would be H = 60)
BYTES_SYNC = 32
QUALITY_SCHEDULE = Schedule(warmup=0.1)
WORKERS, TUNE_WORKERS, SEEDS = (2, 4, 8), 4, (1, 2, 3)
# the arms by name: (method, its variant beyond H and the outer rate); DiLoCo, the baseline of every card, first.
# isoloco-sgd is the abstract's "DiLoCo SGD with Iso-C": Iso-C's merge under outer SGD without momentum
QUALITY_ARMS = {
    "diloco": ("diloco", {}),
    "streaming-diloco": ("streaming-diloco", {}),
    "isoloco": ("isoloco", {}),
    "isoloco-sgd": ("isoloco", {"outer": "sgd", "outer_momentum": 0.0}),
    "diloco-h32": ("diloco", {"F": BYTES_SYNC}),
}
# the arms compared along WORKERS; diloco-h32 (DiLoCo at about Streaming DiLoCo's bytes) at TUNE_WORKERS only
TREND_ARMS = ("diloco", "streaming-diloco", "isoloco", "isoloco-sgd")
# three factor-2 outer rates per arm: around DiLoCo's 0.7 for the Nesterov arms; one step higher for outer SGD without
# momentum, whose step is about a tenth of Nesterov's (momentum 0.9) at one rate (lr 1 lands on the merge itself)
FIRST_GRIDS = {"diloco": (0.35, 0.7, 1.4), "streaming-diloco": (0.35, 0.7, 1.4), "isoloco": (0.35, 0.7, 1.4)}
FIRST_GRIDS["isoloco-sgd"] = (0.7, 1.4, 2.8)
FIRST_GRIDS["diloco-h32"] = FIRST_GRIDS["diloco"]
# round two (tune-extend), two rates more for every arm, nearest first, past the edge where round one's winner sat
# there (DiLoCo's and Streaming DiLoCo's at 0.35, IsoLoCo's at 1.4, IsoLoCo-SGD's at 2.8), else on the side of the
# better neighbour (DiLoCo at H = 32: 0.7 best, 0.35 next): results/low-comm-tune, -tune-sgd, -tune-bytes
LOWER, HIGHER = (0.175, 0.0875), (2.8, 5.6)
EXTENSION = {"diloco": LOWER, "streaming-diloco": LOWER, "diloco-h32": LOWER, "isoloco": HIGHER}
EXTENSION["isoloco-sgd"] = (5.6, 11.2)
OUTER_GRIDS = {arm: tuple(sorted(FIRST_GRIDS[arm] + EXTENSION.get(arm, ()))) for arm in QUALITY_ARMS}
TUNE_SWEEP = "low-comm-outer-lr-sweep"
# each tune preset's rates by arm: the three Nesterov arms, outer SGD with Iso-C and DiLoCo at equal bytes (each added
# after the one before had run), then round two of all
TUNE_PRESETS = {
    "tune": {arm: FIRST_GRIDS[arm] for arm in ("diloco", "streaming-diloco", "isoloco")},
    "tune-sgd": {"isoloco-sgd": FIRST_GRIDS["isoloco-sgd"]},
    "tune-bytes": {"diloco-h32": FIRST_GRIDS["diloco-h32"]},
    "tune-extend": EXTENSION,
}
# each arm's winner over its five rates, inside them (results/low-comm-tune*; a test checks it)
OUTER_TUNED: dict[str, float | None] = {
    "diloco": 0.35,
    "streaming-diloco": 0.35,
    "isoloco": 2.8,
    "isoloco-sgd": 5.6,
    "diloco-h32": 0.7,
}
PRESETS = ("smoke", *TUNE_PRESETS, "trend")


def smoke_runs() -> list[RunConfig]:
    """Every arm of ARMS for STEPS steps of equal tokens."""
    tokens = STEPS * WORLD * COMMON["micro_batch"] * COMMON["seq_len"]
    return [RunConfig(method=method, variant=variant, tokens=tokens, **COMMON) for method, variant in ARMS]


def quality_run(arm: str, workers: int, outer_lr: float, seed: int) -> RunConfig:
    """Arm `arm` of QUALITY_ARMS on QUALITY at `workers` emulated workers, GLOBAL_ROWS / workers rows each, at outer
    rate `outer_lr`."""
    if GLOBAL_ROWS % workers:
        raise ValueError(f"{workers} workers do not split {GLOBAL_ROWS} rows a step evenly")
    method, variant = QUALITY_ARMS[arm]
    return RunConfig(
        method=method,
        nproc=workers,
        emulate=True,
        micro_batch=GLOBAL_ROWS // workers,
        lr=INNER_LR,
        seed=seed,
        tokens=QUALITY_STEPS * GLOBAL_ROWS * QUALITY["seq_len"],
        variant={"F": QUALITY_SYNC, "outer_lr": outer_lr, **variant},
        **QUALITY,
        **QUALITY_SCHEDULE.settings(QUALITY_STEPS),
    )


def tune_runs(grids: dict[str, tuple[float, ...]]) -> list[RunConfig]:
    """Each arm of `grids` at TUNE_WORKERS at each of its rates on seed 0, rate by rate (a tune stopped midway leaves
    every arm with nearly as many trials), filed as TUNE_SWEEP."""
    if not grids:
        raise ValueError("no rates to tune in this preset yet: set EXTENSION in reproductions/low_comm/plan.py")
    return [
        replace(quality_run(arm, TUNE_WORKERS, rates[i], 0), reproduction=TUNE_SWEEP)
        for i in range(max(len(rates) for rates in grids.values()))
        for arm, rates in grids.items()
        if i < len(rates)
    ]


def trend_runs() -> list[RunConfig]:
    """Every arm at its OUTER_TUNED rate at each of WORKERS on each of SEEDS, seed by seed (the tune's seed 0 left
    out, AlgoPerf's rule); ValueError (one line) naming the tune while a rate is unset."""
    if unset := [arm for arm in QUALITY_ARMS if OUTER_TUNED[arm] is None]:
        presets = sorted({p for p, arms in TUNE_PRESETS.items() if set(arms) & set(unset)})
        raise ValueError(
            f"no tuned outer rate for {', '.join(unset)}: run `python -m suite reproduce low-comm --preset "
            f"{' and --preset '.join(presets)}`, commit the records and set OUTER_TUNED in low_comm/plan.py"
        )
    points = [(arm, k) for k in WORKERS for arm in TREND_ARMS] + [("diloco-h32", TUNE_WORKERS)]
    return [quality_run(arm, k, OUTER_TUNED[arm], s) for s in SEEDS for arm, k in points]


def plan(preset: str) -> Plan:
    if preset == "smoke":
        runs, protocol = smoke_runs(), "equal tokens; bytes and calls of one period"
        notes = ["2 replicas of llama-tiny on CPU: the paper's 1B-4B quality and bandwidth claims are not tested here"]
    elif preset in TUNE_PRESETS:
        runs = tune_runs(TUNE_PRESETS[preset])
        protocol = f"an outer-rate sweep at {TUNE_WORKERS} emulated workers on seed 0, filed apart from the evidence"
        notes = []
    elif preset == "trend":
        runs = trend_runs()
        protocol = f"equal tokens at {', '.join(map(str, WORKERS))} emulated workers; every arm at its tuned outer rate"
        notes = ["llama-tiny-w64 (0.22M parameters) on one CPU process: the papers' 35M-4B claims are not tested here"]
    else:
        raise ValueError(f"the low-comm plan has the presets {', '.join(PRESETS)}, not {preset!r}")
    return Plan(preset, runs, protocol=protocol, claims=Path(__file__).with_name("claims.yaml"), notes=notes)
