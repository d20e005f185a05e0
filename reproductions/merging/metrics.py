"""The claim metric over the merge step's records (registered with suite.metrics.metric).

The merge step writes one microbenchmark record per merge or reference (step.py), one row per seed; a claim
compares a field of one item's rows with the same field of another's, seed by seed, as a quality metric does with
runs. The plateau a loss comparison needs is read from the training runs the merges were made of: the fine-tunes
(the runs started from another model, `init_from`) of the seeds compared.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from suite.metrics import Samples, metric


def _rows(df: pd.DataFrame, item: str) -> tuple[dict[int, float], pd.DataFrame]:
    """The newest record of merge-step item `item`: its rows by seed (shape and scores flattened), and its
    summary row."""
    found = df[(df["method"] == item) & df["path"].notna()]
    if found.empty:
        return {}, found
    newest = found.sort_values("run_id").iloc[[-1]]
    record = json.loads(Path(newest["path"].iloc[0]).read_text(encoding="utf-8"))
    rows = {
        r["shape"]["seed"]: {**r["extra"], "time_s_median": r["time_s_median"], "base": r["shape"]["base"]}
        for r in record["micro"]["rows"]
    }
    return rows, newest


def _finetunes(df: pd.DataFrame, seeds: list[int], bases: set[str]) -> pd.DataFrame:
    """The training runs of these seeds started from one of `bases` (the merges' ingredients: a folder holding two
    presets' runs holds fine-tunes of two bases, and only the merged ones show the plateau)."""
    started = df["arm_config"].map(lambda c: json.loads(c).get("init_from") in bases).astype(bool)
    return df[started & df["seed"].isin(seeds) & df["provenance"].eq("measured")]


@metric("micro-merge", fields=None, quality=True)  # the merge step's scores (step.py), which no summary row has
def micro_merge(df: pd.DataFrame, method: str, baseline: str, field: str) -> Samples:
    """`field` of item `method`'s rows and of item `baseline`'s rows, over the seeds both have (unpaired, as the
    quality tests compare them); the baseline's runs are the fine-tunes of those seeds (for the plateau)."""
    mine, mine_used = _rows(df, method)
    theirs, theirs_used = _rows(df, baseline)
    seeds = sorted(s for s in mine.keys() & theirs.keys() if field in mine[s] and field in theirs[s])
    values = np.array([mine[s][field] for s in seeds], dtype=float)
    base = np.array([theirs[s][field] for s in seeds], dtype=float)
    used = pd.concat([mine_used, theirs_used]) if seeds else mine_used.iloc[:0]
    settings = ("merge step",) * len(seeds)  # the seeds of one setting
    runs = _finetunes(df, seeds, {mine[s]["base"] for s in seeds})
    # without the fine-tunes' records no plateau can be shown: the item's own rows have no validation curve
    return Samples(values, used, settings, base, runs if not runs.empty else theirs_used)
