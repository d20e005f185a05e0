"""A test-only method that dies after its second step (registered through SUITE_METHOD_MODULES)."""

from baselines.ddp import DDP
from suite.strategy import register


@register
class FailingDDP(DDP):
    name = "test-fail"

    def after_step(self, model, step, ctx) -> None:
        if step == 1:
            raise RuntimeError("injected failure at step 2")
