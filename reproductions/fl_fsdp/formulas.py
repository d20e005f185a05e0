"""Bytes per rank per step by tier, by a ring model (derived, to be checked; docs/sources.md#fl-fsdp sets it out).

b bytes per element, P parameters, N ranks; groups of G = R x S ranks (S shard, R replicas), K = N / G
groups, aggregation every F steps. FSDP moves 3bP(N-1)/N per step (all-gather forward and backward,
reduce-scatter); HSDP all-reduces its shard over the replicas; FL methods all-reduce their shard across
groups once per F steps. The model counts every parameter as re-gathered in backward, so it slightly
overstates FSDP2, which keeps the root (embeddings, head) gathered between forward and backward.
"""

from __future__ import annotations

from reproductions.fl_fsdp.mesh import INTER, INTRA


def ring_bytes(
    method: str,
    p: int,
    b: int,
    n: int,
    g: int | None = None,
    s: int | None = None,
    f: int = 1,
    b_reduce: int | None = None,
    b_param: int | None = None,
) -> dict:
    """{intra-group, inter-group} wire bytes per rank per step for `method` (fsdp, hsdp, fl-fsdp, fl-hsdp).

    hsdp: S = s, R = n / s; fl-fsdp: groups of g; fl-hsdp: groups of g sharded over s. `b` is the gathered
    parameters' bytes per element; `b_reduce` the gradients' in reductions, `b_param` the stored parameters'
    (what the averaging moves): both `b` unless given (FSDP2's bf16 policy gathers 2 and reduces 4 bytes).
    Gradient clipping's norm all-reduce (4 bytes a parameter tensor a step, on the shard group) is left out.
    """
    br, bp = b_reduce or b, b_param or b

    def gather_scatter(n: int) -> float:
        return (2 * b + br) * p * (n - 1) / n

    def all_reduce(bytes_per: int, shard: int, n: int) -> float:
        return 2 * (bytes_per * p / shard) * (n - 1) / n

    if method == "fsdp":
        return {INTRA: 0.0, INTER: gather_scatter(n)}
    if method == "hsdp":
        return {INTRA: gather_scatter(s), INTER: all_reduce(br, s, n // s)}
    if method not in ("fl-fsdp", "fl-hsdp"):
        raise ValueError(f"no ring formula for {method!r}; one of fsdp, hsdp, fl-fsdp, fl-hsdp")
    k = n // g
    if method == "fl-fsdp":
        return {INTRA: gather_scatter(g), INTER: all_reduce(bp, g, k) / f}
    return {INTRA: gather_scatter(s) + all_reduce(br, s, g // s), INTER: all_reduce(bp, s, k) / f}
