"""Presets: one pretrained llama-tiny, K fine-tunes of it on K library areas, and the merge step.

- Pretraining: llama-tiny on `stdlib-rest` (the standard library's files in none of the task areas), the preset's
  pretraining steps (BUDGETS) of 8 x 128 byte tokens, warm-up over 10% of them then cosine; the negative control's
  models are the same recipe from other initialisations (seeds 1-3).
- Fine-tunes: from the base (`--set init_from`), one per task area (`stdlib-text`, `stdlib-net`,
  `stdlib-concurrency`) and seed (0-2: the data order; the start is the base), the preset's fine-tune steps at a
  peak of 1e-3 after a 10% warm-up, then cosine down to a tenth over the run: the same complete schedule and budget
  for every task, judged at its end (a constant-rate fine-tune was still moving 2.98% over its last fifth after
  600 steps). The first task's fine-tune also saves its model where its last quarter begins.
- SWA (Izmailov et al. 2018, arXiv 1803.05407) averages at a constant rate, which a decaying run has not: its
  trajectory is a tail of its own. From the text fine-tune's save at three quarters, the last quarter's steps again
  at the constant rate the cosine had reached there, saving the model TAIL_SAVES times; SWA is the average of those
  saves, the same tokens as the decaying run, and it is compared with the decaying run's final model. The tail's
  data order is seed + TAIL_SEED, so its windows are fresh draws and not a replay of the run's first quarter.
- Smoke: 200 pretraining and 80 fine-tune steps. Quality: 1,000 and 600.
- swa-seeds: the merging-swa card at the quality budget with the seeds its power asks for (SWA_SEEDS): the base,
  the text fine-tune and SWA's tail of each seed, and the merge step's `swa` and `final-iterate` items only.
- The held-out domain `stdlib-gui` is read by no run.
- The merge step (step.py): one microbenchmark item per merge or reference, one row per seed.
- `aggregation-tune` and `aggregation`: merging as DiLoCo's aggregation against DiLoCo (aggregation_plan.py).

Every model file lies under checkpoints/merging/PRESET/ (the plan's runs write and read them there, relative to
the directory `reproduce` runs in).
"""

from __future__ import annotations

from reproductions.merging import aggregation_plan
from suite.config import RunConfig
from suite.evals.model_file import trajectory_path
from suite.plan.micro import Microbench
from suite.plan.plans import Plan
from suite.run.optim import cosine_factor

TASKS = ("text", "net", "concurrency")
OOD = "gui"
SEEDS = (0, 1, 2)
CONTROL_SEEDS = (1, 2, 3)  # other initialisations of the base, one per fine-tune seed
STEP_TOKENS = 8 * 128  # one process x micro-batch 8 x sequence 128
# preset -> (pretraining steps, fine-tune steps); the gpu preset takes the smoke budget
BUDGETS = {"smoke": (200, 80), "quality": (1000, 600), "gpu": (200, 80), "swa-seeds": (1000, 600)}
SWA_PRESET = "swa-seeds"
# the quality run's three seeds left SWA - final iterate at +0.004, 95% interval [-0.016, +0.024] against the
# non-inferiority margin 0.01: about 15 seeds per arm decide it at 80% power at that spread (suite.judge.verdicts)
SWA_SEEDS = tuple(range(15))
TAIL = 4  # SWA's tail replaces the last 1/TAIL of the text fine-tune
TAIL_SAVES = 5  # the tail saves its model TAIL_SAVES times, evenly; SWA averages them all
TAIL_SEED = 100  # the tail's data order: seed + TAIL_SEED
FT_LR = 1e-3  # the fine-tunes' peak learning rate
# the merge step's evaluation windows per split (8 x 128 bytes each); quality's are more, to separate merges whose
# losses differ by hundredths
EVAL_BATCHES = {"smoke": 4, "quality": 8, "gpu": 4, "swa-seeds": 8}
MERGE_S = {"smoke": 86, "quality": 154, "gpu": 86, "swa-seeds": 46}  # the merge step's wall seconds on 2 cores


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


def swa_path(preset: str, seed: int) -> str:
    return f"{_folder(preset)}/swa-{TASKS[0]}-s{seed}.pt"


def _tail_start(preset: str) -> int:
    steps = BUDGETS[preset][1]
    return steps - steps // TAIL


