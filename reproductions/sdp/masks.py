"""Which worker holds which component: SDP's structured masks, and the properties they must have.

A mask assigns each of K workers a set of n = round(C * L) of the L maskable components (residual blocks
for B-SDP, neuron groups for N-SDP). Worker i holds the n cyclically consecutive components starting at
ceil(i * L / K). Evenly spaced starts give what the method needs with no search:
- balance: every worker holds exactly n components, and holder counts differ by at most one
  (the starts form a balanced sequence, so any window of n positions contains floor or ceil of n*K/L);
- coverage: every component has a holder whenever K * n >= L;
- connectivity of the worker-component graph whenever it is possible at all: a connected bipartite
  graph on K + L nodes needs K + L - 1 edges, so K * n >= K + L - 1, and with evenly spread overlaps
  at most one pair of neighbouring windows is then disjoint.

The averaging operator is the worker-to-worker random walk W = N^-1 M D^-1 M^T (go to a held component,
then to one of its holders, both uniformly), with M the K x L mask, N the held counts and D the holder
counts. W is similar to a positive semi-definite matrix, so its eigenvalues are real in [0, 1]; the
spectral gap 1 - lambda_2 is 1 when every worker holds everything and 0 when the graph is disconnected.
Parts every worker holds (embeddings, head, final norm) are left out of M: they are averaged over all
workers and would only raise the gap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np


@dataclass(frozen=True)
class Mask:
    """K workers by L components; `held[i]` are the components worker i holds, in increasing order."""

    held: tuple[tuple[int, ...], ...]
    components: int
    coverage: float  # the C asked for; `effective_coverage` is n / L

    @property
    def workers(self) -> int:
        return len(self.held)

    @property
    def effective_coverage(self) -> float:
        return len(self.held[0]) / self.components

    def matrix(self) -> np.ndarray:
        m = np.zeros((self.workers, self.components), dtype=bool)
        for i, held in enumerate(self.held):
            m[i, list(held)] = True
        return m

    @cached_property
    def holders(self) -> tuple[tuple[int, ...], ...]:
        """holders[j]: the workers that hold component j, in increasing order."""
        return tuple(tuple(int(i) for i in np.flatnonzero(col)) for col in self.matrix().T)

    def holder_counts(self) -> list[int]:
        return [len(h) for h in self.holders]

    def holder_sets(self) -> list[tuple[int, ...]]:
        """The distinct holder sets, in one order every rank computes alike (size, then ranks)."""
        return sorted(set(self.holders), key=lambda s: (len(s), s))

    def is_connected(self) -> bool:
        """Whether the bipartite worker-component graph is connected (breadth-first search)."""
        seen, frontier = {0}, [0]
        while frontier:
            worker = frontier.pop()
            for j in self.held[worker]:
                for other in self.holders[j]:
                    if other not in seen:
                        seen.add(other)
                        frontier.append(other)
        return len(seen) == self.workers

    def spectral_gap(self) -> float:
        """1 - second largest eigenvalue of the averaging operator W (module docstring)."""
        if self.workers == 1:
            return 1.0
        m = self.matrix().astype(np.float64)
        held = m.sum(axis=1)
        holders = m.sum(axis=0)
        scaled = m / np.sqrt(held)[:, None] / np.sqrt(holders)[None, :]
        eigenvalues = np.linalg.eigvalsh(scaled @ scaled.T)
        return float(max(0.0, 1.0 - eigenvalues[-2]))

    def describe(self) -> dict:
        """What the run record keeps about the mask."""
        counts = self.holder_counts()
        return {
            "K": self.workers,
            "components": self.components,
            "C": self.coverage,
            "effective_C": self.effective_coverage,
            "held": [list(h) for h in self.held],
            "holder_counts": counts,
            "connected": self.is_connected(),
            "spectral_gap": self.spectral_gap(),
        }


def held_count(components: int, coverage: float) -> int:
    """n = round(C * L), halves rounded up (C = 0.69 of 16 blocks is 11)."""
    return math.floor(coverage * components + 0.5 + 1e-9)


def assign(components: int, workers: int, coverage: float) -> Mask:
    """The balanced cyclic mask of `workers` workers each holding a fraction `coverage` of `components`."""
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise ValueError(
            f"K (the number of SDP workers) must be a positive integer, got {workers!r}; run with --nproc K"
        )
    if not isinstance(components, int) or components < 1:
        raise ValueError(f"the model has {components!r} maskable components; SDP needs at least one block")
    if not isinstance(coverage, (int, float)) or isinstance(coverage, bool) or not 0 < coverage <= 1:
        raise ValueError(
            f"C must be in (0, 1] (the fraction of blocks each worker holds), got {coverage!r}; pass e.g. --set C=0.5"
        )
    n = held_count(components, coverage)
    if n < 1:
        raise ValueError(
            f"C={coverage:g} gives each worker no block of {components}; use --set C={1 / components:.3g} or more"
        )
    if workers * n < components:
        needed = math.ceil(components / workers)
        raise ValueError(
            f"C={coverage:g} with K={workers} workers leaves blocks without a holder "
            f"(K x round(C x L) = {workers} x {n} < L = {components}); use --set "
            f"C={needed / components:.3g} or more, or more workers"
        )
    starts = [-(-i * components // workers) for i in range(workers)]  # ceil(i L / K), exactly
    held = tuple(tuple(sorted((s + k) % components for k in range(n))) for s in starts)
    return Mask(held, components, float(coverage))
