"""Metrics: how the summary rows of a claim's records (suite/judge/verdicts.py claim_frame) become samples.

A metric turns rows into one value per seed and setting: `ratio` (method / baseline, paired), `value` (one arm)
and `quality` (both arms, unpaired); a reproduction registers its own with @metric. Each side of a comparison
is an arm (docs/architecture.md), named by its method, optimizer, variant (method and optimizer parameters) and any
other arm field; a side that matches two arms at one setting is an error naming both. claims.py checks a
claim's metric and its arguments against this registry when the claims load; verdicts.py judges the samples.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from suite.arms import differences
from suite.errors import ClaimsError
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
# what names one side of a comparison (docs/architecture.md): with `model`, a claim's metric names each side by these
SIDE = ("method", "optimizer", "variant", "arm")


def metric(
    name: str,
    fields: tuple[str, ...] | None = FRAME_FIELDS,
    ratio: bool = False,
    diverged: bool = False,
    quality: bool = False,
) -> Callable:
    """Register a metric; `fields` are the record fields its claims may name (None: any, the metric checks);
    `ratio`: its values are method / baseline (the report draws them on the ratio axis); `diverged`: it reads
    diverged runs beside complete ones (a diverged seed never reaches a target, and saying so is a result);
    `quality`: it gives both sides' seeds (Samples.baseline) for a quality claim's test, and only quality claims
    take it."""

    def register(fn: Callable[..., Samples]) -> Callable[..., Samples]:
        METRICS[name] = fn
        METRIC_FIELDS[name] = fields
        if ratio:
            RATIOS.add(name)
        if diverged:
            READS_DIVERGED.add(name)
        if quality:
            QUALITY.add(name)
        return fn

    return register


METRIC_FIELDS: dict[str, tuple[str, ...] | None] = {}
RATIOS: set[str] = set()
READS_DIVERGED: set[str] = set()
QUALITY: set[str] = set()


def _arm(
    df: pd.DataFrame,
    method: str,
    variant: dict | None,
    model: str | list[str] | None,
    optimizer: str | None = None,
    arm: dict | None = None,
) -> pd.DataFrame:
    """The runs of one side of a claim: its method, optimizer, method or optimizer parameters (`variant`) and any
    other arm fields (`arm`, e.g. {world_size: 2, lr: 0.001}); `model` is one model or the list of scales a card
    applies to. Within one setting (a calibration sweep's point) the side must be one arm: see one_arm."""
    rows = df[df["method"] == method]
    if model is not None:
        rows = rows[rows["model"].isin([model] if isinstance(model, str) else model)]
    wanted = {**(arm or {}), **({"optimizer": optimizer} if optimizer else {})}
    if variant:
        rows = rows[rows["variant"].map(lambda v: _matches(v, variant)).astype(bool)]
    if wanted:
        rows = rows[rows["arm_config"].map(lambda c: _matches(c, wanted)).astype(bool)]
    return rows


def side(rows: pd.DataFrame, metric_spec: dict, baseline: bool = False) -> pd.DataFrame:
    """The runs that one side of a claim's metric names: the method's side, or with `baseline` the baseline's
    (baseline, baseline_variant, baseline_optimizer, baseline_arm)."""
    prefix = "baseline_" if baseline else ""
    method = metric_spec["baseline" if baseline else "method"]
    return _arm(
        rows,
        method,
        metric_spec.get(f"{prefix}variant"),
        metric_spec.get("model"),
        metric_spec.get(f"{prefix}optimizer"),
        metric_spec.get(f"{prefix}arm"),
    )


def _matches(text: str, wanted: dict) -> bool:
    given = json.loads(text)
    return all(given.get(k) == v for k, v in wanted.items())


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
                f"{', '.join(SIDE)})"
            )


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


@metric("ratio", ratio=True)
def ratio(
    df: pd.DataFrame,
    field: str,
    method: str,
    baseline: str,
    variant: dict | None = None,
    baseline_variant: dict | None = None,
    model: str | list[str] | None = None,
    optimizer: str | None = None,
    baseline_optimizer: str | None = None,
    arm: dict | None = None,
    baseline_arm: dict | None = None,
) -> Samples:
    """method / baseline of `field`, paired by seed and setting (a seed fixes initialisation and data order)."""
    mine = _arm(df, method, variant, model, optimizer, arm)
    theirs = _arm(df, baseline, baseline_variant, model, baseline_optimizer, baseline_arm)
    one_arm(mine, "the method's side"), one_arm(theirs, "the baseline's side")
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


@metric("value")
def value(
    df: pd.DataFrame,
    field: str,
    method: str,
    variant: dict | None = None,
    model: str | list[str] | None = None,
    optimizer: str | None = None,
    arm: dict | None = None,
) -> Samples:
    """`field` of one arm, per seed."""
    rows = _arm(df, method, variant, model, optimizer, arm)
    one_arm(rows, "the claim's side")
    a = _per_seed(rows, field)
    return Samples(a.to_numpy(dtype=float), rows, _settings(a))


@metric("quality", quality=True)
def quality(
    df: pd.DataFrame,
    field: str,
    method: str,
    baseline: str,
    variant: dict | None = None,
    baseline_variant: dict | None = None,
    model: str | list[str] | None = None,
    optimizer: str | None = None,
    baseline_optimizer: str | None = None,
    arm: dict | None = None,
    baseline_arm: dict | None = None,
) -> Samples:
    """`field` of the method's seeds and of the baseline's seeds, unpaired (compared by Welch's tests)."""
    mine = _arm(df, method, variant, model, optimizer, arm)
    theirs = _arm(df, baseline, baseline_variant, model, baseline_optimizer, baseline_arm)
    one_arm(mine, "the method's side"), one_arm(theirs, "the baseline's side")
    a, b = _per_seed(mine, field), _per_seed(theirs, field)
    return Samples(
        a.to_numpy(dtype=float), pd.concat([mine, theirs]), _settings(a), b.to_numpy(dtype=float), _used(theirs, b)
    )
