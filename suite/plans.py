"""A reproduction's plan: the runs of a preset, the protocol they share, and where its claims live.

Each reproduction declares `plan(preset: str) -> Plan` (suite.extensions). Runs are launched for real;
estimates are paper-scale configurations stepped on fake tensors (suite/estimate),
each optionally projected onto network topologies (suite/sim), so claims at a scale this machine cannot
run get numbers labelled `estimated` and `simulated`, never mixed with measurements.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from suite.config import RunConfig
from suite.extensions import get_reproduction
from suite.micro import Microbench

# Every plan has these; a plan may add named presets of its own (longer CPU work, e.g. sdp's `quality`).
PRESETS = ("smoke", "gpu", "paper")


@dataclass
class Estimate:
    """One configuration to estimate, on nodes of `gpus_per_node`, and the topologies to project it onto.

    A projection's compute time is the busiest rank's FLOPs / (the topology's peak x `mfu`): an assumption
    the simulated record states.
    """

    cfg: RunConfig
    gpus_per_node: int = 8
    topologies: tuple[str, ...] = ()
    mfu: float = 0.4


@dataclass
class Plan:
    name: str
    preset: str
    runs: list[RunConfig]
    protocol: str
    claims: Path | None = None
    notes: list[str] = field(default_factory=list)
    estimates: list[Estimate] = field(default_factory=list)
    micro: list[Microbench] = field(default_factory=list)  # microbenchmark items (suite/micro.py)


def load_plan(name: str, preset: str) -> Plan:
    """The plan of reproduction `name` at `preset`; ValueError (one line) for an unknown name or preset."""
    rep = get_reproduction(name)
    if rep.plan is None:
        raise ValueError(f"reproduction {name!r} declares no plan")
    try:
        plan = rep.plan(preset)
    except KeyError:
        known = ", ".join(PRESETS)
        raise ValueError(f"reproduction {name!r} has no preset {preset!r}; every plan has {known}") from None
    if plan.claims is None:
        plan.claims = rep.claims
    return plan
