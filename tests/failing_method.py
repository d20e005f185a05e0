"""A test-only reproduction whose method dies after its second step (loaded through SUITE_REPRODUCTIONS)."""

from baselines.ddp import DDP
from suite.extensions import Reproduction


class FailingDDP(DDP):
    name = "test-fail"

    def after_step(self, model, step, ctx) -> None:
        if step == 1:
            raise RuntimeError("injected failure at step 2")


REPRODUCTION = Reproduction("test-fail", "a method that dies after its second step", methods=(FailingDDP,))
