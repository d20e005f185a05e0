"""Dion (arXiv 2504.05295, microsoft/dion) against Muon and AdamW: optimizer-step time, bytes and loss.

README.md here describes the method, the plan and what is not testable on this machine.
"""

from pathlib import Path

from reproductions.dion.spec import DION
from suite.extensions import Reproduction

REPRODUCTION = Reproduction(
    name="dion",
    description="Dion against Muon and AdamW: optimizer-step time and bytes by rank and world size, loss at equal "
    "tokens",
    optimizers=(DION,),
    claims=Path(__file__).with_name("claims.yaml"),
)
