"""Dion (arXiv 2504.05295, microsoft/dion) against Muon and AdamW: optimizer-step time, bytes and loss.

README.md here describes the method, the plan and what is not testable on this machine.
"""

from pathlib import Path

from reproductions.dion.dion import Dion
from reproductions.dion.plan import PRESETS, plan
from reproductions.dion.spec import DION
from suite.extensions import Reproduction
from suite.plan.pairs import Config, Pair

__all__ = ["REPRODUCTION", "Dion"]  # the optimizer class, importable as reproductions.dion.Dion

_ADAMW = Config("ddp")

REPRODUCTION = Reproduction(
    optimizers=(DION,),
    plan=plan,
    presets=PRESETS,
    claims=Path(__file__).with_name("claims.yaml"),
    # whole-step tokens/s of llama-tiny at 2 ranks with the matrix optimizer swapped; new pairs, no reference yet
    pairs=(
        Pair("dion/adamw", Config("ddp", sets=(("optimizer", "dion"), ("rank_fraction", 0.25))), _ADAMW, 0.15),
        Pair("muon/adamw", Config("ddp", sets=(("optimizer", "muon"),)), _ADAMW, 0.15),
    ),
)
