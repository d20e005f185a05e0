"""A test-only reproduction: DDP with a period of 4 steps whose last step averages (here: sleeps) and, with
`outer=true`, takes an outer Nesterov step on the pseudo-gradient (DiLoCo's shape), so the meters' period
handling and the outer optimizer's state can be checked in real runs (SUITE_REPRODUCTIONS=tests.period_method).
"""

from __future__ import annotations

import time
from typing import ClassVar

import torch
from torch import nn

from baselines.ddp import DDP
from suite.extensions import Reproduction
from suite.params import Param
from suite.run.strategy import Context

PERIOD = 4


class PeriodicDDP(DDP):
    name = "test-periodic"
    baseline = False
    comm_period = PERIOD
    params: ClassVar[dict] = {"sleep_s": Param(float, None, "seconds", low=0), "outer": Param(bool, False)}

    def build(self, make_model, ctx: Context) -> nn.Module:
        model = super().build(make_model, ctx)
        self.outer = None
        if self.variant.get("outer"):
            self.anchor = [p.detach().clone() for p in model.parameters()]
            self.outer = torch.optim.SGD(self.anchor, lr=0.7, momentum=0.9, nesterov=True)
        return model

    def optimizers(self) -> list[torch.optim.Optimizer]:
        return [self.outer] if self.outer is not None else []

    @torch.no_grad()
    def after_step(self, model: nn.Module, step: int, ctx: Context) -> None:
        if step % PERIOD != PERIOD - 1:
            return
        time.sleep(self.variant.get("sleep_s", 0.0))
        if self.outer is not None:
            for anchor, p in zip(self.anchor, model.parameters()):
                anchor.grad = anchor - p
            self.outer.step()
            for anchor, p in zip(self.anchor, model.parameters()):
                p.copy_(anchor)


REPRODUCTION = Reproduction("test-periodic", "DDP with a 4-step period", methods=(PeriodicDDP,))
