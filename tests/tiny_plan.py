"""A test-only reproduction with a tiny plan, for the plan resume, leak and SLURM tests.

Presets: `smoke` (a DDP run, a run of the flaky method, a microbenchmark item), `slurm` (one run and the
item), `slow` (one run of the flaky method sleeping after each step, to be interrupted mid-run), `killed`
(8 DDP steps whose worker 1 is killed at step 5, checkpoints under $TEST_CHECKPOINT_DIR). The flaky
method is DDP that sleeps `sleep_s` after each step and dies after its second step while the environment
variable FLAKY_FAIL is set, so one plan can have a run fail once and pass on the next attempt.
"""

from __future__ import annotations

import os
import time
from typing import ClassVar

import torch
from torch import nn

from baselines.ddp import DDP
from suite.config import RunConfig
from suite.extensions import Reproduction
from suite.params import Param
from suite.plan.micro import Microbench
from suite.plan.plans import Plan
from suite.run.strategy import Context

FAIL_ENV = "FLAKY_FAIL"
# 2 ranks x 2 sequences x 32 tokens = 128 tokens a step
TINY = {"model": "llama-tiny", "nproc": 2, "micro_batch": 2, "seq_len": 32, "eval_every": 100, "eval_batches": 1}


class FlakyDDP(DDP):
    name = "test-flaky"
    baseline = False
    params: ClassVar[dict] = {"sleep_s": Param(float, 0.0, "seconds to sleep in each step", low=0)}

    def after_step(self, model: nn.Module, step: int, ctx: Context) -> None:
        time.sleep(self.variant.get("sleep_s", 0.0))
        if step == 1 and os.environ.get(FAIL_ENV):
            raise RuntimeError(f"injected failure at step 2 ({FAIL_ENV} is set)")


def matmul(device: torch.device, n: int):
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    return lambda: a @ b


def _run(method: str, steps: int, **variant) -> RunConfig:
    return RunConfig(method=method, tokens=128 * steps, log_every=1, reproduction="test-plan", variant=variant, **TINY)


def _killed() -> RunConfig:
    cfg = _run("ddp", 8)
    cfg.kill_rank, cfg.fault_step = 1, 5
    cfg.checkpoint_dir = os.environ.get("TEST_CHECKPOINT_DIR", "checkpoints")
    return cfg


PRESETS = {
    "smoke": lambda: [_run("ddp", 5), _run("test-flaky", 5)],
    "slurm": lambda: [_run("ddp", 5)],
    "slow": lambda: [_run("test-flaky", 200, sleep_s=0.2)],
    "killed": lambda: [_killed()],
}


def plan(preset: str) -> Plan:
    item = Microbench("matmul", "tests.tiny_plan:matmul", [{"n": 16}], repeat=2)
    runs = PRESETS[preset]()
    micro = [item] if preset in ("smoke", "slurm") else []
    return Plan(preset, runs, protocol="equal tokens", micro=micro)


REPRODUCTION = Reproduction(
    "test-plan",
    "a tiny plan for the resume, leak and SLURM tests",
    methods=(FlakyDDP,),
    plan=plan,
    presets=tuple(PRESETS),
)
