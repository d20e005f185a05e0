"""Merging as DiLoCo's aggregation against DiLoCo itself, at equal tokens: the `aggregation-tune` and `aggregation`
presets.

- Arms: fl-fsdp's DiLoCo (F = 8 inner AdamW steps, outer Nesterov SGD at lr 0.7 and momentum 0.9, one rank per
  group: K = 4 groups on 4 gloo ranks) and diloco-merge with TIES-Merging at its paper's defaults (density 0.2,
  lambda 1) over the same groups. Task arithmetic at lambda 1/K is DiLoCo itself (tests/test_merged_diloco.py), and
  any other lambda is DiLoCo with its outer rate scaled, so it is no arm of its own.
- Both arms: llama-tiny on the stdlib corpus, micro-batch 4 x 128 tokens per rank, STEPS steps, 10% warm-up then
  cosine to 10% (the fl-fsdp quality preset's schedule rule), evaluation every 2F steps (after an aggregation).
- `aggregation-tune`: seed 0, each arm at every inner learning rate of LR_GRID (as many trials each: AlgoPerf's
  rule), filed as SWEEP so that no verdict counts them; LR_TUNED holds the winners, which
  tests/test_merging_aggregation.py checks against results/merging-aggregation-tune (1,039 s on 2 cores).
- `aggregation`: seeds 1-3 of each arm at its tuned rate; the card merging-diloco-ties reads them.
"""

from __future__ import annotations

from suite.config import RunConfig
from suite.plan.plans import Schedule, lr_sweep, tuned_runs

WORLD = 4
F = 8
STEPS = 192
COMMON = dict(model="llama-tiny", device="cpu", nproc=WORLD, micro_batch=4, seq_len=128, data="stdlib")
SCHEDULE = Schedule(warmup=0.1)
ARMS = (("diloco", {"F": F, "G": 1}), ("diloco-merge", {"F": F, "G": 1, "merge": "ties"}))
SWEEP = "merging-aggregation-lr-sweep"
# factor-2 steps, moved down twice by the tunes: rates 1.5e-3 to 1.2e-2 (commit 3042600) put both winners at 1.5e-3;
# rates 3.75e-4 to 1.2e-2 (commit 2cdefb8, stopped after 7 of 12 runs) put TIES's at 3.75e-4 (2.2797; DiLoCo's at
# 7.5e-4, 2.2868), while 3e-3 lost 0.2 nats to the best and 6e-3 and 1.2e-2 more (2.65-2.87), so the grid slides
# down and keeps six rates
LR_GRID = (9.375e-5, 1.875e-4, 3.75e-4, 7.5e-4, 1.5e-3, 3e-3)
# the committed tune's winners (results/merging-aggregation-tune, commit 803c7c5; a test checks them)
LR_TUNED: dict[str, float | None] = {"diloco": 7.5e-4, "diloco-merge": 3.75e-4}
SEEDS = (1, 2, 3)
PRESETS = ("aggregation-tune", "aggregation")


def _arms(seed: int, lr: dict[str, float | None]) -> list[RunConfig]:
    common = {**COMMON, **SCHEDULE.settings(STEPS), "eval_every": 2 * F, "log_every": F}
    tokens = STEPS * WORLD * COMMON["micro_batch"] * COMMON["seq_len"]
    return [
        RunConfig(method=m, seed=seed, variant=dict(v), tokens=tokens, **({"lr": lr[m]} if lr[m] else {}), **common)
        for m, v in ARMS
    ]


# wall seconds per step of a 4-rank FL method at this micro-batch on 2 cores (fl-fsdp's QUALITY_COSTS: 0.39-0.43),
# and per evaluation; an estimate, not a measurement
STEP_S, EVAL_S = 0.45, 0.9


def minutes(planned: list[RunConfig]) -> int:
    """Estimated wall minutes of `planned` on 2 quiet cores (STEP_S, EVAL_S)."""
    return round(len(planned) * (STEPS * STEP_S + STEPS // (2 * F) * EVAL_S) / 60)


def runs(preset: str) -> list[RunConfig]:
    """The runs of `preset` (one of PRESETS); ValueError (one line) for the comparison before its tune."""
    if preset == "aggregation-tune":
        return lr_sweep(_arms(0, {m: None for m, _ in ARMS}), LR_GRID, SWEEP)
    tune = "python -m suite reproduce merging --preset aggregation-tune"
    return tuned_runs(_arms(0, {m: None for m, _ in ARMS}), LR_TUNED, lambda cfg: cfg.method, SEEDS, tune)
