"""The IO meter: every scaled_dot_product_attention call of a metered step, and the HBM accesses that the
instrumented algorithms (count.py, checked equal to execute.py in the tests) need for it, standard and tiled.

It watches the step with a TorchFunctionMode (the call itself, before any backend or decomposition), so it
sees the shapes the model really used: batch, heads, query and key length, head dimension, causal mask. The
counts are for forward + backward at SRAM size `A100_M`, the paper's A100, in elements and in bytes at 2 bytes
per element (fp16/bf16 tensors in HBM). They are counts of the paper's model of the algorithms, not a
measurement of this machine's memory traffic; the record says so.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from reproductions.flash_io.count import A100_M, count_io
from suite.config import RunConfig
from suite.meters.base import Meter
from suite.meters.schedule import flop_steps

BYTES_PER_ELEMENT = 2
SECTION = "attention_io"


class _Calls(TorchFunctionMode):
    def __init__(self, calls: list[dict]) -> None:
        super().__init__()
        self.calls = calls

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention:
            q, k = args[0], args[1] if len(args) > 1 else kwargs["key"]
            causal = bool(kwargs.get("is_causal", args[5] if len(args) > 5 else False))
            self.calls.append(_counted(q.shape, k.shape, causal))
        return func(*args, **kwargs)


def _counted(q_shape: tuple, k_shape: tuple, causal: bool) -> dict:
    *lead, n, d = q_shape
    heads = 1
    for size in lead:
        heads *= size
    call: dict[str, Any] = {"batch_heads": heads, "n": n, "n_kv": k_shape[-2], "d": d, "causal": causal}
    if k_shape[-2] != n:
        call["uncounted"] = "count_io covers self-attention only (N_q = N_kv)"
        return call
    # Theorem 2 covers d <= M <= N d: a short sequence whose N d is below the A100's SRAM is counted at M = N d
    call["sram_elements"] = m = max(d, min(A100_M, n * d))
    for algorithm in ("standard", "tiled"):
        call[f"{algorithm}_elements"] = heads * count_io(n, d, m, algorithm=algorithm, causal=causal)
    return call


class AttentionIoMeter(Meter):
    """Counts the attention of the FLOP step (every micro-batch's forward; backward included in the counts)."""

    name = SECTION

    @classmethod
    def applies(cls, cfg: RunConfig) -> bool:
        return cfg.method in ("sdpa-math", "sdpa-flash")

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.calls: list[dict] = []

    def steps(self) -> range:
        return flop_steps(self.ctx.cfg)

    def wrap(self, step: int) -> AbstractContextManager:
        return _Calls(self.calls)

    def local(self) -> list[dict] | None:
        return self.calls if self.steps() else None

    @classmethod
    def section(cls, per_rank: dict[int, Any], record: dict, weight: dict[int, int]) -> None:
        calls = per_rank.get(min(per_rank)) if per_rank else None
        if calls is None:
            return
        totals = {
            f"{a}_bytes": sum(c.get(f"{a}_elements", 0) for c in calls) * BYTES_PER_ELEMENT
            for a in ("standard", "tiled")
        }
        record[SECTION] = {
            "method": "counted by the instrumented algorithms' closed form (count.py) for each SDPA call of one "
            "training step, forward + backward; not measured on this machine",
            "sram_elements": A100_M,
            "sram_note": "each call's sram_elements: A100_M, or N d where that is smaller (Theorem 2's range)",
            "bytes_per_element": BYTES_PER_ELEMENT,
            "rank": min(per_rank),
            "calls": calls,
            **totals,
            "ratio_standard_to_tiled": totals["standard_bytes"] / totals["tiled_bytes"]
            if totals["tiled_bytes"]
            else None,
        }
