"""Which way an effect moves along the axis a claim's mechanism depends on (issue 44): a trend finding.

A small-scale finding says little about a claim made at 1B or 128 groups on its own; what it can say is whether
the effect moves toward the paper's claim or away from it as the quantity the mechanism depends on grows (workers,
groups, blocks, width). At each point of the axis the effect is the difference of the method's and the baseline's
means over seeds (oriented so that positive favours the method: the claim's side), with its 95% Welch interval.
The slope is a weighted least-squares line of the effect against log2 of the axis, each point weighted by the
inverse of its variance (the seeds' spread), with a normal 95% interval from those variances. The fit holds when
every point lies within two of its own standard errors of the line; where it does not, the slope's interval widens
by the square root of the reduced chi-square, and no projection is drawn. A projection to the paper's setting along
the line is shown only from 3 points or more and only where the paper's setting lies beyond them, labelled
extrapolated, and is never a verdict.

Written here, not taken from a library: weighted least squares with known variances is a few lines of numpy, and the
words (toward, away, flat) are this suite's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from suite.judge.claims import Claim
from suite.judge.metrics import one_arm
from suite.judge.sides import Side, Sides
from suite.judge.targets import FIELDS, UNITS, seed_costs

ALPHA = 0.05
TOWARD, AWAY, FLAT = "moves toward the paper's claim", "moves away from the paper's claim", "flat within noise"
PROJECTION_POINTS = 3  # fewer points draw no projection: a line through two always fits


@dataclass(frozen=True)
class Point:
    """One place on the axis: its value and each arm's values over seeds (the claim's field)."""

    x: float
    method: Sequence[float]
    baseline: Sequence[float]


@dataclass(frozen=True)
class Effect:
    """The effect at one point, oriented so that positive favours the method, with its 95% Welch interval."""

    x: float
    value: float
    low: float
    high: float
    se: float


@dataclass(frozen=True)
class Projection:
    """The line's value at the paper's setting: extrapolated, never a verdict."""

    x: float
    value: float
    low: float
    high: float
    label: str = "extrapolated"


@dataclass(frozen=True)
class Trend:
    effects: list[Effect]
    intercept: float  # the line's effect where the axis is 1 (log2 of it 0)
    slope: float  # change of the oriented effect per doubling of the axis
    slope_low: float
    slope_high: float
    fit_holds: bool
    word: str
    projection: Projection | None


def effect(point: Point, better: str) -> Effect:
    """The oriented difference of means at `point` (`better`: "lower" or "higher" is better for the claim's field)."""
    from scipy import stats  # on use, as suite/judge/verdicts.py: every worker imports the judge

    a, b = np.asarray(point.method, float), np.asarray(point.baseline, float)
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"the effect at {point.x:g} needs 2 seeds or more per arm, has {len(a)} and {len(b)}")
    sign = -1.0 if better == "lower" else 1.0
    d = sign * float(a.mean() - b.mean())
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    se = math.sqrt(va + vb)
    if se == 0:
        return Effect(point.x, d, d, d, 0.0)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = float(stats.t.ppf(1 - ALPHA / 2, df)) * se
    return Effect(point.x, d, d - half, d + half, se)


def trend(points: Sequence[Point], better: str, paper_x: float | None = None, equivalence: bool = False) -> Trend:
    """The trend finding of `points` (2 or more distinct axis values); `paper_x`: the paper's setting on the axis,
    which gives the direction toward it and the place of a projection (None: not known; toward is up the axis). For
    an equivalence claim ("nearly equal") the paper's side is no difference: the effect moves toward it when the
    line heads for zero, judged from the points' weighted mean (a line that crosses zero inside the points is read
    from their centre)."""
    from scipy import stats

    effects = sorted((effect(p, better) for p in points), key=lambda e: e.x)
    xs = np.log2([e.x for e in effects])
    if len(set(xs)) < 2:
        raise ValueError("a trend needs 2 or more distinct points on the axis")
    y = np.array([e.value for e in effects])
    floor = max((e.se for e in effects if e.se > 0), default=1.0) * 1e-6  # a point with no spread weighs the most
    w = 1.0 / np.square(np.maximum([e.se for e in effects], floor))
    xbar, ybar = float(np.sum(w * xs) / np.sum(w)), float(np.sum(w * y) / np.sum(w))
    sxx = float(np.sum(w * (xs - xbar) ** 2))
    slope = float(np.sum(w * (xs - xbar) * y) / sxx)
    intercept = ybar - slope * xbar
    residuals = y - (intercept + slope * xs)
    holds = bool(np.all(np.abs(residuals) <= 2 / np.sqrt(w)))
    dof = len(xs) - 2
    inflate = 1.0 if holds or dof == 0 else max(1.0, math.sqrt(float(np.sum(w * residuals**2)) / dof))
    z = float(stats.norm.ppf(1 - ALPHA / 2))
    half = z * inflate / math.sqrt(sxx)
    toward = 1.0 if paper_x is None or math.log2(paper_x) >= xbar else -1.0
    if equivalence:  # the claim's side is zero: a negative mean effect rises toward it, a positive one falls
        toward *= -1.0 if ybar > 0 else 1.0
    if slope - half > 0 or slope + half < 0:
        word = TOWARD if slope * toward > 0 else AWAY
    else:
        word = FLAT
    projection = None
    beyond = paper_x is not None and not min(xs) <= math.log2(paper_x) <= max(xs)  # inside, the points say it
    if beyond and holds and len(xs) >= PROJECTION_POINTS:
        px = math.log2(paper_x)
        value = intercept + slope * px
        spread = z * math.sqrt(1 / float(np.sum(w)) + (px - xbar) ** 2 / sxx)
        projection = Projection(paper_x, value, value - spread, value + spread)
    return Trend(effects, intercept, slope, slope - half, slope + half, holds, word, projection)


