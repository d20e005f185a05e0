"""Each estimate beside the measured runs of its configuration, quantity by quantity.

suite.estimate.beside decides what "the same configuration" is and judges each quantity with the
tolerances of `python -m suite estimate --measure`; this module only lays the rows out. Measured runs
are looked up among all records, whatever their reproduction, and only provenance `measured` counts:
a simulated record repeats its source's ledger and memory, so it would pass for a measurement.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from suite.estimate.beside import Row, compare_per_step, config_key, per_step
from suite.judge.verdicts import evidence_label
from suite.report import frames
from suite.report.tables import Cell, Table, fmt_bytes, fmt_sci, missing, number, text

QUANTITIES: dict[str, tuple[str, Callable[[Any], str]]] = {
    "peak_bytes": ("peak bytes per rank (max over ranks)", fmt_bytes),
    "params": ("parameters per rank (max)", fmt_bytes),
    "grads": ("gradients per rank (max)", fmt_bytes),
    "optimizer": ("optimizer state per rank (max)", fmt_bytes),
    "activations": ("activations per rank (max)", fmt_bytes),
    "comm_bytes_per_rank_step": ("payload bytes per rank per step", fmt_bytes),
    "flops_per_step": ("model FLOPs per step (all ranks)", fmt_sci),
}

SHORT = {  # the same quantities as columns of one table
    "peak_bytes": "peak per rank",
    "params": "parameters",
    "grads": "gradients",
    "optimizer": "optimizer state",
    "activations": "activations",
    "comm_bytes_per_rank_step": "payload per rank per step",
    "flops_per_step": "FLOPs per step",
}
NO_MEASUREMENT = "no measurement"
COLUMNS = ["quantity", "estimated", "measured", "estimated / measured", "agreement", "measured run"]


def _measured(candidates: list[dict]) -> dict[str, list[dict]]:
    measured: dict[str, list[dict]] = {}
    for rec in candidates:
        if rec["provenance"] == "measured" and rec["status"] == "complete":
            measured.setdefault(config_key(rec), []).append(rec)
    return measured


def estimates_beside(records: list[dict], candidates: list[dict], hrefs: dict[int, str]) -> list[dict]:
    """One entry per estimate in `records` that was measured: its configuration, and a table beside the
    complete measured runs of that configuration among `candidates`."""
    measured = _measured(candidates)
    return [
        _entry(rec, measured[config_key(rec)], hrefs)
        for rec in records
        if rec["provenance"] == "estimated" and config_key(rec) in measured
    ]


def unmeasured_table(
    records: list[dict], candidates: list[dict], hrefs: dict[int, str], label: Callable[[dict], str]
) -> Table | None:
    """The estimates in `records` whose configuration no run in `candidates` measured: one row each, its
    quantities as columns (one table, not one per estimate of "no measurement" cells)."""
    measured = _measured(candidates)
    lonely = [r for r in records if r["provenance"] == "estimated" and config_key(r) not in measured]
    if not lonely:
        return None
    table = Table(["estimate", "arm", *SHORT.values(), "measured"], css="estimates")
    for rec in lonely:
        values = per_step(rec)
        table.rows.append(
            [
                text(rec["run_id"], hrefs[id(rec)]),
                text(label(rec)),
                *(number(values.get(q), QUANTITIES[q][1]) for q in SHORT),
                Cell(NO_MEASUREMENT),
            ]
        )
    return table


def _entry(estimate: dict, measured: list[dict], hrefs: dict[int, str]) -> dict:
    table = Table(COLUMNS, css="estimates")
    for run in measured:
        link = text(run["run_id"], hrefs[id(run)])
        badge = evidence_label(run["provenance"], run["env"]["device"])
        table.rows.extend(_row(row, badge, link) for row in compare_per_step(estimate, run))
    return {
        "run_id": estimate["run_id"],
        "href": hrefs[id(estimate)],
        "config": describe(estimate),
        "measured": len(measured),
        "table": table,
    }


def describe(record: dict) -> str:
    """The configuration in words: what config_key compares."""
    parallel, settings = record["parallel"], record.get("settings", {})
    extra = "".join(f", {k} {settings[k]}" for k in ("seq_len", "optimizer") if k in settings)
    return (
        f"{frames.arm(record)} on {frames.config(record)}: micro-batch {parallel['micro_batch']}, "
        f"accumulation {parallel['grad_accum']}, {parallel['global_batch_tokens']:,} tokens per step{extra}"
    )


def _row(row: Row, measured_badge: str, link: Cell) -> list[Cell]:
    label, fmt = QUANTITIES[row.quantity]
    return [
        text(label),
        number(row.estimated, fmt, badge="estimated"),
        number(row.measured, fmt, badge=measured_badge),
        number(row.ratio, _ratio),
        text(_agreement(row, fmt)),
        link,
    ]


def _ratio(value: float | None) -> str:
    return "—" if missing(value) else f"{value:.4f}"


def _agreement(row: Row, fmt: Callable[[Any], str]) -> str:
    if row.tolerance is None:
        return "shown, not judged"
    if row.ok is None:
        return "—"  # one of the two has no such number
    bound = "must be equal" if row.tolerance == 0 else f"within {row.tolerance:.0%}"
    if row.ok:
        return f"agrees ({bound})"
    # the ratio can round to 1.0000 when a few bytes differ, so say by how much
    return f"differs by {fmt(abs(row.estimated - row.measured))} ({bound})"
