"""The survey's matrix-optimizer row beside Dion: layer-wise Muon, NorMuon, Dion2, Dion3 and SOAP, bytes and step cost.

README.md here gives the cards, what each is measured on and what is not testable on this machine. The optimizers
are declared where they were written and checked against their authors' code (reproductions/dion for NorMuon, Dion2,
Dion3 and SOAP; baselines/muon.py for layer-wise Muon); this folder adds only the plan and the claims that compare
them, which name the optimizers as every run does (`--optimizer soap`).
"""

from pathlib import Path

from reproductions.matrix_optimizers.plan import PRESETS, plan
from suite.extensions import Reproduction

REPRODUCTION = Reproduction(plan=plan, presets=PRESETS, claims=Path(__file__).with_name("claims.yaml"))
