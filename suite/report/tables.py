"""Sortable tables for the report: cells carry display text and a sort key; the numbers' formats; their HTML.

Values stay raw in a Table; html() escapes them when the page is rendered.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from numbers import Number
from typing import Any, NamedTuple

import pandas as pd
from markupsafe import Markup, escape

from suite.judge.verdicts import evidence_label
from suite.records import to_dataframe
from suite.report.frames import REPEAT_TOLERANCE, geometric_means, repeat_spreads
from suite.report.labels import key as arm_key


class Cell(NamedTuple):
    """One cell, immutable. A named tuple, not a frozen dataclass: a report of a thousand runs makes half a million
    cells, and a tuple is made four times as fast."""

    text: str
    sort: str | float = ""  # numbers sort numerically in the page's script; "" sorts last
    href: str | None = None
    badge: str | None = None  # a provenance or verdict label shown as a badge
    colour: str | None = None  # an arm's colour ("#rrggbb"), shown as a swatch before the text
    dash: str = "solid"  # the arm's line style (arms.DASHES), drawn into the swatch where it is not solid


@dataclass(frozen=True)
class Table:
    columns: list[str]
    rows: list[list[Cell]] = field(default_factory=list)
    css: str = ""  # extra class on the <table>, e.g. "claims"


def css_token(text: str) -> str:
    """A string reduced to [a-z0-9-], for class names and anchors."""
    return "-".join("".join(ch if ch.isascii() and ch.isalnum() else " " for ch in text.lower()).split()) or "x"


def badge(label: str, css: str | None = None) -> str:
    """A label as a badge: the same markup as the templates' badge macro."""
    return f'<span class="badge badge-{escape(css or css_token(label))}">{escape(label)}</span>'


def sort_key(value: str | float) -> str:
    """A cell's sort key as data-sort writes it: a whole number without its ".0" (the page's script reads both
    alike)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return str(value)


def _cell(cell: Cell, sorted_by: bool = True) -> str:
    number_class = ' class="num"' if isinstance(cell.sort, Number) else ""  # the page's script sorts it numerically
    key = sort_key(cell.sort)
    # the script sorts a cell without data-sort by its visible text: a key that repeats it is left out (most text
    # cells), one that differs ("" for "—", bytes for "12 MiB", a badge after the text) stays
    alone = not cell.badge or cell.text == cell.badge or cell.text.startswith(f"{cell.badge} (")
    if not sorted_by or alone and key == cell.text == cell.text.strip():
        out = f"<td{number_class}>"
    else:
        out = f'<td{number_class} data-sort="{escape(key)}">'
    if cell.colour:
        dash = f" swatch-{escape(cell.dash)}" if cell.dash != "solid" else ""
        out += f'<span class="swatch{dash}" style="background:{escape(cell.colour)}"></span>'
    if cell.href:
        out += f'<a href="{escape(cell.href)}">{escape(cell.text)}</a>'
    elif cell.badge and cell.text == cell.badge:
        out += badge(cell.badge)
    elif cell.badge and cell.text.startswith(f"{cell.badge} ("):  # a verdict with the scale it was found at
        out += f'{badge(cell.badge)} <span class="at">{escape(cell.text[len(cell.badge) + 1 :])}</span>'
    else:
        out += f"{escape(cell.text)}{badge(cell.badge) if cell.badge else ''}"
    return out + "</td>"


def html(table: Table) -> Markup:
    """The table as the page shows it, sortable and scrolling inside its own box. Written here, not in a template:
    a report's thousand run pages hold hundreds of thousands of cells, and a template macro spent most of the
    report's rendering on them."""
    head = "".join(f"<th>{escape(c)}</th>" for c in table.columns)
    rows = "".join(f"<tr>{''.join(_cell(c) for c in row)}</tr>\n" for row in table.rows)
    return Markup(
        f'<div class="scroll">\n<table class="sortable {escape(table.css)}">\n<thead><tr>{head}</tr></thead>\n'
        f"<tbody>\n{rows}</tbody>\n</table>\n</div>"
    )


def fields_html(table: Table) -> Markup:
    """A field/value table (a run page's Run, Model, Data, ...) as rows alone: no column headers to sort by, as
    nothing compares down its value column, so no sort keys; its cells wrap rather than scroll (style.css .fields).
    A cell's end tag is left out, as HTML allows (the next cell or the row's end closes it): a report's run pages
    hold a hundred thousand of these cells."""
    cells = ["".join(_cell(c, sorted_by=False).removesuffix("</td>") for c in row) for row in table.rows]
    rows = "".join(f"<tr>{row}</tr>\n" for row in cells)
    css = f' class="{escape(table.css)}"' if table.css else ""
    return Markup(f"<table{css}>\n{rows}</table>")


def missing(value: Any) -> bool:
    return value is None or isinstance(value, float) and math.isnan(value)


