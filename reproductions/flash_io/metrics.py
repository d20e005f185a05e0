"""Claim metrics over microbenchmark records (registered with suite.judge.verdicts.metric).

The built-in metrics read summary rows of training runs; a microbenchmark record keeps its numbers in the
rows of its `micro` section, one per shape. These read the newest record of one item (`method`: the item's
name) from the file each summary row names, and select rows by their shape and counted numbers (`variant`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from suite.judge.metrics import Samples, metric

if TYPE_CHECKING:  # the metrics receive the report's frames; importing pandas would cost every command 0.5 s
    import pandas as pd


def _item_rows(df: pd.DataFrame, method: str, hardware: str | None = None) -> tuple[list[dict], pd.DataFrame]:
    """The micro rows (shape, extra and measurements flattened) of the newest record of item `method` (made on a
    device whose name contains `hardware`, where given)."""
    rows = df[(df["method"] == method) & df["path"].notna()]
    if hardware and not rows.empty:
        rows = rows[rows["device_name"].str.contains(hardware, case=False, regex=False)]
    if rows.empty:
        return [], rows
    newest = rows.sort_values("run_id").iloc[[-1]]
    record = json.loads(Path(newest["path"].iloc[0]).read_text(encoding="utf-8"))
    flat = [
        {
            "_shape": r["shape"],
            **r["shape"],
            **r["extra"],
            "time_s_median": r["time_s_median"],
            "peak_bytes": r["peak_bytes"],
            "flops": r["flops"],
        }
        for r in record.get("micro", {}).get("rows", [])
    ]
    return flat, newest


def _match(rows: list[dict], variant: dict | None) -> list[dict]:
    return [r for r in rows if all(r.get(k) == v for k, v in (variant or {}).items())]


def _label(variant: dict | None) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted((variant or {}).items()))


@metric("micro", fields=None)  # fields of the microbenchmark rows, which vary by item
def micro(
    df: pd.DataFrame,
    method: str,
    field: str,
    variant: dict | None = None,
    over: dict | None = None,
    largest: bool = False,
    hardware: str | None = None,
) -> Samples:
    """`field` of the rows of item `method` that match `variant`; with `over`, divided by `field` of the row that
    has the same shape but for `over`'s keys (e.g. variant {backend: math}, over {backend: flash}). With
    `largest`, one value: the largest over the matching rows (an exactness claim judges its worst shape; the
    shapes are settings, never seeds to average). With `hardware`, only records of a device of that name (a
    runtime claim is about one GPU: other hardware is shown beside, not judged)."""
    rows, used = _item_rows(df, method, hardware)
    values, settings = [], []
    for row in _match(rows, variant):
        value = row.get(field)
        if over is not None:
            partner = [r for r in rows if r["_shape"] == {**row["_shape"], **over}]
            value = value / partner[0][field] if value and partner and partner[0].get(field) else None
        if value is not None:
            values.append(float(value))
            settings.append(_label(variant) or _label(row["_shape"]))
    if largest and values:
        return Samples(np.array([max(values)]), used, (f"the largest over {len(values)} shapes",))
    return Samples(np.array(values, dtype=float), used, tuple(settings), note=_left_out(df, method, hardware, used))


def _left_out(df: pd.DataFrame, method: str, hardware: str | None, used: pd.DataFrame) -> str:
    """Where the hardware filter left every record of the item out, what it kept and where the records are."""
    if not hardware or not used.empty:
        return ""
    found = df[(df["method"] == method) & df["path"].notna()]
    if found.empty:
        return ""
    devices = ", ".join(sorted(set(found["device_name"])))
    return f"; the card reads records on {hardware} only, and {method}'s are on {devices}"


# a least-squares fit's last bits depend on the BLAS kernel of the machine (one slope came out 1.9711474164844074
# on one 2-core host and ...065 on another); its inputs are counts, so 12 significant digits keep all the data
# says and the pages rebuild the same anywhere
FIT_DIGITS = 12


def fitted(value: float) -> float:
    """A fitted value to FIT_DIGITS significant digits."""
    return float(f"{value:.{FIT_DIGITS}g}")


def loglog_slope(x: np.ndarray, y: np.ndarray) -> float:
    """The least-squares slope of log y against log x."""
    return fitted(np.polyfit(np.log(np.asarray(x, dtype=float)), np.log(np.asarray(y, dtype=float)), 1)[0])


@metric("micro-slope", fields=None)
def micro_slope(df: pd.DataFrame, method: str, field: str, x: str, variant: dict | None = None) -> Samples:
    """The least-squares slope of log `field` against log `x` over the rows of item `method` matching `variant`."""
    rows, used = _item_rows(df, method)
    points = [(r[x], r[field]) for r in _match(rows, variant) if r.get(field)]
    if len(points) < 2:
        return Samples(np.array([], dtype=float), used.iloc[:0])
    xs, ys = np.array(points, dtype=float).T
    return Samples(np.array([loglog_slope(xs, ys)]), used, (f"{_label(variant)} over {x}",))
