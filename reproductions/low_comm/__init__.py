"""The survey's low-communication row: Streaming DiLoCo beside DiLoCo and DDP (README.md here)."""

from reproductions.low_comm.plan import PRESETS, plan
from reproductions.low_comm.streaming import StreamingDiLoCo
from suite.extensions import Reproduction

REPRODUCTION = Reproduction(methods=(StreamingDiLoCo,), plan=plan, presets=PRESETS)

__all__ = ["REPRODUCTION", "StreamingDiLoCo"]
