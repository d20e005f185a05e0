"""The sides of a comparison, and how a metric pairs the runs of its two sides.

A claim's metric names each side by its method, optimizer, variant (the method's and optimizer's parameters) and
any other arm field (`arm`, e.g. {world_size: 2, micro_batch: 8}), at `model` (docs/architecture.md, Arms). The
card writes them flat (method, optimizer, variant, arm; baseline, baseline_optimizer, baseline_variant,
baseline_arm); `Sides.of` reads them once, so no metric repeats the eleven names.

Each two-sided metric declares how it pairs the runs of its sides (`Pairing`): by seed and the settings that
compared arms share (`ratio`, `to-target`), by seed and those settings but one (sdp's `ratio-global-batch`
replaces the micro-batch by the global batch), or not at all (`quality`: Welch's tests over each side's seeds).
A card whose sides fix a paired setting to two values could never pair one run: claims.py refuses it when
claims.yaml loads, naming the metrics that would pair it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

# Settings two arms must share to be compared (a sweep over them is a calibration, never pooled as seeds).
SETTING_KEYS = ("model", "seq_len", "micro_batch", "grad_accum", "precision")
# a card's names for the method's side, and for the baseline's
MINE = {"method": "method", "optimizer": "optimizer", "variant": "variant", "arm": "arm"}
THEIRS = {"method": "baseline", "optimizer": "baseline_optimizer", "variant": "baseline_variant", "arm": "baseline_arm"}
# the keys of a two-sided metric on a card
SPEC_KEYS = ("field", "model", *MINE.values(), *THEIRS.values())


@dataclass(frozen=True)
class Side:
    """The runs of one arm: its method, optimizer, variant and other arm fields, at `model` (one, or the list of
    scales a card applies to)."""

    method: str
    optimizer: str | None = None
    variant: Mapping[str, Any] | None = None
    arm: Mapping[str, Any] | None = None
    model: str | list[str] | None = None

    def rows(self, df: pd.DataFrame) -> pd.DataFrame:
        """This side's runs among the summary rows `df`."""
        rows = df[df["method"] == self.method]
        if self.model is not None:
            rows = rows[rows["model"].isin([self.model] if isinstance(self.model, str) else self.model)]
        wanted = {**(self.arm or {}), **({"optimizer": self.optimizer} if self.optimizer else {})}
        if self.variant:
            rows = rows[rows["variant"].map(lambda v: _matches(v, self.variant)).astype(bool)]
        if wanted:
            rows = rows[rows["arm_config"].map(lambda c: _matches(c, wanted)).astype(bool)]
        return rows

    def fixes(self) -> dict[str, Any]:
        """The fields this side fixes (its variant's and its arm's)."""
        return {**(self.variant or {}), **(self.arm or {})}

    def label(self, shown: tuple[str, ...] = ()) -> str:
        """The method, the optimizer where named, and the fixed fields `shown` (no parentheses, which the glance
        figure drops as asides)."""
        fixed = self.fixes()
        words = [self.method, self.optimizer or "", *(f"{k}={fixed[k]}" for k in shown if k in fixed)]
        return " ".join(w for w in words if w)


def _matches(text: str, wanted: Mapping[str, Any]) -> bool:
    given = json.loads(text)
    return all(given.get(k) == v for k, v in wanted.items())


@dataclass(frozen=True)
class Sides:
    """The method's side and the baseline's (None for a one-sided metric such as `value`)."""

    mine: Side
    theirs: Side | None = None

    @classmethod
    def of(cls, spec: Mapping[str, Any]) -> Sides:
        """The sides a card's metric names (its flat keys, MINE and THEIRS)."""
        mine = Side(**{k: spec.get(name) for k, name in MINE.items()}, model=spec.get("model"))
        if spec.get("baseline") is None:
            return cls(mine)
        return cls(mine, Side(**{k: spec.get(name) for k, name in THEIRS.items()}, model=spec.get("model")))

    def differing(self) -> tuple[str, ...]:
        """The fields the two sides fix to different values, or that only one side fixes."""
        if self.theirs is None:
            return ()
        a, b = self.mine.fixes(), self.theirs.fixes()
        return tuple(k for k in dict.fromkeys([*a, *b]) if a.get(k) != b.get(k))

    def labels(self) -> str:
        """Both sides as a reader tells them apart: methods, optimizers and every field that sets them apart."""
        shown = self.differing()
        return " and ".join(s.label(shown) for s in (self.mine, self.theirs) if s is not None)


@dataclass(frozen=True)
class Pairing:
    """How a metric pairs its sides' runs: `how` in words, and the settings a paired run shares with its pair
    (besides the seed); no keys: unpaired, or one side."""

    how: str
    keys: tuple[str, ...] = ()
    two_sided: bool = True

    def conflict(self, sides: Sides) -> tuple[str, Any, Any] | None:
        """The first paired setting the two sides fix to different values (then no run can ever pair)."""
        if sides.theirs is None:
            return None
        a, b = sides.mine.fixes(), sides.theirs.fixes()
        return next(((k, a[k], b[k]) for k in self.keys if k in a and k in b and a[k] != b[k]), None)


BY_SETTING = Pairing("by seed and setting", SETTING_KEYS)
UNPAIRED = Pairing("unpaired (each side's seeds)")
ONE_SIDE = Pairing("one side", two_sided=False)
