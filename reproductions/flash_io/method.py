"""DDP with one scaled_dot_product_attention backend forced for the model's forward: "sdpa-math" (standard
attention, S and P materialised) and "sdpa-flash" (the fused, tiled kernel). The model is untouched; the
backend is chosen from outside, in the strategy's forward context, as the strategy interface intends.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, ExitStack

from torch.nn.attention import SDPBackend, sdpa_kernel

from baselines.ddp import DDP
from suite.run.strategy import Context


class _ForcedBackend(DDP):
    backend: SDPBackend

    def autocast(self, ctx: Context) -> AbstractContextManager:
        stack = ExitStack()
        stack.enter_context(super().autocast(ctx))
        stack.enter_context(sdpa_kernel(self.backend))
        return stack

    def describe(self, ctx: Context) -> dict:
        return {**super().describe(ctx), "strategy": self.name}


class SdpaMath(_ForcedBackend):
    name = "sdpa-math"
    baseline = True
    backend = SDPBackend.MATH


class SdpaFlash(_ForcedBackend):
    name = "sdpa-flash"
    baseline = False
    backend = SDPBackend.FLASH_ATTENTION


METHODS = (SdpaMath, SdpaFlash)
