"""Long-form tables cut from run records for the report's figures.

Runs are grouped into arms (arms.py: method, variant, model, world size and protocol), so two
configurations never share a line or a bar. Seeds stay separate until a band is drawn. A line figure draws
at most PANEL_LINES arms in one panel: panels() groups more into small multiples.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from suite.arms import arm_of
from suite.arms import label as arm_label
from suite.judge.sweeps import pick_winners, rates_of, swept_rate, without_rates
from suite.records import FINISHED, final_val_loss

# the memory meter's categories (suite/meters/memory.py CATEGORIES, not imported: the report imports no torch
# module); records written before comm_buffers existed read 0 there
MEMORY_PARTS = ("params", "grads", "optimizer", "activations", "comm_buffers", "other")


def arm(record: dict) -> str:
    variant = " ".join(
        f"{k}={v if isinstance(v, (str, int, float)) else json.dumps(v)}" for k, v in sorted(record["variant"].items())
    )
    return f"{record['method']} {variant}".strip()


def config(record: dict) -> str:
    return f"{record['model']['name']} x{record['parallel']['world_size']}"


def curves(records: list[dict], labels: list[str]) -> pd.DataFrame:
    rows = [{"arm": label, "run": r["run_id"], **point} for r, label in zip(records, labels) for point in r["curve"]]
    return pd.DataFrame(rows, columns=["arm", "run", "step", "tokens", "flops", "wall_s", "train_loss", "val_loss"])


def lr_sweep(records: list[dict], labels: list[str]) -> pd.DataFrame:
    """One row per run of an arm swept over three or more learning rates (suite/judge/sweeps.py): `arm` (its page label
    without the rate), `lr` (the rate swept), `rate` (which: lr or outer_lr), `val_loss` (the final validation loss;
    NaN for a diverged run), `winner` (the rate suite.judge.sweeps.pick_winners picks for the arm; NaN where it
    refuses), `refusal` (why it refuses, else '') and `panel` (the title of the small multiple the arm is drawn in:
    panels() over its task, plan run, model, method).
    Arms in the order of `records` (the page's), each arm's rates ascending."""
    columns = ["arm", "lr", "rate", "val_loss", "winner", "refusal", "panel"]
    groups: dict[str, list[tuple[dict, str]]] = {}
    for rec, name in zip(records, labels):
        # records of before settings existed carry no rate
        if rates_of(rec)["lr"] is not None and (rec["status"] in FINISHED or rec["status"] == "diverged"):
            config = without_rates(arm_of(rec)["config"])
            groups.setdefault(arm_label(config), []).append((rec, re.sub(r" (outer_)?lr=\S+", "", name)))
    swept: dict[str, list[tuple[dict, str, float]]] = {}
    rate_of: dict[str, str] = {}
    for key, runs in groups.items():
        try:
            rate = swept_rate([rec for rec, _ in runs])
        except ValueError:  # trials that vary two rates are no sweep
            continue
        values = [rates_of(rec)[rate] for rec, _ in runs]
        if len(set(values)) >= 3:
            swept[key], rate_of[key] = [(rec, name, v) for (rec, name), v in zip(runs, values)], rate
    if not swept:
        return pd.DataFrame(columns=columns)
    try:
        winners, refusal = pick_winners([rec for runs in swept.values() for rec, _, _ in runs]), ""
    except ValueError as err:
        winners, refusal = {}, str(err)
    rows = [
        {
            "arm": name,
            "lr": lr,
            "rate": rate_of[key],
            "val_loss": _loss(rec),
            "winner": winners[key].lr if key in winners else np.nan,
            "refusal": refusal,
        }
        for key, runs in swept.items()
        for rec, name, lr in runs
    ]
    position = {id(rec): i for i, rec in enumerate(records)}
    firsts: dict[str, dict] = {}  # each arm's first run, in the page's order (the order of `records`)
    for rec, name, _ in sorted((run for runs in swept.values() for run in runs), key=lambda run: position[id(run[0])]):
        firsts.setdefault(name, rec)
    order = list(firsts)
    by_task = panels([traits(firsts[name]) for name in order], apart=1)  # no two tasks' losses on one axis
    titles = {order[i]: title for title, members in by_task for i in members}
    frame = pd.DataFrame(rows, columns=columns[:-1])
    frame["panel"] = frame["arm"].map(titles)
    rank = frame["arm"].map({name: i for i, name in enumerate(order)})
    return frame.iloc[np.lexsort((frame["lr"].to_numpy(float), rank.to_numpy()))].reset_index(drop=True)


def _loss(rec: dict) -> float:
    """The final validation loss a sweep figure draws: NaN for a diverged run or a curve with none."""
    loss = None if rec["status"] == "diverged" else final_val_loss(rec)
    return np.nan if loss is None else loss


PANEL_LINES = 8  # the most arms one panel of a line figure draws: more become small multiples
TRAITS = ("task", "plan run", "model", "method")  # what traits() gives, as a panel's title counts them


def traits(record: dict) -> tuple[str, ...]:
    """What groups a record's arm with others in small multiples (TRAITS), most telling first: its task (the data it
    trained on), its plan run (results folder), its model and its method."""
    task = (record.get("data") or {}).get("name") or ""
    return (str(task), plan(record), record["model"]["name"], record["method"])


def panels(keys: list[tuple[str, ...]], limit: int = PANEL_LINES, apart: int = 0) -> list[tuple[str, list[int]]]:
    """Items (arms, by their traits(), in the page's order) in panels of at most `limit`, each with its title.

    A group over the limit is split by the first trait that varies in it, its parts (in order of first appearance)
    packed back together while they fit, so alike arms share a panel and panels stay few; a part still over the limit
    is split by the next trait, and what no trait splits is cut into consecutive runs. The first `apart` traits split
    every group and are never packed (a sweep's tasks: losses on two data sets share no axis). A panel is titled by
    the values it was split by ("stdlib-text, merging-quality + merging-smoke"; "" where one panel holds every item);
    panels that share a title are numbered ("(1 of 2)")."""
    groups = _split(list(range(len(keys))), keys, 0, limit, apart, ())
    if len(groups) <= 1:
        return [("", group) for _, group in groups]
    titles = [", ".join(words) for words, _ in groups]
    counts, seen = Counter(titles), Counter()
    out = []
    for title, (_, group) in zip(titles, groups):
        seen[title] += 1
        out.append((f"{title} ({seen[title]} of {counts[title]})".strip() if counts[title] > 1 else title, group))
    return out


def _split(
    items: list[int], keys: list[tuple[str, ...]], level: int, limit: int, apart: int, words: tuple[str, ...]
) -> list[tuple[tuple[str, ...], list[int]]]:
    """`items` in groups of at most `limit`, each with the words that name the values it was split by."""
    if len(items) <= limit and level >= apart:
        return [(words, items)]
    for t in range(level, len(TRAITS)):
        values = list(dict.fromkeys(keys[i][t] for i in items))
        if len(values) > 1 and (t < apart or len(items) > limit):
            break
    else:
        return [(words, items[i : i + limit]) for i in range(0, len(items), limit)]
    packed: list[list[str]] = []
    for value in values:
        if packed and t >= apart and sum(keys[i][t] in (*packed[-1], value) for i in items) <= limit:
            packed[-1].append(value)
        else:
            packed.append([value])
    out = []
    for part in packed:
        named = " + ".join(part) if len(part) <= 2 else f"{len(part)} {TRAITS[t]}s"
        members = [i for i in items if keys[i][t] in part]
        out += _split(members, keys, t + 1, limit, apart, (*words, named or f"no {TRAITS[t]}"))
    return out


def coinciding(curve: pd.DataFrame, y: str) -> list[list[str]]:
    """Groups of arms whose `y` is exactly equal at every step (the mean over seeds; on CPU two methods can
    compute bit-identical losses): drawn, one line hides the others, so the figure names them."""
    series: dict[tuple, list[str]] = {}
    for arm, rows in curve.dropna(subset=[y]).groupby("arm", sort=False):
        means = rows.groupby("step")[y].mean()
        if len(means) > 1:
            series.setdefault((tuple(means.index), tuple(means.to_numpy(float))), []).append(arm)
    return [arms for arms in series.values() if len(arms) > 1]


def seed_band(curve: pd.DataFrame, x: str, y: str, points: int = 60) -> pd.DataFrame:
    """Per arm: mean, min and max of `y` over runs (seeds) on a common grid of `x`.

    Seeds of one arm share tokens and FLOPs per step but not wall time, so every run is interpolated
    onto a grid over the x range that all its runs cover.
    """
    bands = []
    for label, arm_rows in curve.dropna(subset=[y]).groupby("arm", sort=False):
        runs = [(xs, ys) for xs, ys in _runs(arm_rows, x, y) if len(xs) > 1]
        if not runs:
            continue
        low, high = max(_least(xs) for xs, _ in runs), min(_most(xs) for xs, _ in runs)
        if not high > low:
            continue
        grid = np.linspace(low, high, points)
        ys = np.stack([np.interp(grid, xs.astype(float), ys) for xs, ys in runs])
        bands.append(
            pd.DataFrame(
                {
                    "arm": label,
                    "x": grid,
                    "mean": ys.mean(0),
                    "low": ys.min(0),
                    "high": ys.max(0),
                    "runs": len(runs),
                }
            )
        )
    return (
        pd.concat(bands, ignore_index=True)
        if bands
        else pd.DataFrame(columns=["arm", "x", "mean", "low", "high", "runs"])
    )


def _runs(rows: pd.DataFrame, x: str, y: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each run's `x` (ascending, missing last) and `y` values, runs by id: the order and values that
    groupby("run") and sort_values(x) give, so the same floats, without two DataFrames per run (a report of a
    thousand runs spent a second and a half on those)."""
    ids, xs, ys = rows["run"].to_numpy(), rows[x].to_numpy(), rows[y].to_numpy(float)
    runs, which = np.unique(ids, return_inverse=True)
    order = np.argsort(which, kind="stable")  # each run's rows in the frame's order, as groupby keeps them
    out = []
    for part in np.split(order, np.cumsum(np.bincount(which, minlength=len(runs)))[:-1]):
        missing = np.asarray(pd.isna(xs[part]))
        present = np.flatnonzero(~missing)
        ranked = np.concatenate([present[xs[part][present].argsort(kind="quicksort")], np.flatnonzero(missing)])
        out.append((xs[part][ranked], ys[part][ranked]))  # sort_values' own order (pandas nargsort)
    return out


def _least(values: np.ndarray) -> object:
    """The smallest value of a sorted run, missing ones skipped (Series.min)."""
    present = values[~np.asarray(pd.isna(values))]
    return present[0] if len(present) else np.nan


def _most(values: np.ndarray) -> object:
    present = values[~np.asarray(pd.isna(values))]
    return present[-1] if len(present) else np.nan


def memory(records: list[dict], labels: list[str]) -> pd.DataFrame:
    """Per arm: the largest rank's parts and peak, and the smallest rank's peak; means over seeds."""
    rows = []
    for r, label in zip(records, labels):
        ranks = r["memory"]["per_rank"]
        if not ranks:
            continue
        top = max(ranks, key=lambda m: m["peak_bytes"])
        rows.append(
            {
                "arm": label,
                **{p: top.get(p) or 0 for p in MEMORY_PARTS},
                "peak": top["peak_bytes"],
                "peak_low": min(m["peak_bytes"] for m in ranks),
                "ranks": len(ranks),
            }
        )
    if not rows:
        return pd.DataFrame(columns=["arm", *MEMORY_PARTS, "peak", "peak_low", "ranks"])
    return pd.DataFrame(rows).groupby("arm", sort=False).mean().reset_index()


def comm(records: list[dict], labels: list[str]) -> pd.DataFrame:
    """Payload bytes per step per rank, by op and by group tier, mean over seeds."""
    rows = []
    for r, label in zip(records, labels):
        steps, ranks = r["comm"].get("steps") or 0, len(r["comm"]["per_rank"])
        if not steps or not ranks:
            continue
        for rank in r["comm"]["per_rank"]:
            for op in rank["ops"]:
                rows.append(
                    {
                        "arm": label,
                        "run": r["run_id"],
                        "op": op["op"],
                        "tier": op.get("tier") or "unlabelled",
                        "bytes_per_step": op["bytes"] / steps / ranks,
                    }
                )
    if not rows:
        return pd.DataFrame(columns=["arm", "op", "tier", "bytes_per_step"])
    per_run = pd.DataFrame(rows).groupby(["arm", "run", "op", "tier"], sort=False)["bytes_per_step"].sum().reset_index()
    return per_run.groupby(["arm", "op", "tier"], sort=False)["bytes_per_step"].mean().reset_index()


def reference_baseline(records: list[dict]) -> str | None:
    """The baseline that throughput is divided by: the baseline method with most runs on the page (the suite
    names no baseline; a tie goes to the one listed first)."""
    counts = Counter(r["method"] for r in records if r["baseline"])
    return counts.most_common(1)[0][0] if counts else None


# Repeats (seeds) of one arm whose tokens/s differ by more than this fraction of their median were timed under
# different machine load, so their time ratios say more about the machine than the method. The number is the
# throughput gate's tolerance for a wall-time measure (benchmarks/gate.py, TOLERANCE["wall_units"]); suite/
# imports nothing from benchmarks/, so it is declared here once and tests/test_report.py checks the two agree.
REPEAT_TOLERANCE = 0.15


def repeat_spreads(records: list[dict], labels: list[str]) -> pd.Series:
    """Per arm with two or more complete timed repeats: (largest - smallest) / median of their tokens/s."""
    rows = [
        (label, r["throughput"]["tokens_per_s"])
        for r, label in zip(records, labels)
        if r["status"] == "complete" and r["throughput"].get("tokens_per_s")
    ]
    if not rows:
        return pd.Series(dtype=float)
    tokens = pd.DataFrame(rows, columns=["arm", "tokens_per_s"]).groupby("arm", sort=False)["tokens_per_s"]
    spread = (tokens.max() - tokens.min()) / tokens.median()
    return spread[tokens.size() > 1]


def unsteady(records: list[dict], labels: list[str]) -> pd.Series:
    """The arms whose repeats differ in tokens/s by more than REPEAT_TOLERANCE, with their spread."""
    spreads = repeat_spreads(records, labels)
    return spreads[spreads > REPEAT_TOLERANCE]


def throughput_ratios(records: list[dict], labels: list[str]) -> tuple[pd.DataFrame, str | None]:
    """tokens/s of each arm over the reference baseline's, per configuration (medians over seeds), and beside it
    the same ratio by CPU time (the reference's CPU seconds per step over the arm's), which a shared machine's
    waiting does not inflate. The reference is the baseline method's plainest variant (the one with fewest
    settings, then the most runs); its other variants (e.g. ddp+ac) are arms like any other."""
    reference = reference_baseline(records)
    variants = Counter(
        json.dumps(r["variant"], sort_keys=True) for r in records if r["method"] == reference and r["baseline"]
    )
    plain = min(variants, key=lambda v: (len(json.loads(v)), -variants[v], v)) if variants else None
    several_plans = len({r.get("_folder") for r in records}) > 1
    rows = [
        {
            "arm": label,
            "reference": r["method"] == reference and json.dumps(r["variant"], sort_keys=True) == plain,
            "config": f"{plan(r)}: {config(r)}" if several_plans else config(r),
            "tokens_per_s": r["throughput"]["tokens_per_s"],
            "cpu_step_s": r["throughput"].get("cpu_step_s_median") or np.nan,
            "load": load(r),
        }
        for r, label in zip(records, labels)
        if r["status"] == "complete" and r["throughput"]["tokens_per_s"]
    ]
    columns = ["arm", "config", "ratio", "cpu_ratio", "load", "reference_load"]
    if reference is None or not rows:
        return pd.DataFrame(columns=columns), reference
    runs = pd.DataFrame(rows)
    timed = ["tokens_per_s", "cpu_step_s", "load"]
    base = runs[runs["reference"]].groupby("config")[timed].median()
    medians = runs[~runs["reference"]].groupby(["arm", "config"], sort=False)[timed].median().reset_index()
    medians = medians[medians["config"].isin(base.index)]
    if medians.empty:  # only the reference ran: dividing the empty frame would fail on its column types
        return pd.DataFrame(columns=columns), reference
    medians["ratio"] = medians["tokens_per_s"] / medians["config"].map(base["tokens_per_s"])
    medians["cpu_ratio"] = medians["config"].map(base["cpu_step_s"]) / medians["cpu_step_s"]
    medians["reference_load"] = medians["config"].map(base["load"])
    return medians[columns].reset_index(drop=True), reference


def plan(record: dict) -> str:
    """The plan run a record comes from (its results folder): time ratios divide runs of one plan run only, which
    ran on one commit under one stretch of the machine's load."""
    return Path(record.get("_folder") or "(no folder)").name


def load(record: dict) -> float:
    """The machine's 1-minute load average over a run (the mean of set-up's and the record's), NaN if unknown."""
    found = (record.get("timing") or {}).get("load_average")
    return float(np.mean(found)) if found else np.nan


def geometric_means(ratios: pd.DataFrame, column: str = "ratio") -> pd.Series:
    """Per arm, the geometric mean of its throughput ratios (`column`: by wall or CPU time) over configurations."""
    if ratios.empty:
        return pd.Series(dtype=float)
    return np.exp(np.log(ratios[column].astype(float)).groupby(ratios["arm"], sort=False).mean())
