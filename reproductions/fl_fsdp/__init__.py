"""FL+FSDP and FL+HSDP (arXiv 2609.20359) against FSDP and HSDP, with DiLoCo and Local SGD beside them.

Throughput, bytes per tier, memory and perplexity at equal tokens (README.md here).
"""

from pathlib import Path

from reproductions.fl_fsdp.method import FLHSDP, DiLoCo, Federated, LocalSGD
from reproductions.fl_fsdp.plan import PRESETS, plan
from reproductions.fl_fsdp.sgd import SGD
from suite.extensions import Reproduction
from suite.plan.pairs import Config, Pair


def _method(name: str) -> Config:
    return Config(name, nproc=4, sets=(("F", 4),), steps=16)


def _baseline(name: str) -> Config:
    return Config(name, nproc=4, steps=16)


REPRODUCTION = Reproduction(
    methods=(Federated, FLHSDP, DiLoCo, LocalSGD),
    optimizers=(SGD,),
    plan=plan,
    presets=tuple(PRESETS),
    claims=Path(__file__).with_name("claims.yaml"),
    # 4 ranks: 2 groups of 2 against one mesh of 4 (fsdp) or 2 x 2 (hsdp); F = 4 and 16 steps, so the
    # timed steps (after the meters' steps 0-5) hold two whole periods
    pairs=(
        Pair("fl-fsdp/fsdp", _method("fl-fsdp"), _baseline("fsdp")),
        Pair("fl-hsdp/hsdp", _method("fl-hsdp"), _baseline("hsdp")),
    ),
)
