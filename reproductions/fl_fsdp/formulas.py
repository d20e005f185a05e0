"""Bytes per rank per step by tier, from the ring model of CLAIMS.md section 2 (derived, to be checked).

b bytes per element, P parameters, N ranks; groups of G = R x S ranks (S shard, R replicas), K = N / G
groups, aggregation every F steps. FSDP moves 3bP(N-1)/N per step (all-gather forward and backward,
reduce-scatter); HSDP all-reduces its shard over the replicas; FL methods all-reduce their shard across
groups once per F steps. The model counts every parameter as re-gathered in backward, so it slightly
overstates FSDP2, which keeps the root (embeddings, head) gathered between forward and backward.
"""

from __future__ import annotations

from reproductions.fl_fsdp.mesh import INTER, INTRA


def _gather_scatter(b: int, p: int, n: int) -> float:
    return 3 * b * p * (n - 1) / n


def _all_reduce(b: int, p: int, shard: int, n: int) -> float:
    return 2 * (b * p / shard) * (n - 1) / n


def ring_bytes(method: str, p: int, b: int, n: int, g: int | None = None, s: int | None = None, f: int = 1) -> dict:
    """{intra-group, inter-group} wire bytes per rank per step for `method` (fsdp, hsdp, fl-fsdp, fl-hsdp).

    hsdp: S = s, R = n / s; fl-fsdp: groups of g; fl-hsdp: groups of g sharded over s.
    """
    if method == "fsdp":
        return {INTRA: 0.0, INTER: _gather_scatter(b, p, n)}
    if method == "hsdp":
        return {INTRA: _gather_scatter(b, p, s), INTER: _all_reduce(b, p, s, n // s)}
    if method not in ("fl-fsdp", "fl-hsdp"):
        raise ValueError(f"no ring formula for {method!r}; one of fsdp, hsdp, fl-fsdp, fl-hsdp")
    k = n // g
    if method == "fl-fsdp":
        return {INTRA: _gather_scatter(b, p, g), INTER: _all_reduce(b, p, g, k) / f}
    return {INTRA: _gather_scatter(b, p, s) + _all_reduce(b, p, s, g // s), INTER: _all_reduce(b, p, s, k) / f}
