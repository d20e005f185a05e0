"""The two memories of the paper's IO model: whole tensors in "HBM", tiles in an on-chip "SRAM" of M elements.

Every element that crosses between them is counted (reads: HBM to SRAM; writes: SRAM to HBM, initialisation
included). No maintained library instruments attention at this level (Nsight Compute counts a real GPU's DRAM
bytes, which this CPU machine does not have), so the counter is written here; it is a few lines.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class Hbm:
    """Named whole tensors; `load` and `store` move row ranges and count the elements moved."""

    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    reads: int = 0
    writes: int = 0

    def init(self, name: str, value: torch.Tensor) -> None:
        """Allocate and fill a tensor in HBM (the algorithms' "initialize ... in HBM": counted as writes)."""
        self.tensors[name] = value.clone()
        self.writes += value.numel()

    def put(self, name: str, value: torch.Tensor) -> None:
        """An input already in HBM before the algorithm starts (not counted)."""
        self.tensors[name] = value

    def load(self, name: str, rows: slice | None = None) -> torch.Tensor:
        part = self.tensors[name] if rows is None else self.tensors[name][rows]
        self.reads += part.numel()
        return part.clone()

    def store(self, name: str, value: torch.Tensor, rows: slice | None = None) -> None:
        if rows is None:
            self.tensors[name] = value.clone()
        else:
            self.tensors[name][rows] = value
        self.writes += value.numel()

    @property
    def moved(self) -> int:
        return self.reads + self.writes


@dataclass
class Sram:
    """The peak number of elements resident on chip at once, as the algorithm's steps report them."""

    peak: int = 0

    def resident(self, *tiles: torch.Tensor) -> None:
        self.peak = max(self.peak, sum(t.numel() for t in tiles))
