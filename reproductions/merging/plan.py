"""Presets: one pretrained llama-tiny, K fine-tunes of it on K library areas, and the merge step.

- Pretraining: llama-tiny on `stdlib-rest` (the standard library's files in none of the task areas), 200 steps
  of 8 x 128 byte tokens, warm-up 20 steps then cosine; the negative control's models are the same recipe from
  other initialisations (seeds 1-3).
- Fine-tunes: from the base (`--set init_from`), one per task area (`stdlib-text`, `stdlib-net`,
  `stdlib-concurrency`) and seed (0-2: the data order; the start is the base), 80 steps at a constant 1e-3 after
  8 warm-up steps (SWA's averaging wants a constant rate), the same schedule and budget for every task. The first
  task's fine-tune also saves its model every 20 steps: SWA averages the checkpoints of its second half.
- The held-out domain `stdlib-gui` is read by no run.
- The merge step (step.py): one microbenchmark item per merge or reference, one row per seed.

Every model file lies under checkpoints/merging/PRESET/ (the plan's runs write and read them there, relative to
the directory `reproduce` runs in).
"""

from __future__ import annotations

from suite.config import RunConfig
from suite.evals.checkpoint import trajectory_path
from suite.micro import Microbench
from suite.plans import Plan

TASKS = ("text", "net", "concurrency")
OOD = "gui"
SEEDS = (0, 1, 2)
CONTROL_SEEDS = (1, 2, 3)  # other initialisations of the base, one per fine-tune seed
STEP_TOKENS = 8 * 128  # one process x micro-batch 8 x sequence 128
PRETRAIN = dict(tokens=200 * STEP_TOKENS, lr=3e-3, warmup_steps=20, lr_decay="cosine", data="stdlib-rest")
FINETUNE = dict(tokens=80 * STEP_TOKENS, lr=1e-3, warmup_steps=8)
SAVE_EVERY = 20
SWA_FROM = 40  # the trajectory's checkpoints SWA averages: steps 40, 60 and 80
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
    return RunConfig(method="ddp", seed=seed, checkpoint=base_path(preset, seed), **_common(preset), **PRETRAIN)


def _finetune(preset: str, task: str, seed: int) -> RunConfig:
    cfg = RunConfig(
        method="ddp",
        seed=seed,
        data=f"stdlib-{task}",
        init_from=base_path(preset),
        checkpoint=finetune_path(preset, task, seed),
        **_common(preset),
        **FINETUNE,
    )
    if task == TASKS[0]:
        cfg.save_every = SAVE_EVERY
    return cfg


def _trajectory(preset: str, seed: int) -> list[str]:
    steps = range(SWA_FROM, FINETUNE["tokens"] // STEP_TOKENS + 1, SAVE_EVERY)
    return [str(trajectory_path(finetune_path(preset, TASKS[0], seed), s)) for s in steps]


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


def plan(preset: str) -> Plan:
    runs = [_pretrain(preset, s) for s in (0, *CONTROL_SEEDS)]
    runs += [_finetune(preset, t, s) for s in SEEDS for t in TASKS]
    return Plan(
        preset,
        runs,
        protocol="equal tokens",
        notes=[
            f"model files under {_folder(preset)}/; the merge step reads the fine-tunes the runs wrote there",
            "estimated wall time on 2 quiet cores (smoke): 1,520 training steps of llama-tiny at about 0.2 s "
            "(dion's smoke records) and the merge step's evaluations: about 10 minutes",
        ],
        micro=merge_items(preset),
    )
