"""A test-only method: DDP that sleeps after every optimizer step, so the throughput gate has a slow-down to find.

Workers see it when SUITE_REPRODUCTIONS=tests.slow_method is in their environment (suite.extensions
imports the modules listed there); nothing outside the tests imports it.
"""

from __future__ import annotations

import time
from typing import ClassVar

from torch import nn

from baselines.ddp import DDP
from suite.extensions import Reproduction
from suite.params import Param
from suite.run.strategy import Context


class SlowDDP(DDP):
    name = "ddp-slow"
    baseline = False
    params: ClassVar[dict] = {"sleep_s": Param(float, 0.0, "seconds to sleep after each step", low=0)}

    def after_step(self, model: nn.Module, step: int, ctx: Context) -> None:
        # inside the step clock, as a slower method's own work would be
        time.sleep(self.variant.get("sleep_s", 0.0))


REPRODUCTION = Reproduction("test-slow", "DDP that sleeps after every optimizer step", methods=(SlowDDP,))
