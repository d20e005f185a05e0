"""The claim metric over the merge step's records (registered with suite.judge.metrics.metric).

The merge step writes one microbenchmark record per merge or reference (step.py), one row per seed; a claim
compares a field of one item's rows with the same field of another's, seed by seed, as a quality metric does with
runs. The plateau a loss comparison needs is read from the training runs the merges were made of: the fine-tunes
(the runs started from another model, `init_from`) of the seeds compared.

Presets share item names (smoke's `ties` is quality's `ties`), so an item's records are keyed by the preset they
belong to: the folder of the models their rows merged (plan.py: checkpoints/merging/PRESET/). A card reads both
items from one preset, never one side from each: its own, the preset its `command` names (`--preset`), where the
records hold both items of it; else the one preset that has both, said in the verdict's reason. Several presets
and none of them the card's, or two records of one item in the preset read, are a ClaimsError naming them, never a
pick of the newest.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

from reproductions.merging.plan import base_path
from suite.errors import ClaimsError
from suite.judge.metrics import Samples, metric

_PRESET = re.compile(r"--preset[= ](\S+)")


Found = dict[str, list[tuple[dict, pd.DataFrame]]]  # a folder of models -> the records that merged them, with rows


def _folder(preset: str) -> str:
    """The folder of a preset's models (plan.py), the key of its merge step's records."""
    return Path(base_path(preset)).parent.as_posix()


def _preset_name(folder: str) -> str:
    """A key as the preset it is (checkpoints/merging/PRESET), or the folder itself where it is no preset's."""
    return Path(folder).name if Path(folder).parent == Path(_folder("x")).parent else folder


def _by_preset(df: pd.DataFrame, item: str) -> Found:
    """Every record of merge-step item `item` with its summary row, by the folder of the models its rows merged
    (every row of an item merges one preset's models: plan.py `_row`)."""
    found = df[(df["method"] == item) & df["path"].notna()]
    out: Found = {}
    for i in range(len(found)):
        summary = found.iloc[[i]]
        record = json.loads(Path(summary["path"].iloc[0]).read_text(encoding="utf-8"))
        rows = (record.get("micro") or {}).get("rows") or []
        if rows:
            out.setdefault(Path(rows[0]["shape"]["base"]).parent.as_posix(), []).append((record, summary))
    return out


def _card_preset(method: str, baseline: str, field: str) -> str | None:
    """The preset named (`--preset`) by the command of this reproduction's card that compares `field` of `method`
    with `baseline`; None where no card, or cards naming different presets, make the comparison (a test's)."""
    from suite.judge.claims import claims_for  # at call time: suite.judge.claims reads the registry this module fills

    named = {
        found.group(1)
        for c in claims_for("merging")
        if c.metric.get("name") == "micro-merge"
        and (c.metric.get("method"), c.metric.get("baseline"), c.metric.get("field")) == (method, baseline, field)
        and (found := _PRESET.search(c.command or ""))
    }
    return named.pop() if len(named) == 1 else None


def _preset(mine: Found, theirs: Found, method: str, baseline: str, field: str) -> tuple[str | None, str]:
    """The folder whose records of both items the card reads (module docstring), and what the verdict's reason adds."""
    both = sorted(mine.keys() & theirs.keys())
    own = _card_preset(method, baseline, field)
    if own is not None and _folder(own) in both:
        return _folder(own), ""
    if not both:
        return None, ""
    if len(both) == 1:
        other = f"; the merge step of preset {_preset_name(both[0])} (the records hold none of the card's own, {own})"
        return both[0], other if own is not None else ""
    names = ", ".join(_preset_name(f) for f in both)
    raise ClaimsError(
        f"merge-step items {method!r} and {baseline!r} have records of {len(both)} presets ({names}) and none of the "
        f"card's own ({own or 'no card names one'}): a card reads one preset's merge step; judge one preset's folder "
        "or one with the card's own"
    )


def _rows(found: Found, item: str, folder: str | None, none: pd.DataFrame) -> tuple[dict[int, dict], pd.DataFrame]:
    """The record of merge-step item `item` whose rows merged the models in `folder`: its rows by seed (shape and
    scores flattened), and its summary row (`none` where it has none); two such records are a ClaimsError."""
    records = found.get(folder, []) if folder is not None else []
    if not records:
        return {}, none
    if len(records) > 1:
        ids = ", ".join(sorted(r["run_id"] for r, _ in records))
        raise ClaimsError(
            f"merge-step item {item!r} of preset {_preset_name(folder)} has {len(records)} records ({ids}): a "
            "preset's item is one record; move all but one out of the folders judged"
        )
    record, summary = records[0]
    rows = {
        r["shape"]["seed"]: {**r["extra"], "time_s_median": r["time_s_median"], "base": r["shape"]["base"]}
        for r in record["micro"]["rows"]
    }
    return rows, summary


def _finetunes(df: pd.DataFrame, seeds: list[int], bases: set[str]) -> pd.DataFrame:
    """The training runs of these seeds started from one of `bases` (the merges' ingredients: a folder holding two
    presets' runs holds fine-tunes of two bases, and only the merged ones show the plateau)."""
    started = df["arm_config"].map(lambda c: json.loads(c).get("init_from") in bases).astype(bool)
    return df[started & df["seed"].isin(seeds) & df["provenance"].eq("measured")]


@metric("micro-merge", fields=None, quality=True)  # the merge step's scores (step.py), which no summary row has
def micro_merge(df: pd.DataFrame, method: str, baseline: str, field: str) -> Samples:
    """`field` of item `method`'s rows and of item `baseline`'s rows, over the seeds both have (unpaired, as the
    quality tests compare them); the baseline's runs are the fine-tunes of those seeds (for the plateau)."""
    mine_found, theirs_found = _by_preset(df, method), _by_preset(df, baseline)
    folder, note = _preset(mine_found, theirs_found, method, baseline, field)
    mine, mine_used = _rows(mine_found, method, folder, df.iloc[:0])
    theirs, theirs_used = _rows(theirs_found, baseline, folder, df.iloc[:0])
    seeds = sorted(s for s in mine.keys() & theirs.keys() if field in mine[s] and field in theirs[s])
    values = np.array([mine[s][field] for s in seeds], dtype=float)
    base = np.array([theirs[s][field] for s in seeds], dtype=float)
    used = pd.concat([mine_used, theirs_used]) if seeds else mine_used.iloc[:0]
    settings = ("merge step",) * len(seeds)  # the seeds of one setting
    runs = _finetunes(df, seeds, {mine[s]["base"] for s in seeds})
    # without the fine-tunes' records no plateau can be shown: the item's own rows have no validation curve
    return Samples(values, used, settings, base, runs if not runs.empty else theirs_used, note=note)
