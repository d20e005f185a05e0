"""The survey's low-communication row: Streaming DiLoCo beside DiLoCo and DDP (README.md here)."""

from reproductions.low_comm.streaming import StreamingDiLoCo
from suite.extensions import Reproduction

REPRODUCTION = Reproduction(methods=(StreamingDiLoCo,), presets=())

__all__ = ["REPRODUCTION", "StreamingDiLoCo"]
