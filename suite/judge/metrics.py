"""Metrics: how the summary rows of a claim's records (suite/judge/verdicts.py claim_frame) become samples.

A metric turns rows into one value per seed and setting: `ratio` (method / baseline, paired), `value` (one arm)
and `quality` (both arms, unpaired); a reproduction registers its own with @metric. Each side of a comparison
is an arm (docs/architecture.md), read from the card once as `Sides` (suite/judge/sides.py), and a metric of arms
declares how it pairs them (`pairs`); a side that matches two arms at one setting is an error naming both.
claims.py checks a claim's metric and its arguments against this registry when the claims load (a card whose
sides can never pair is refused there); verdicts.py judges the samples.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from suite.arms import differences
from suite.errors import ClaimsError
from suite.judge.sides import BY_SETTING, MINE, ONE_SIDE, UNPAIRED, Pairing, Sides
from suite.records import SUMMARY_FIELDS


@dataclass(frozen=True)
class Samples:
    """One value per seed and setting for the claim's arm, and for quality metrics the baseline's."""

    values: np.ndarray
    rows: pd.DataFrame
    settings: tuple[str, ...] = ()  # the setting of each value
    baseline: np.ndarray | None = None
    baseline_rows: pd.DataFrame | None = None  # the baseline side's runs (the plateau reads them)
    note: str = ""  # what the verdict's reason adds (e.g. how many seeds reached a target, suite/judge/targets.py)
    # where no seed of the method gave a value because each ended short of it (suite/judge/targets.py: no seed reached
    # the target), each seed's lower bound of the value it would give: the least of them bounds the mean from below
    floors: np.ndarray | None = None


METRICS: dict[str, Callable[..., Samples]] = {}


# the fields a metric's rows carry: a claim's `field` must name one (or `evals.NAME`), checked when it is loaded
FRAME_FIELDS = (*SUMMARY_FIELDS, "evidence", "device_name", "inter_node", "setting", "val_change_last_fifth")


def metric(
    name: str,
    fields: tuple[str, ...] | None = FRAME_FIELDS,
    ratio: bool = False,
    diverged: bool = False,
    quality: bool = False,
    pairs: Pairing | None = None,
) -> Callable:
    """Register a metric; `fields` are the record fields its claims may name (None: any, the metric checks);
    `ratio`: its values are method / baseline (the report draws them on the ratio axis); `diverged`: it reads
    diverged runs beside complete ones (a diverged seed never reaches a target, and saying so is a result);
    `quality`: it gives both sides' seeds (Samples.baseline) for a quality claim's test, and only quality claims
    take it; `pairs`: a metric of arms (called with the rows, the field and the card's `Sides`) and how it pairs
    its sides' runs; None: a metric of its own arguments (a microbenchmark's items), called with them."""

    def register(fn: Callable[..., Samples]) -> Callable[..., Samples]:
        METRICS[name] = fn
        METRIC_FIELDS[name] = fields
        if pairs is not None:
            PAIRINGS[name] = pairs
        if ratio:
            RATIOS.add(name)
        if diverged:
            READS_DIVERGED.add(name)
        if quality:
            QUALITY.add(name)
        return fn

    return register


METRIC_FIELDS: dict[str, tuple[str, ...] | None] = {}
PAIRINGS: dict[str, Pairing] = {}
RATIOS: set[str] = set()
READS_DIVERGED: set[str] = set()
QUALITY: set[str] = set()


def apply_metric(name: str, df: pd.DataFrame, args: Mapping[str, Any]) -> Samples:
    """Metric `name` over the rows `df` with a card's arguments: a metric of arms gets the field and the card's
    Sides, a metric of its own arguments gets them."""
    if name in PAIRINGS:
        return METRICS[name](df, args["field"], Sides.of(args))
    return METRICS[name](df, **args)


def side(rows: pd.DataFrame, metric_spec: Mapping[str, Any], baseline: bool = False) -> pd.DataFrame:
    """The runs that one side of a claim's metric names: the method's side, or with `baseline` the baseline's."""
    sides = Sides.of(metric_spec)
    return (sides.theirs if baseline else sides.mine).rows(rows)


