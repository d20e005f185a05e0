"""SDP's claim metric against its own design (registered with suite.judge.metrics.metric).

What N-SDP masks in LLaMA is not known from the paper (docs/sources.md#sdp): here only MLP neurons, so the state ratio
against DDP is not C but whatever the masks hold. A run's record says what that is (parallel.sdp: the shared
parameters and each component's), so the card judges the measured ratio over the ratio the masks predict.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from suite.judge.metrics import Samples, metric, ratio
from suite.judge.sides import BY_SETTING, SETTING_KEYS, Pairing, Sides

# ratio's pairing with the global batch in place of the per-replica micro-batch
BY_GLOBAL_BATCH = Pairing(
    "by seed and setting, the global batch in place of the micro-batch",
    tuple(k for k in SETTING_KEYS if k != "micro_batch"),
)


def design_state(path: str) -> float:
    """The state the run's masks predict, as a fraction of the whole model's: the largest worker's shared plus
    held component parameters over all parameters (NaN for a record without SDP masks)."""
    sdp = json.loads(Path(path).read_text(encoding="utf-8"))["parallel"].get("sdp") or {}
    if not sdp.get("held"):
        return float("nan")
    shared, blocks = sdp["shared_params"], sdp["block_params"]
    largest = max(sum(blocks[j] for j in held) for held in sdp["held"])
    return (shared + largest) / (shared + sum(blocks))


@metric("state-vs-design", fields=("state_bytes_max",), ratio=True, pairs=BY_SETTING)
def state_vs_design(df: pd.DataFrame, field: str, sides: Sides) -> Samples:
    """`field` of the method over the baseline's (paired as `ratio` pairs them), over the design's prediction
    for the method's run: 1 where the meter sees what the masks hold."""
    mine = sides.mine.rows(df)
    paths = mine["path"].map(lambda p: design_state(p) if isinstance(p, str) else np.nan)
    scaled = df.assign(**{field: df[field].astype(float)})
    scaled.loc[mine.index, field] = mine[field].astype(float) / paths.astype(float)
    return ratio(scaled, field, sides)


def global_batch_setting(setting: str, tokens: float, steps: float) -> str:
    """A run's setting with its per-replica micro-batch replaced by its global batch in tokens per step."""
    words = [w for w in str(setting).split() if not w.startswith("micro_batch=")]
    per_step = tokens / steps if steps else float("nan")
    return " ".join([*words, f"global_batch_tokens={per_step:g}"])


@metric("ratio-global-batch", ratio=True, pairs=BY_GLOBAL_BATCH)
def ratio_global_batch(df: pd.DataFrame, field: str, sides: Sides) -> Samples:
    """`ratio`, paired by seed and the settings but the micro-batch, which is the global batch instead: B-SDP
    against tensor or pipeline parallelism at one world size. Those methods have one data replica, so each of
    their ranks reads the whole global batch (micro_batch 16 on 2 ranks) where each SDP worker reads its half
    (micro_batch 8): the same global batch and tokens, two micro-batches, which `ratio` would never pair."""
    if df.empty:
        return ratio(df, field, sides)
    settings = [global_batch_setting(s, t, n) for s, t, n in zip(df["setting"], df["tokens"], df["steps"])]
    return ratio(df.assign(setting=settings), field, sides)