def _finetune(preset: str, task: str, seed: int) -> RunConfig:
    steps = BUDGETS[preset][1]
    cfg = RunConfig(
        method="ddp",
        seed=seed,
        data=f"stdlib-{task}",
        init_from=base_path(preset),
        checkpoint=finetune_path(preset, task, seed),
        tokens=steps * STEP_TOKENS,
        lr=FT_LR,
        warmup_steps=steps // 10,
        lr_decay="cosine",
        **_common(preset),
    )
    if task == TASKS[0]:
        cfg.save_every = _tail_start(preset)
    return cfg


def _swa_tail(preset: str, seed: int) -> RunConfig:
    """SWA's constant-rate tail of the text fine-tune of `seed` (module docstring), read off that run's config."""
    decaying = _finetune(preset, TASKS[0], seed)
    start, total = decaying.save_every, BUDGETS[preset][1]
    steps = total - start
    return RunConfig(
        method="ddp",
        seed=seed + TAIL_SEED,
        data=decaying.data,
        init_from=str(trajectory_path(decaying.checkpoint, start)),
        checkpoint=swa_path(preset, seed),
        tokens=steps * STEP_TOKENS,
        lr=decaying.lr * cosine_factor(start / total, decaying.min_lr_ratio),
        save_every=steps // TAIL_SAVES,
        **_common(preset),
    )


def _trajectory(preset: str, seed: int) -> list[str]:
    """The saves of SWA's tail (smoke: its steps 4, 8, ..., 20)."""
    steps = BUDGETS[preset][1] - _tail_start(preset)
    every = steps // TAIL_SAVES
    return [str(trajectory_path(swa_path(preset, seed), s)) for s in range(every, steps + 1, every)]


def _seeds(preset: str) -> tuple[int, ...]:
    return SWA_SEEDS if preset == SWA_PRESET else SEEDS


def _trained(preset: str) -> tuple[str, ...]:
    """The tasks the preset fine-tunes on (every merge is scored on all of TASKS)."""
    return TASKS[:1] if preset == SWA_PRESET else TASKS


def _controls(preset: str) -> tuple[int, ...]:
    return () if preset == SWA_PRESET else CONTROL_SEEDS


def _row(preset: str, merge: str, index: int) -> dict:
    seed = _seeds(preset)[index]
    row = {
        "merge": merge,
        "seed": seed,
        "base": base_path(preset),
        "models": [finetune_path(preset, t, seed) for t in _trained(preset)],
        "tasks": list(TASKS),
        "ood": OOD,
        "eval": {"n_batches": EVAL_BATCHES[preset], "batch": 8, "seq_len": 128},
    }
    if merge == "swa":
        row["trajectory"] = _trajectory(preset, seed)
    if merge.startswith("init-"):
        row["control"] = base_path(preset, CONTROL_SEEDS[index])
    return row


def merge_items(preset: str) -> list[Microbench]:
    from reproductions.merging.step import MERGES, OWN_TASK

    device = _common(preset)["device"]
    return [
        Microbench(
            name,
            "reproductions.merging.step:merge_item",
            shapes=[_row(preset, name, i) for i in range(len(_seeds(preset)))],
            device=device,
            warmup=0,
            repeat=1,
        )
        for name in (OWN_TASK if preset == SWA_PRESET else MERGES)
    ]


def _steps(preset: str) -> int:
    pretrain, finetune = BUDGETS[preset]
    seeds = len(_seeds(preset))
    tails = (finetune - _tail_start(preset)) * seeds
    return pretrain * (1 + len(_controls(preset))) + finetune * len(_trained(preset)) * seeds + tails


def _minutes(preset: str) -> int:
    """Estimated (not measured) from the phases of results/merging-smoke, -quality and -swa-seeds on 2 cores: 0.135 s
    a timed step, 0.17 s an evaluation (one every 20 steps), and the merge step's rows (MERGE_S, measured)."""
    steps = _steps(preset)
    return round((0.135 * steps + 0.17 * steps / 20 + MERGE_S[preset]) / 60)


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
    runs = [_pretrain(preset, s) for s in (0, *_controls(preset))]
    runs += [_finetune(preset, t, s) for s in _seeds(preset) for t in _trained(preset)]
    runs += [_swa_tail(preset, s) for s in _seeds(preset)]
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