def one_arm(rows: pd.DataFrame, side: str) -> None:
    """A side that matches two arms at one setting would pool their runs as seeds: a ClaimsError naming both."""
    for setting, group in rows.groupby("setting"):
        keys = list(dict.fromkeys(group["arm"]))
        if len(keys) > 1:
            first, second = (json.loads(group[group["arm"] == k]["arm_config"].iloc[0]) for k in keys[:2])
            labels = [group[group["arm"] == k]["arm_label"].iloc[0] for k in keys[:2]]
            raise ClaimsError(
                f"{side} matches {len(keys)} arms at {setting}: {labels[0]!r} and {labels[1]!r}, which differ in "
                f"{'; '.join(differences(first, second))}; name the side fully in claims.yaml (metric "
                f"{', '.join(MINE.values())})"
            )


def both_sides(df: pd.DataFrame, sides: Sides) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The method's runs and the baseline's among `df`, each side checked to be one arm at each setting."""
    mine, theirs = sides.mine.rows(df), sides.theirs.rows(df)
    one_arm(mine, "the method's side"), one_arm(theirs, "the baseline's side")
    return mine, theirs


def _per_seed(rows: pd.DataFrame, field_name: str) -> pd.Series:
    """One value per (seed, setting); repeated runs of one seed are averaged so no seed counts twice."""
    empty = pd.Series(dtype=float, index=pd.MultiIndex.from_arrays([[], []], names=["seed", "setting"]))
    if field_name not in rows.columns:
        if field_name.startswith("evals."):
            return empty
        raise ClaimsError(f"metric field {field_name!r} is not a summary field; use one of {sorted(rows.columns)}")
    if rows.empty:
        return empty
    values = pd.to_numeric(rows[field_name], errors="coerce")
    values = values[np.isfinite(values.to_numpy(dtype=float))]
    return values.groupby([rows["seed"], rows["setting"]]).mean().dropna()


def _settings(series: pd.Series) -> tuple[str, ...]:
    return tuple(setting for _, setting in series.index)


@metric("ratio", ratio=True, pairs=BY_SETTING)
def ratio(df: pd.DataFrame, field: str, sides: Sides) -> Samples:
    """method / baseline of `field`, paired by seed and setting (a seed fixes initialisation and data order)."""
    mine, theirs = both_sides(df, sides)
    a, b = _per_seed(mine, field), _per_seed(theirs, field)
    keys = a.index.intersection(b.index)
    ratios = a[keys] / b[keys]
    ratios = ratios[np.isfinite(ratios.to_numpy(dtype=float))]  # e.g. wall time 0 in an estimate
    both = pd.concat([mine, theirs])
    used = both[pd.MultiIndex.from_arrays([both["seed"], both["setting"]]).isin(ratios.index)]
    return Samples(
        ratios.to_numpy(dtype=float), used, _settings(ratios), b[ratios.index].to_numpy(float), _used(theirs, ratios)
    )


def _used(rows: pd.DataFrame, samples: pd.Series) -> pd.DataFrame:
    """The runs behind `samples` (indexed by seed and setting)."""
    return rows[pd.MultiIndex.from_arrays([rows["seed"], rows["setting"]]).isin(samples.index)]


@metric("value", pairs=ONE_SIDE)
def value(df: pd.DataFrame, field: str, sides: Sides) -> Samples:
    """`field` of one arm, per seed."""
    rows = sides.mine.rows(df)
    one_arm(rows, "the claim's side")
    a = _per_seed(rows, field)
    return Samples(a.to_numpy(dtype=float), rows, _settings(a))


@metric("quality", quality=True, pairs=UNPAIRED)
def quality(df: pd.DataFrame, field: str, sides: Sides) -> Samples:
    """`field` of the method's seeds and of the baseline's seeds, unpaired (compared by Welch's tests)."""
    mine, theirs = both_sides(df, sides)
    a, b = _per_seed(mine, field), _per_seed(theirs, field)
    return Samples(
        a.to_numpy(dtype=float), pd.concat([mine, theirs]), _settings(a), b.to_numpy(dtype=float), _used(theirs, b)
    )
