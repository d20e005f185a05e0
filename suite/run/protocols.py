"""Budgets and stopping: equal tokens, equal FLOPs, equal time, equal target (docs/architecture.md, Protocols).

Tokens and FLOPs are summed over all workers; time is training wall-clock (evaluation off the clock);
a target run stops at the first evaluation whose validation loss is at or below the target, or at its
token cap, in which case it is recorded as not reached.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

KINDS = ("tokens", "flops", "time", "target")


@dataclass(frozen=True)
class Progress:
    step: int
    tokens: int
    flops: float
    wall_s: float
    val_loss: float | None


@dataclass(frozen=True)
class Protocol:
    kind: str
    budget: float
    target: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown protocol {self.kind!r}; use one of --tokens, --flops, --time, --target")
        if not (self.budget and 0 < self.budget < math.inf):  # nan and inf too: a run that never stops
            flag = "--max-tokens" if self.kind == "target" else f"--{self.kind}"
            raise ValueError(f"the budget must be positive and finite; give {flag} a value above 0")
        if self.kind == "target" and self.target is None:
            raise ValueError("a target run needs a loss: --target LOSS")
        if self.kind == "target" and not math.isfinite(self.target):
            raise ValueError(f"--target {self.target} is no loss a run can reach or pass; give a finite number")

    def done(self, p: Progress) -> bool:
        """Whether training stops after this step."""
        if self.kind == "target":
            return self.reached(p) or p.tokens >= self.budget
        return self._used(p) >= self.budget

    def reached(self, p: Progress) -> bool:
        if self.kind == "target":
            return p.val_loss is not None and p.val_loss <= self.target
        return self._used(p) >= self.budget

    def fraction(self, p: Progress) -> float:
        """How much of the budget is used, for progress display (a target run shows its token cap)."""
        return min(self._used(p) / self.budget, 1.0)

    def _used(self, p: Progress) -> float:
        return {"tokens": p.tokens, "flops": p.flops, "time": p.wall_s, "target": p.tokens}[self.kind]

    def describe(self, p: Progress) -> dict:
        budget = self.budget if self.kind != "target" else None
        return {
            "kind": self.kind,
            "budget": budget,
            "target": self.target,
            "reached": self.reached(p),
            "token_cap": self.budget if self.kind == "target" else None,
        }


def from_args(
    tokens: float | None, flops: float | None, time_s: float | None, target: float | None, max_tokens: float | None
) -> Protocol:
    """The one protocol the command line asked for; exactly one budget must be given."""
    given = {
        k: v for k, v in (("tokens", tokens), ("flops", flops), ("time", time_s), ("target", target)) if v is not None
    }
    if len(given) != 1:
        raise ValueError("give exactly one budget: --tokens N, --flops F, --time SECONDS or --target LOSS")
    ((kind, value),) = given.items()
    if kind == "target":
        return Protocol("target", max_tokens or 0, target=value)
    return Protocol(kind, value)
