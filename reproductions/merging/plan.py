"""Presets: one pretrained llama-tiny, K fine-tunes of it on K library areas, and the merge step.

- Pretraining: llama-tiny on `stdlib-rest` (the standard library's files in none of the task areas), the preset's
  pretraining steps (BUDGETS) of 8 x 128 byte tokens, warm-up over 10% of them then cosine; the negative control's
  models are the same recipe from other initialisations (seeds 1-3).
- Fine-tunes: from the base (`--set init_from`), one per task area (`stdlib-text`, `stdlib-net`,
  `stdlib-concurrency`) and seed (0-2: the data order; the start is the base), the preset's fine-tune steps at a
  constant 1e-3 after a 10% warm-up (SWA's averaging wants a constant rate), the same schedule and budget for every
  task. The first task's fine-tune also saves its model at every quarter of its run: SWA averages the checkpoints of
  its second half.
- Smoke: 200 pretraining and 80 fine-tune steps (482 s measured on 2 cores; the fine-tunes do not reach the
  cards' plateau). Quality: 1,000 and 600 (2,644 s measured on 2 cores): the fine-tunes still move up to 2.98% over
  their last fifth at a constant rate (2.01% at 400 steps), so the cards stay short of the 2% plateau.
- The held-out domain `stdlib-gui` is read by no run.
- The merge step (step.py): one microbenchmark item per merge or reference, one row per seed.
- `aggregation-tune` and `aggregation`: merging as DiLoCo's aggregation against DiLoCo (aggregation_plan.py).

Every model file lies under checkpoints/merging/PRESET/ (the plan's runs write and read them there, relative to
the directory `reproduce` runs in).
"""

from __future__ import annotations

from reproductions.merging import aggregation_plan
from suite.config import RunConfig
from suite.evals.checkpoint import trajectory_path
from suite.micro import Microbench
from suite.plans import Plan

TASKS = ("text", "net", "concurrency")
OOD = "gui"
SEEDS = (0, 1, 2)
CONTROL_SEEDS = (1, 2, 3)  # other initialisations of the base, one per fine-tune seed
STEP_TOKENS = 8 * 128  # one process x micro-batch 8 x sequence 128
# preset -> (pretraining steps, fine-tune steps); the gpu preset takes the smoke budget
BUDGETS = {"smoke": (200, 80), "quality": (1000, 600), "gpu": (200, 80)}
SAVES = 4  # the text fine-tune saves its model SAVES times, evenly; SWA averages those from its middle on
EVAL = {"n_batches": 4, "batch": 8, "seq_len": 128}  # the merge step's evaluation windows per split


def _folder(preset: str) -> str:
    return f"checkpoints/merging/{preset}"


def _common(preset: str) -> dict:
    device = "cuda" if preset == "gpu" else "cpu"
    return dict(model="llama-tiny", nproc=1, device=device, micro_batch=8, seq_len=128, eval_every=20)


def base_path(preset: str, seed: int = 0) -> str:
    return f"{_folder(preset)}/base-s{seed}.pt"


def finetune_path(preset: str, task: str, seed: int) -> str:
    return f"{_folder(preset)}/ft-{task}-s{seed}.pt"


def _pretrain(preset: str, seed: int) -> RunConfig:
    steps = BUDGETS[preset][0]
    return RunConfig(
        method="ddp",
        seed=seed,
        checkpoint=base_path(preset, seed),
        tokens=steps * STEP_TOKENS,
        lr=3e-3,
        warmup_steps=steps // 10,
        lr_decay="cosine",
        data="stdlib-rest",
        **_common(preset),
    )


def _finetune(preset: str, task: str, seed: int) -> RunConfig:
    steps = BUDGETS[preset][1]
    cfg = RunConfig(
        method="ddp",
        seed=seed,
        data=f"stdlib-{task}",
        init_from=base_path(preset),
        checkpoint=finetune_path(preset, task, seed),
        tokens=steps * STEP_TOKENS,
        lr=1e-3,
        warmup_steps=steps // 10,
        **_common(preset),
    )
    if task == TASKS[0]:
        cfg.save_every = steps // SAVES
    return cfg


def _trajectory(preset: str, seed: int) -> list[str]:
    """The text fine-tune's saves from the middle of its run to its end (smoke: steps 40, 60 and 80)."""
    steps = BUDGETS[preset][1]
    every = steps // SAVES
    saves = [s for s in range(every, steps + 1, every) if s >= steps // 2]
    return [str(trajectory_path(finetune_path(preset, TASKS[0], seed), s)) for s in saves]


def _row(preset: str, merge: str, seed: int, control_seed: int) -> dict:
    row = {
        "merge": merge,
        "seed": seed,
        "base": base_path(preset),
        "models": [finetune_path(preset, t, seed) for t in TASKS],
        "tasks": list(TASKS),
        "ood": OOD,
        "eval": EVAL,
    }
    if merge in ("swa", "final-iterate"):
        row["trajectory"] = _trajectory(preset, seed)
    if merge.startswith("init-"):
        row["control"] = base_path(preset, control_seed)
    return row


def merge_items(preset: str) -> list[Microbench]:
    from reproductions.merging.step import MERGES

    device = _common(preset)["device"]
    pairs = list(zip(SEEDS, CONTROL_SEEDS, strict=True))
    return [
        Microbench(
            name,
            "reproductions.merging.step:merge_item",
            shapes=[_row(preset, name, seed, control) for seed, control in pairs],
            device=device,
            warmup=0,
            repeat=1,
        )
        for name in MERGES
    ]


def _steps(preset: str) -> int:
    pretrain, finetune = BUDGETS[preset]
    return pretrain * (1 + len(CONTROL_SEEDS)) + finetune * len(TASKS) * len(SEEDS)


def _minutes(preset: str) -> int:
    """Estimated (not measured) from results/merging-smoke's phases on 2 cores: 0.19 s a timed step, 0.25 s an
    evaluation (one every 20 steps), 143 s for the merge step's rows."""
    steps = _steps(preset)
    return round((0.19 * steps + 0.25 * steps / 20 + 143) / 60)


def _aggregation_plan(preset: str) -> Plan:
    runs = aggregation_plan.runs(preset)
    return Plan(
        preset,
        runs,
        protocol="equal tokens",
        notes=[
            "DiLoCo against DiLoCo whose outer step merges the groups' task vectors by TIES (aggregation_plan.py)",
            f"estimated wall time on 2 quiet cores: about {aggregation_plan.minutes(runs)} minutes (not measured)",
        ],
    )


def plan(preset: str) -> Plan:
    if preset in aggregation_plan.PRESETS:
        return _aggregation_plan(preset)
    runs = [_pretrain(preset, s) for s in (0, *CONTROL_SEEDS)]
    runs += [_finetune(preset, t, s) for s in SEEDS for t in TASKS]
    return Plan(
        preset,
        runs,
        protocol="equal tokens",
        notes=[
            f"model files under {_folder(preset)}/; the merge step reads the fine-tunes the runs wrote there",
            f"estimated wall time on 2 quiet cores: {_steps(preset):,} training steps of llama-tiny and the merge "
            f"step: about {_minutes(preset)} minutes (not measured)",
        ],
        micro=merge_items(preset),
    )
