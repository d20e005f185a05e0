"""What of a record's memory two identical runs share exactly.

FSDP2 on gloo: gloo's worker thread wakes the caller of a finished collective before it drops its own reference
to the collective's tensors, so whether a block's reduce-scatter buffer is still alive at a later op of the step
depends on thread timing. The peak moves by up to about one block's sharded gradient between identical runs, and
with it the moment the split is read, so any part (gradients, activations, temporaries) may differ
(suite/meters/memory.py gives the measurement); the state at the optimizer step, bytes, calls and FLOPs stay exact.
"""

from __future__ import annotations

from suite.meters.memory import CATEGORIES

AT_PEAK = (*CATEGORIES, "peak_bytes")


def fsdp_tracked(rec: dict) -> bool:
    """Whether the record's memory was read by FSDPMemTracker (the root is an FSDP2 module)."""
    return rec["memory"]["method"].startswith("FSDPMemTracker")


def exact_memory(rec: dict, keys: tuple[str, ...]) -> list[dict]:
    """Each rank's `keys` that identical runs share exactly: under FSDP2, not the split at the peak."""
    kept = [k for k in keys if not (fsdp_tracked(rec) and k in AT_PEAK)]
    return [{k: row[k] for k in kept} | {"rank": row["rank"]} for row in rec["memory"]["per_rank"]]


def peaks_agree(a: dict, b: dict) -> bool:
    """The peaks of two identical runs are equal, or under FSDP2 within one block's sharded gradient."""
    bound = a["memory"]["per_rank"][0]["state_grads"] / a["model"]["config"]["n_layers"] if fsdp_tracked(a) else 0
    pairs = zip(a["memory"]["per_rank"], b["memory"]["per_rank"], strict=True)
    return all(abs(x["peak_bytes"] - y["peak_bytes"]) <= bound for x, y in pairs)
