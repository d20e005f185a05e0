"""A reproduction's plan: the runs of a preset, the protocol they share, and where its claims live.

Each reproduction package provides `plan(preset: str) -> Plan` in `reproductions/<name>/plan.py`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path

from suite.config import RunConfig

PRESETS = ("smoke", "gpu", "paper")
REPRODUCTIONS = ("baselines", "sdp")


@dataclass
class Plan:
    name: str
    preset: str
    runs: list[RunConfig]
    protocol: str
    claims: Path | None = None
    notes: list[str] = field(default_factory=list)


def package_of(name: str) -> str:
    return name.replace("-", "_")


def load_plan(name: str, preset: str) -> Plan:
    if name not in REPRODUCTIONS:
        raise ValueError(f"unknown reproduction {name!r}; choose one of: {', '.join(REPRODUCTIONS)}")
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose one of: {', '.join(PRESETS)}")
    module = importlib.import_module(f"reproductions.{package_of(name)}.plan")
    return module.plan(preset)