def fmt_number(value: Any) -> str:
    if missing(value):
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int) or isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def fmt_bytes(value: Any) -> str:
    """Three significant digits in the largest unit that fits; 1,000 to 1,023 of a unit stay whole ("1,010
    MiB"), where "%.3g" would write "1.01e+03"."""
    if missing(value):
        return "—"
    for power, unit in ((4, "TiB"), (3, "GiB"), (2, "MiB"), (1, "KiB")):
        if abs(value) >= 1024**power:
            scaled = value / 1024**power
            return f"{scaled:,.0f} {unit}" if abs(scaled) >= 100 else f"{scaled:.3g} {unit}"
    return f"{value:,.0f} B"


def fmt_sci(value: Any) -> str:
    return "—" if missing(value) else f"{value:.3g}"


def number(value: Any, fmt: Callable[[Any], str] = fmt_number, badge: str | None = None) -> Cell:
    return Cell(fmt(value), "" if missing(value) else float(value), badge=badge)


def text(value: Any, href: str | None = None) -> Cell:
    if missing(value):
        value = "—"
    elif isinstance(value, bool):
        value = "yes" if value else "no"
    elif not isinstance(value, str):
        value = json.dumps(value, sort_keys=True)
    return Cell(value, value, href)


def runs_table(records: list[dict], rows: pd.DataFrame, hrefs: list[str], labels: list[str], page: Any) -> Table:
    """One row per run; `rows` are its summary rows (suite.records.to_dataframe) in the same order, `labels`
    their arms; the variant parameters that vary on the page are columns of their own."""
    # the settings that vary on the page and have a value in this table (a microbenchmark has no budget)
    mine = [page.arms[arm_key(r)].varying for r in records]
    varying = [
        k for k in (next(iter(page.arms.values())).varying if page.arms else []) if any(v[k] != "—" for v in mine)
    ]
    columns = [
        "run",
        "arm",
        "provenance",
        "status",
        "seed",
        *varying,
        "model",
        "world size",
        "protocol",
        "steps",
        "tokens",
        "FLOPs",
        "wall s",
        "tokens/s",
        "peak memory (max rank)",
        "params+grads+optimizer (max rank)",
        "comm bytes/rank/step",
        "final train loss",
        "final val loss",
    ]
    colours = page.colours
    table = Table(columns, css="runs")
    for record, (_, row), href, label in zip(records, rows.iterrows(), hrefs, labels):
        badge = evidence_label(record["provenance"], record["env"]["device"])
        values = page.arms[arm_key(record)].varying
        table.rows.append(
            [
                text(row["run_id"], href),
                Cell(label, label, colour=colours.get(label)),
                Cell(badge, badge, badge=badge),
                text(row["status"]),
                number(row["seed"]),
                *[text(values.get(k)) for k in varying],
                text(row["model"]),
                number(row["world_size"]),
                text(row["protocol"]),
                number(row["steps"]),
                number(row["tokens"]),
                number(row["flops"], fmt_sci),
                number(row["wall_s"]),
                number(row["tokens_per_s"]),
                number(row["peak_bytes_max"], fmt_bytes),
                number(row["state_bytes_max"], fmt_bytes),
                number(row["comm_bytes_per_rank_step"], fmt_bytes),
                number(row["final_train_loss"]),
                number(row["final_val_loss"]),
            ]
        )
    return table


def _gib(value: Any) -> str:
    return "—" if missing(value) else f"{value / 2**30:.3g}"


# the absolute numbers of each arm at the top of a reproduction page: (column, summary row field, format)
NUMBERS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("tokens/s", "tokens_per_s", lambda v: "—" if missing(v) else f"{v:,.0f}"),
    ("CPU s/step", "cpu_step_s_median", lambda v: "—" if missing(v) else f"{v:.3g}"),
    ("peak GiB/rank", "peak_bytes_max", _gib),
    ("model state GiB/rank", "state_bytes_max", _gib),
    ("bytes/step/rank", "comm_bytes_per_rank_step", fmt_bytes),
    ("final val loss", "final_val_loss", lambda v: "—" if missing(v) else f"{v:.4f}"),
    ("MFU", "mfu", lambda v: "—" if missing(v) else f"{v:.1%}"),
)


