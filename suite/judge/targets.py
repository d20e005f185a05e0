"""Time to target: what each arm of a quality pair spends to reach the baseline's final validation loss.

The equal-target protocol of MLPerf Training and the modded-nanogpt speedrun: fix a loss, and compare what each
arm pays to get there, instead of comparing losses at an equal budget. The target is the largest final validation
loss over the baseline arm's seeds (per setting; complete runs with an evaluation only): the loss every seed of the
baseline reached. MLPerf sets its targets where the reference runs converge; the baseline's mean, used before,
was a loss about half of the baseline's own seeds never reach, so a card got pairs only from the luckier half.
For every seed of both arms the `to-target` metric reads, off the run's validation curve (claim_frame's
`val_curve`):

- `tokens_to_target`: the tokens at the first evaluation whose loss is at or below the target, linearly
  interpolated between that evaluation and the one before it. Evaluations are `eval_every` steps apart, often a
  quarter of a smoke run: rounding up to the next evaluation would add up to that much to every seed, and a
  straight line between the two measured losses is the least assumption that keeps the crossing between them.
  A run already at or below the target at its first evaluation reads that evaluation's tokens (no earlier loss
  to interpolate from: an upper bound, which the verdict's reason names);
- `cpu_s_to_target`: the steps to the same crossing times the record's CPU seconds per step of one worker
  (`throughput.cpu_step_s_median`). Records keep no CPU time per point of the curve, only this steady-state
  median (warm-up, metered steps and evaluation excluded), so the sum of per-step CPU time up to the crossing is
  that median times the steps; it is the wall-clock analogue a shared machine's waiting does not inflate.

A seed that never reaches the target gives no value, and neither does a diverged run (its loss stopped being a
number), a run without any evaluation, or (for CPU seconds) a record without CPU time; the reason names each such
seed and how many seeds of each arm reached the target. Every baseline seed reaches the target by its last
evaluation, so each seed of the method that reaches it gives a pair. A complete run of the method that ended
above the target bounds its seed's ratio from below (its whole budget over the baseline's tokens to the target);
where every seed of the method ended so, the samples carry those bounds (`Samples.floors`) and the verdict judges
the least of them (suite/judge/verdicts.py: a right-censored value, as survival analysis calls it).

The samples are method / baseline per seed, paired by seed and setting as the `ratio` metric pairs them: a seed
fixes initialisation and data order in both arms, so the pair shares that noise and the ratio cancels it, and the
verdict's t-interval over per-seed ratios needs no delta method (a ratio of means would, and would ignore that the
two arms saw the same data). Only seeds that reached the target on both sides give a pair.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from suite.errors import ClaimsError
from suite.judge.metrics import Samples, both_sides, metric
from suite.judge.sides import BY_SETTING, Sides

FIELDS = ("tokens_to_target", "cpu_s_to_target")
# the unit of each field's value for one seed: a card's unit is that of its ratio, a trend's effect is a difference
UNITS = {"tokens_to_target": "tokens", "cpu_s_to_target": "CPU seconds"}
Point = tuple[float, float, float]  # (step, tokens, validation loss) of one evaluation


def crossing(points: Sequence[Point], target: float) -> tuple[float, float, bool] | None:
    """(step, tokens, at_first) where the validation loss first reaches `target`, linearly interpolated between
    the evaluation at or below it (within 1e-9 relative: float rounding of a mean of repeated runs) and the one
    before; None if no evaluation reaches it. `at_first`: the first evaluation is already there (an upper bound)."""
    for i, (step, tokens, loss) in enumerate(points):
        # a seed that ends exactly at the target reaches it, whichever way a mean of repeated runs rounds
        if loss > target and not math.isclose(loss, target, rel_tol=1e-9):
            continue
        if i == 0:
            return float(step), float(tokens), True
        step0, tokens0, loss0 = points[i - 1]
        share = min((loss0 - target) / (loss0 - loss), 1.0)  # loss0 > target >= loss (up to rounding)
        return step0 + share * (step - step0), tokens0 + share * (tokens - tokens0), False
    return None


def targets(baseline: pd.DataFrame) -> pd.Series:
    """The target of each setting: the largest final validation loss over the baseline's seeds, which every one
    of them reached (repeated runs of one seed averaged first)."""
    done = baseline[(baseline["status"] == "complete") & baseline["val_curve"].map(len).astype(bool)]
    finals = done["val_curve"].map(lambda curve: curve[-1][2]).astype(float)
    return finals.groupby([done["seed"], done["setting"]]).mean().groupby(level="setting").max()


def _run_value(row: pd.Series, target: float, field: str) -> tuple[float | None, str]:
    """One run's cost to the target, or None with what stopped it; the text names a first-evaluation reading."""
    curve = row["val_curve"]
    if row["status"] == "diverged":
        return None, f"diverged at {int(row['tokens']):,} tokens"
    if not curve:
        return None, "has no validation evaluation"
    found = crossing(curve, target)
    if found is None:
        return None, f"did not reach the target in {int(curve[-1][1]):,} tokens (final {curve[-1][2]:.4g})"
    step, tokens, at_first = found
    first = f"reached it by its first evaluation, at {tokens:,.0f} tokens (an upper bound)" if at_first else ""
    if field == "tokens_to_target":
        return tokens, first
    cpu = pd.to_numeric(row["cpu_step_s_median"], errors="coerce")
    if not np.isfinite(cpu):
        return None, "records no CPU time per step"
    return step * float(cpu), first


