"""Alpha-beta cost of one collective: latency alpha per message step, 1/bandwidth per byte.

`payload` is the ledger's logical payload of one call (all-reduce: the tensor; all-gather: the
gathered output; reduce-scatter: the unreduced input; broadcast: the tensor). Formulas are the
classic ones (Thakur, Rabenseifner and Gropp, "Optimization of collective communication operations
in MPICH", 2005; NCCL's ring and tree), for n ranks:

  ring  all-reduce                2(n-1) a + 2(n-1)/n S/B
  ring  all-gather/reduce-scatter  (n-1) a +  (n-1)/n S/B
  ring  broadcast (pipelined)      (n-1) a +          S/B
  tree  all-reduce               2 log2(n) a +       2 S/B   (reduce then broadcast, pipelined)
  tree  all-gather/reduce-scatter  log2(n) a +  (n-1)/n S/B   (recursive doubling / halving)
  tree  broadcast                  log2(n) a +          S/B   (binomial tree, pipelined)
  all-to-all (pairwise)            (n-1) a +  (n-1)/n S/B
  send / recv                            a +            S/B

Written here because no maintained library prices a ledger of collectives on a given network.
"""

from __future__ import annotations

import math

ALGORITHMS = ("ring", "tree", "auto")
_GATHER_LIKE = frozenset({"all_gather", "reduce_scatter", "gather", "scatter"})


def coefficients(op: str, algorithm: str, n: int) -> tuple[float, float]:
    """(a, b) such that one call costs a * latency + b * payload / bandwidth."""
    if algorithm not in ("ring", "tree"):
        raise ValueError(f"algorithm must be ring or tree, got {algorithm!r}")
    if n <= 1:
        return 0.0, 0.0
    log_n = math.ceil(math.log2(n))
    if op in ("send", "recv"):
        return 1.0, 1.0
    if op == "all_to_all":
        return n - 1.0, (n - 1) / n
    if op in ("all_reduce", "reduce"):
        return (2.0 * (n - 1), 2.0 * (n - 1) / n) if algorithm == "ring" else (2.0 * log_n, 2.0)
    if op in _GATHER_LIKE:
        return (n - 1.0 if algorithm == "ring" else float(log_n)), (n - 1) / n
    if op == "broadcast":
        return (n - 1.0 if algorithm == "ring" else float(log_n)), 1.0
    raise ValueError(f"no cost formula for collective {op!r}")


def cost(
    op: str, payload: float, n: int, bandwidth: float, latency: float, algorithm: str = "ring", calls: int = 1
) -> float:
    """Seconds for `calls` calls moving `payload` bytes in total; `auto` takes the faster algorithm."""
    if algorithm == "auto":
        return min(cost(op, payload, n, bandwidth, latency, a, calls) for a in ("ring", "tree"))
    a, b = coefficients(op, algorithm, n)
    return calls * a * latency + b * payload / bandwidth
