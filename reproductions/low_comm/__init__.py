"""The survey's low-communication row: Streaming DiLoCo and IsoLoCo beside DiLoCo and DDP (README.md here)."""

from pathlib import Path

from reproductions.low_comm.isoloco import IsoLoCo
from reproductions.low_comm.plan import PRESETS, plan
from reproductions.low_comm.streaming import StreamingDiLoCo
from suite.extensions import Reproduction

REPRODUCTION = Reproduction(
    methods=(StreamingDiLoCo, IsoLoCo), plan=plan, presets=PRESETS, claims=Path(__file__).with_name("claims.yaml")
)

__all__ = ["REPRODUCTION", "IsoLoCo", "StreamingDiLoCo"]
