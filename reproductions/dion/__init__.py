"""Dion (arXiv 2504.05295, microsoft/dion) against Muon and AdamW: optimizer-step time, bytes and loss.

README.md here describes the method, the plan and what is not testable on this machine. The rest of the survey's
matrix-optimizer row is declared here as optimizers too, each checked against its authors' code: Dion's successors
from the same reference, NorMuon, Dion2 and Dion3 (NorDion2), and SOAP (`--optimizer normuon`, `dion2`, `dion3`,
`soap`); reproductions/matrix_optimizers compares them.
"""

from pathlib import Path

from reproductions.dion.dion import Dion
from reproductions.dion.dion2 import DION2, Dion2
from reproductions.dion.dion3 import DION3, Dion3
from reproductions.dion.normuon import NORMUON, NorMuon
from reproductions.dion.plan import PRESETS, plan
from reproductions.dion.soap import SOAP, SOAP_SPEC
from reproductions.dion.spec import DION
from suite.extensions import Reproduction
from suite.plan.pairs import Config, Pair

__all__ = ["REPRODUCTION", "SOAP", "Dion", "Dion2", "Dion3", "NorMuon"]  # the optimizer classes, importable from here

_ADAMW = Config("ddp")

REPRODUCTION = Reproduction(
    optimizers=(DION, NORMUON, DION2, DION3, SOAP_SPEC),
    plan=plan,
    presets=PRESETS,
    claims=Path(__file__).with_name("claims.yaml"),
    # whole-step tokens/s of llama-tiny at 2 ranks with the matrix optimizer swapped; new pairs, no reference yet
    pairs=(
        Pair("dion/adamw", Config("ddp", sets=(("optimizer", "dion"), ("rank_fraction", 0.25))), _ADAMW, 0.15),
        Pair("muon/adamw", Config("ddp", sets=(("optimizer", "muon"),)), _ADAMW, 0.15),
    ),
)