def _costs(rows: pd.DataFrame, goal: pd.Series, field: str) -> tuple[pd.Series, dict[tuple, str]]:
    """Each (seed, setting)'s cost to its setting's target (repeated runs averaged), and what the reason says of a
    seed: why it gives no value, or that its value is a first-evaluation reading."""
    values: dict[tuple, list[float]] = {}
    misses: dict[tuple, str] = {}
    firsts: dict[tuple, str] = {}
    for _, row in rows[rows["setting"].isin(goal.index)].iterrows():
        key = (row["seed"], row["setting"])
        value, note = _run_value(row, float(goal[row["setting"]]), field)
        if value is None:
            misses.setdefault(key, note)
            continue
        values.setdefault(key, []).append(value)
        if note:
            firsts.setdefault(key, note)
    index = pd.MultiIndex.from_tuples(list(values), names=["seed", "setting"])
    series = pd.Series([float(np.mean(v)) for v in values.values()], index=index, dtype=float)
    return series, {**{k: v for k, v in misses.items() if k not in values}, **firsts}


def seed_costs(mine: pd.DataFrame, theirs: pd.DataFrame, field: str) -> tuple[list[float], list[float]]:
    """Each side's cost to the baseline's target (`field` of FIELDS) by seed, settings averaged, over the seeds that
    reach it: one point of a to-target card's trend (suite/judge/trends.py), where the target is the baseline's at
    that point."""
    goal = targets(theirs)
    method, baseline = (
        [float(v) for v in _costs(rows, goal, field)[0].groupby(level="seed").mean()] for rows in (mine, theirs)
    )
    return method, baseline


def _lower_bounds(rows: pd.DataFrame, goal: pd.Series, baseline: pd.Series) -> pd.Series:
    """Each seed of the method whose complete run ended above the target while the baseline's seed reached it: its
    tokens over the baseline's tokens to the target, a lower bound of the ratio that seed would give."""
    bounds = {}
    for _, row in rows[rows["setting"].isin(goal.index) & (rows["status"] == "complete")].iterrows():
        key, curve = (row["seed"], row["setting"]), row["val_curve"]
        if curve and key in baseline.index and crossing(curve, float(goal[row["setting"]])) is None:
            bounds[key] = curve[-1][1] / baseline[key]
    return pd.Series(bounds, dtype=float)


def _bounds_text(bounds: pd.Series) -> str:
    if bounds.empty:
        return ""
    span = f"{bounds.min():.3g}x" if bounds.min() == bounds.max() else f"{bounds.min():.3g}x to {bounds.max():.3g}x"
    return (
        f"; the {len(bounds)} seed(s) of the method that ended above the target need more than their whole budget, "
        f"above {span} the baseline's tokens"
    )


def _side_text(name: str, rows: pd.DataFrame, reached: pd.Series, notes: dict[tuple, str]) -> str:
    seeds = rows[["seed", "setting"]].drop_duplicates()
    words = f"{len(reached)} of {len(seeds)} seeds of the {name} arm"
    said = [f"seed {seed} {text}" for (seed, _), text in sorted(notes.items(), key=str)]
    return f"{words} ({'; '.join(said)})" if said else words


def _note(goal: pd.Series, sides: list[tuple[str, pd.DataFrame, pd.Series, dict]], pairs: int) -> str:
    """What the reason says: each setting's target, how many seeds of each arm reached it and why others did not."""
    where = "; ".join(f"{v:.4g}" + (f" at {s}" if len(goal) > 1 else "") for s, v in goal.items())
    reached = " and ".join(_side_text(*s) for s in sides)
    what = "the baseline's largest final validation loss over its seeds"
    return f"; target {where} ({what}), reached by {reached}; {pairs} seed pair(s)"


@metric("to-target", fields=FIELDS, ratio=True, diverged=True, pairs=BY_SETTING)
def to_target(df: pd.DataFrame, field: str, sides: Sides) -> Samples:
    """method / baseline of the tokens (or CPU seconds) to the baseline's largest final validation loss, paired by
    seed and setting (module docstring)."""
    if field not in FIELDS:
        raise ClaimsError(f"metric to-target reads {FIELDS}, not {field!r}")
    mine, theirs = both_sides(df, sides)
    if mine.empty or theirs.empty:
        return Samples(np.array([]), pd.concat([mine, theirs]), (), np.array([]), theirs)
    goal = targets(theirs)
    a, a_notes = _costs(mine, goal, field)
    b, b_notes = _costs(theirs, goal, field)
    keys = a.index.intersection(b.index)
    sides = [("method's", mine, a, a_notes), ("baseline's", theirs, b, b_notes)]
    bounds = _lower_bounds(mine, goal, b) if len(goal) and field == "tokens_to_target" else pd.Series(dtype=float)
    if len(goal):
        note = _note(goal, sides, len(keys)) + _bounds_text(bounds)
    else:
        note = "; the baseline has no validation loss to set a target"
    every_seed_short = a.empty and not bounds.empty and len(bounds) == len(mine[["seed", "setting"]].drop_duplicates())
    return Samples(
        (a[keys] / b[keys]).to_numpy(dtype=float),
        pd.concat([mine, theirs]),
        tuple(s for _, s in keys),
        b[keys].to_numpy(dtype=float),
        theirs,
        note=note,
        floors=bounds.to_numpy(dtype=float) if every_seed_short else None,
    )