def numbers_table(records: list[dict], labels: list[str], colours: dict[str, str], fields: tuple[str, ...]) -> Table:
    """One row per arm of these records (one kind of evidence): the mean of each of `fields` (NUMBERS) over
    its seeds, and how many seeds; columns no arm has a value in are left out (MFU is unknown on CPU), and
    arms with none of them (microbenchmark items)."""
    rows = to_dataframe(records).assign(arm=labels, mfu=[r["throughput"].get("mfu") for r in records])
    rows[list(fields)] = rows[list(fields)].apply(pd.to_numeric, errors="coerce")
    means = rows.groupby("arm", sort=False)[list(fields)].mean()
    seeds = rows.groupby("arm", sort=False).size()
    shown = [(name, f, fmt) for name, f, fmt in NUMBERS if f in fields and means[f].notna().any()]
    spreads = repeat_spreads(records, labels) if "tokens_per_s" in fields else pd.Series(dtype=float)
    spread_column = ["tokens/s spread"] if not spreads.empty else []
    table = Table(["arm", "seeds", *(name for name, _, _ in shown), *spread_column], css="numbers")
    for arm, values in means.iterrows():
        if not values[[f for _, f, _ in shown]].notna().any():
            continue  # a microbenchmark item: its numbers are per shape, on its run page
        table.rows.append(
            [Cell(arm, arm, colour=colours.get(arm)), number(seeds[arm])]
            + [number(values[f], fmt) for _, f, fmt in shown]
            + ([spread_cell(spreads.get(arm))] if spread_column else [])
        )
    return table


def spread_cell(spread: float | None) -> Cell:
    """The seeds' tokens/s spread, flagged "unsteady" beyond the gate's tolerance (frames.REPEAT_TOLERANCE)."""
    if spread is None:
        return Cell("—")
    return Cell(f"{spread:.0%}", float(spread), badge="unsteady" if spread > REPEAT_TOLERANCE else None)


def throughput_table(ratios: pd.DataFrame, badge: str) -> Table:
    """One row per arm and configuration, by wall time and by CPU time; an arm's geometric means only where it
    ran several configurations."""
    columns = ["arm", "configuration", "tokens/s ratio (wall)", "CPU s/step ratio (reference's ÷ arm's)"]
    table = Table([*columns, "load (arm's / reference's)"])
    several = ratios.groupby("arm", sort=False)["config"].nunique()
    for _, row in ratios.iterrows():
        loads = f"{fmt_number(row['load'])} / {fmt_number(row['reference_load'])}"
        ratio, cpu_ratio = number(row["ratio"], badge=badge), number(row["cpu_ratio"])
        table.rows.append([text(row["arm"]), text(row["config"]), ratio, cpu_ratio, text(loads)])
    wall, cpu = geometric_means(ratios), geometric_means(ratios.dropna(subset=["cpu_ratio"]), "cpu_ratio")
    for arm, value in wall.items():
        if several.get(arm, 0) > 1:
            mean = [text(arm), text("geometric mean"), number(value, badge=badge), number(cpu.get(arm)), text("")]
            table.rows.append(mean)
    return table


ENV_FIELDS = ("torch", "device", "device_name", "backend", "world_size", "git_sha")


def env_table(records: list[dict]) -> Table:
    """Each distinct environment (torch, device, world size, git sha) and how many runs used it."""
    counts: dict[tuple, int] = {}
    for r in records:
        key = tuple(r["env"].get(k) for k in ENV_FIELDS)
        counts[key] = counts.get(key, 0) + 1
    table = Table(["torch", "device", "device name", "backend", "world size", "git sha", "runs"])
    for key, n in counts.items():
        table.rows.append(
            [
                text(key[0]),
                text(key[1]),
                text(key[2]),
                text(key[3]),
                number(key[4]),
                text(key[5][:12] if key[5] else None),
                number(n),
            ]
        )
    return table


def flatten(values: dict, prefix: str = "") -> dict:
    """Nested mappings as "outer.inner" rows; a list of numbers or words as one line, a list of mappings as one
    line per entry ("name=replicate size=1"): a run page shows no raw dict."""
    out: dict = {}
    for k, v in values.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict):
            out |= flatten(v, f"{name}.") if v else {name: "—"}
        elif isinstance(v, list):
            out[name] = "; ".join(_entry(item) for item in v) or "—"
        else:
            out[name] = v
    return out


def _entry(item: Any) -> str:
    if isinstance(item, dict):
        return " ".join(f"{k}={_entry(v)}" for k, v in item.items())
    if isinstance(item, list):
        return ",".join(_entry(v) for v in item)
    return fmt_number(item) if _numeric(item) or item is None else str(item)


def mapping_table(values: dict) -> Table:
    """Any mapping as field/value rows; nested values are shown as JSON."""
    rows = [[text(k), number(v) if _numeric(v) else text(v)] for k, v in values.items()]
    return Table(["field", "value"], rows)


def records_table(items: list[dict], columns: list[str], formats: dict[str, Callable] | None = None) -> Table:
    """A list of flat mappings (curve points, memory per rank, ledger ops) with chosen columns."""
    formats = formats or {}
    table = Table(columns)
    for item in items:
        table.rows.append(
            [
                number(item.get(c), formats.get(c, fmt_number))
                if c in formats or _numeric(item.get(c))
                else text(item.get(c))
                for c in columns
            ]
        )
    return table


def _numeric(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