def _axis_value(axis: str, row: pd.Series) -> float:
    """A summary row's place on `axis` (suite.judge.claims.TREND_AXES)."""
    if axis == "world_size":
        return float(row["world_size"])
    from suite.models import model_config

    return float(model_config(row["model"])["n_layers" if axis == "blocks" else "dim"])


def _lifted(side: Side, axis: str) -> Side:
    """The side with its pin on the axis lifted: every value of the axis, the rest of the arm as the card names it."""
    if axis != "world_size":
        return replace(side, model=None)
    arm = {k: v for k, v in (side.arm or {}).items() if k != "world_size"}
    return replace(side, arm=arm or None)


def _seeds(rows: pd.DataFrame, field: str) -> list[float]:
    values = pd.to_numeric(rows[field], errors="coerce").groupby(rows["seed"]).mean().dropna()
    return [float(v) for v in values if math.isfinite(v)]


def _point(mine: pd.DataFrame, theirs: pd.DataFrame, field: str) -> tuple[list[float], list[float]]:
    """Each side's values by seed at one point: a record's field, or a to-target field's cost to the baseline's
    target at that point (each width or world size has its own baseline loss)."""
    if field in FIELDS:
        return seed_costs(mine, theirs, field)
    return _seeds(mine, field), _seeds(theirs, field)


def trend_of(claim: Claim, rows: pd.DataFrame) -> dict[str, Any] | None:
    """The trend finding of a card with a `trend` axis (suite.judge.claims.TrendAxis) over complete runs `rows`, each
    side under its own protocol, as plain data for the verdict; None for a card without one. Points
    need 2 seeds per side; fewer than 2 points give the reason instead of a finding."""
    spec = claim.trend
    if spec is None:
        return None
    sides = Sides.of(claim.metric)
    field = claim.metric["field"]
    mine, theirs = (_lifted(side, spec.axis).rows(rows) for side in (sides.mine, sides.theirs))
    if claim.protocol:  # each side under its own protocol (a FLOP-matched method against equal-steps baselines)
        mine = mine[mine["protocol"] == claim.protocol]
        theirs = theirs[theirs["protocol"] == (claim.baseline_protocol or claim.protocol)]
    at_mine, at_theirs = ([_axis_value(spec.axis, r) for _, r in side.iterrows()] for side in (mine, theirs))
    points, short = [], []
    for x in sorted(set(at_mine)):
        a, b = mine[[v == x for v in at_mine]], theirs[[v == x for v in at_theirs]]
        one_arm(a, f"the method's side at {spec.axis} {x:g}")
        one_arm(b, f"the baseline's side at {spec.axis} {x:g}")
        method, baseline = _point(a, b, field)
        if len(method) >= 2 and len(baseline) >= 2:
            points.append(Point(x, method, baseline))
        else:  # a to-target point's seeds that never reach the target give no value
            short.append(f"{x:g}: {len(method)} and {len(baseline)}")
    out: dict[str, Any] = {"axis": spec.axis, "paper": spec.paper, "source": spec.source, "command": spec.command}
    out["unit"] = UNITS.get(field, claim.unit)  # the effect's: a to-target card's ratio is not a difference
    if len({p.x for p in points}) < 2:
        have = ", ".join(f"{p.x:g}" for p in points) or "none"
        seeds = f" (seeds with a value, the method's and the baseline's, at {'; '.join(short)})" if short else ""
        return {**out, "word": None, "reason": f"points with 2 seeds a side at {have}{seeds}; a trend needs 2 or more"}
    found = trend(points, claim.better, spec.paper, equivalence=claim.test == "equivalence")
    return {**out, **asdict(found), "reason": ""}


def describe(found: dict[str, Any], unit: str) -> str:
    """A trend finding (trend_of's data) in one line: the word, each point's effect with its interval, the slope per
    doubling, and the projection to the paper's setting where one is drawn; or why there is none."""
    axis = found["axis"].replace("_", " ")
    if not found.get("word"):
        return f"along {axis}: no finding yet ({found['reason']}); {found['command']} measures the points"
    points = "; ".join(
        f"{e['x']:g}: {signed(e['value'])} [{signed(e['low'])}, {signed(e['high'])}]" for e in found["effects"]
    )
    text = (
        f"{found['word']} along {axis} (the method's advantage, {unit}, 95% intervals: {points}; "
        f"slope {signed(found['slope'])} a doubling [{signed(found['slope_low'])}, {signed(found['slope_high'])}]"
    )
    if not found["fit_holds"]:
        text += ", the points stray from a line beyond their seeds' spread"
    if (p := found["projection"]) is not None:
        text += (
            f"; at the paper's {p['x']:g}: {signed(p['value'])} [{signed(p['low'])}, {signed(p['high'])}], {p['label']}"
        )
    return text + ")"


def signed(value: float) -> str:
    """A signed effect: three significant digits, or whole numbers with separators from 1,000 (tokens, not 1e+05)."""
    return f"{value:+,.0f}" if abs(value) >= 1000 else f"{value:+.3g}"
