"""The report's figures: matplotlib Figures written as SVG with real text, inlined into the page.

Text stays text (svg.fonttype none), so figures are crisp at any width, searchable, and need no script
(the page's Content-Security-Policy allows none but its own). pyplot is never imported: each figure is a
plain Figure, so drawing needs no display and leaves no global state behind. Every function takes a
long-form frame from frames.py and returns a Chart, or None when there is nothing to draw. Arms keep one
colour across every figure of a page (arms.py). Labels come from records, so they are made safe for
matplotlib's mathtext ($) and legends (a leading _ hides an entry), and kept to LABEL_LIMIT characters.
"""

from __future__ import annotations

import io
import itertools
import re
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache

import matplotlib
import numpy as np
import pandas as pd
import seaborn as sns
from markupsafe import Markup, escape
from matplotlib.figure import Figure
from matplotlib.ticker import NullLocator

from suite.judge.trends import signed
from suite.report import frames
from suite.report.compact import compact

LABEL_LIMIT = 40  # characters of one text line in a figure; longer ones are wrapped or cut, never "…"
RC = {
    "svg.fonttype": "none",
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans", "Arial"],
    "svg.image_inline": True,
}
_ids = itertools.count()


def restart_ids() -> None:
    """Number the charts' SVG ids from 0 again: each build starts afresh, so a page reads the same whichever
    builds ran before it in this process (ids need only be unique within a page)."""
    global _ids
    _ids = itertools.count()


@dataclass(frozen=True)
class Chart:
    title: str
    svg: Markup  # an <svg> element with a <title> and role="img"
    caption: str = ""
    rows: int = 0  # bars drawn one above another: a page folds a figure of many (taller than a screen)


def safe(label: object, limit: int = LABEL_LIMIT) -> str:
    text = str(label)[:limit].rstrip()
    return text.replace("$", r"\$").lstrip("_") or "(unnamed)"


def wrap(label: str, width: int = LABEL_LIMIT) -> str:
    """A long label on several lines of at most `width` characters, for axis labels and notes."""
    lines, line = [], ""
    for word in str(label).split():
        while len(word) > width:
            lines, word = [*lines, *([line] if line else []), word[:width]], word[width:]
            line = ""
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return safe("\n".join([*lines, line]), 10 * width)


@contextmanager
def _style():
    with matplotlib.rc_context(RC), sns.axes_style("whitegrid"), sns.plotting_context("notebook", font_scale=0.85):
        yield


def figure(width: float, height: float, rows: int = 1, cols: int = 1, **kwargs) -> tuple[Figure, np.ndarray]:
    with _style():
        fig = Figure(figsize=(width, height))
        return fig, fig.subplots(rows, cols, squeeze=False, **kwargs)


def margins(fig: Figure, left: float = 0.6, bottom: float = 0.5, right: float = 0.15, top: float = 0.3, **kw) -> None:
    """Margins in inches. Set by hand: a layout engine would lay out every text twice per figure."""
    width, height = fig.get_size_inches()
    fig.subplots_adjust(left=left / width, right=1 - right / width, bottom=bottom / height, top=1 - top / height, **kw)


def text_inches(labels: list[str]) -> float:
    """About how wide the longest label is in the figures' type (about 0.075 inch a character)."""
    return 0.075 * max((len(line) for label in labels for line in str(label).split("\n")), default=0)


def encode(fig: Figure, title: str) -> Markup:
    """The figure as an inline <svg> that scales to its container, titled for screen readers."""
    buffer = io.StringIO()
    with _style(), matplotlib.rc_context({"svg.hashsalt": f"chart-{next(_ids)}"}):
        fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    svg = compact(buffer.getvalue())
    svg = svg[svg.index("<svg") :]
    svg = re.sub(r"<metadata>.*?</metadata>\s*", "", svg, count=1, flags=re.S)
    svg = re.sub(r'<svg ([^>]*?)width="[^"]*" height="[^"]*" ', r'<svg \1role="img" ', svg, count=1)
    head_end = svg.index(">") + 1
    return Markup(f"{svg[:head_end]}<title>{escape(title)}</title>{svg[head_end:]}")


def chart(fig: Figure, title: str, caption: str = "", rows: int = 0) -> Chart:
    return Chart(title, encode(fig, title), caption, rows)


# collective ops and group tiers keep one colour on every page; others get one from their name
CATEGORIES = {
    "all_reduce": "#4e79a7",
    "all_gather": "#f28e2b",
    "reduce_scatter": "#59a14f",
    "broadcast": "#b07aa1",
    "all_to_all": "#edc948",
    "send": "#9c755f",
    "recv": "#9c755f",
    "reduce": "#76b7b2",
    "intra-node": "#4e79a7",
    "inter-node": "#e15759",
    "intra-group": "#59a14f",
    "inter-group": "#f28e2b",
    "unlabelled": "#bab0ac",
}


def category_colour(name: str) -> str:
    if name in CATEGORIES:
        return CATEGORIES[name]
    palette = sns.color_palette("Set3", 12).as_hex()
    return palette[sum(name.encode()) % len(palette)]


@lru_cache(maxsize=1)  # asked once per part of every run page's memory figure
def _part_colours() -> dict[str, tuple]:
    """One colour per memory part in every figure, whichever parts a figure draws."""
    return dict(zip(frames.MEMORY_PARTS, sns.color_palette("Set2", len(frames.MEMORY_PARTS))))


def _legend_inches(entries: int) -> float:
    """The height a figure needs for a legend of this many entries beside its axes."""
    return 0.2 * entries + 0.75


def _byte_unit(largest: float) -> tuple[float, str]:
    for power, unit in ((4, "TiB"), (3, "GiB"), (2, "MiB"), (1, "KiB")):
        if largest >= 1024**power:
            return 1024.0**power, unit
    return 1.0, "bytes"


LOSS_AXES = (("tokens", "tokens"), ("flops", "FLOPs"), ("wall_s", "wall time (s)"))
ZOOM_PAD = 0.25  # the zoomed panels' margin around the arms' final losses, a fraction of their spread...
ZOOM_MIN_PAD = 0.04  # ...and at least this many nats, so arms that end alike still show their last stretch


def loss_curves(
    curve: pd.DataFrame,
    label: str,
    colours: dict[str, str],
    dashes: dict[str, str] | None = None,
    panels: dict[str, tuple[int, str]] | None = None,
) -> Chart | None:
    """Loss against tokens, FLOPs and wall time: mean over seeds with a min-max band, each arm in its colour and
    line style (arms.py); arms whose curves coincide exactly are named under the figure.

    A row per panel of at most frames.PANEL_LINES arms (`panels`: each arm's place and title, labels.Arm.panel;
    arms without one are cut into runs of that many): first the whole run against tokens, then the three axes zoomed to
    the arms' final losses (_zoom), where the differences the claims judge (hundredths of a nat) show.
    Validation loss where every arm has a curve of it, else training loss: one kind per figure keeps it cheap.
    """
    for y in ("val_loss", "train_loss"):
        bands = {x: frames.seed_band(curve, x, y) for x, _ in LOSS_AXES}
        if not bands["tokens"].empty and set(bands["tokens"]["arm"]) == set(curve["arm"]):
            break
    else:
        return None
    dashes = dashes or {}
    groups = _panel_groups(list(dict.fromkeys(curve["arm"])), panels or {})
    legend_width = 0.5 + text_inches([safe(a) for a in curve["arm"].unique()])
    # a row whose title takes more lines sits further from the row above, whose axis labels its title would cover
    gap = LOSS_GAP + TITLE_LINE * max((wrap(title).count("\n") for title in list(groups)[1:]), default=0)
    height = len(groups) * LOSS_ROW + (len(groups) - 1) * gap + 0.9
    fig, axes = figure(11.6 + legend_width, height, len(groups), 4, gridspec_kw={"width_ratios": (0.7, 1, 1, 1)})
    finals = bands["tokens"].groupby("arm", sort=False)["mean"].last()
    for row, (title, arms) in zip(axes, groups.items()):
        whole, *zoomed = row
        low, high = _zoom(finals.reindex(arms))
        for ax, (x, x_label) in zip(row, (LOSS_AXES[0], *LOSS_AXES)):
            _loss_lines(ax, bands[x], arms, colours, dashes)
            ax.set_xlabel(x_label)
            ax.xaxis.get_offset_text().set_fontsize("small")
        for ax in zoomed:
            ax.set_ylim(low, high)
            ax.tick_params(labelleft=ax is zoomed[0])
        whole.axhspan(low, high, color="#dadce0", alpha=0.7, linewidth=0, zorder=0)
        whole.set_ylabel(y.replace("_", " "))
        whole.set_title("whole run", loc="left", fontsize="small")
        _panel_title(zoomed[0], title)
        zoomed[-1].legend(
            *zoomed[0].get_legend_handles_labels(),
            loc="center left",
            bbox_to_anchor=(1.03, 0.5),
            fontsize="small",
            frameon=False,
        )
    margins(fig, left=0.65, bottom=0.55, right=legend_width, top=0.35, wspace=0.2, hspace=gap / LOSS_ROW)
    caption = (
        f"A row per panel of at most {frames.PANEL_LINES} arms, grouped by task, plan run, model and method and "
        "titled by what they share. Left: the whole run; grey: the range the other three zoom into, from just below "
        "the lowest final loss to just above the highest, so that a few hundredths of a nat show. Line: mean over "
        "seeds; band: lowest to highest seed; marker: the arm, as in the legend (so the arms read without colour)."
    )
    caption += _coincide_note(frames.coinciding(curve, y))
    return chart(fig, f"{y.replace('_', ' ').capitalize()} against tokens, FLOPs and wall time ({label})", caption)


LOSS_ROW = 1.55  # inches of one row of loss panels...
LOSS_GAP = 0.75  # ...and between two rows: the first row's tick and axis labels and the next row's titles
TITLE_LINE = 0.15  # inches of one more line of a panel's title (small type)


def _panel_title(ax, title: str) -> None:
    """A small multiple's title (frames.panels); none where one panel holds every arm (its title is "")."""
    if title:
        ax.set_title(wrap(title), loc="left", fontsize="small", weight="bold")


def _panel_groups(arms: list[str], panels: dict[str, tuple[int, str]]) -> dict[str, list[str]]:
    """The arms (in the page's order) by panel (labels.Arm.panel: its place and title), a panel over
    frames.PANEL_LINES arms cut into runs of that many."""
    placed: dict[tuple[int, str], list[str]] = {}
    for arm in arms:
        placed.setdefault(panels.get(arm, (0, "")), []).append(arm)
    out = {}
    for (_, title), members in sorted(placed.items(), key=lambda item: item[0][0]):
        runs = [members[i : i + frames.PANEL_LINES] for i in range(0, len(members), frames.PANEL_LINES)]
        for n, run in enumerate(runs, 1):
            out[f"{title} ({n} of {len(runs)})".strip() if len(runs) > 1 else title] = run
    return out


def _zoom(finals: pd.Series) -> tuple[float, float]:
    """The loss range the zoomed panels show: the arms' final losses with a margin around them."""
    low, high = float(finals.min()), float(finals.max())
    pad = max(ZOOM_PAD * (high - low), ZOOM_MIN_PAD)
    return low - pad, high + pad


def _loss_lines(ax, bands: pd.DataFrame, arms: list[str], colours: dict[str, str], dashes: dict[str, str]) -> None:
    """Each arm's mean line and seed band, a marker of its own in the panel; a note where none has this axis (an
    emulated run counts no FLOPs)."""
    drawn = bands[bands["arm"].isin(arms)]
    if drawn.empty:
        ax.text(0.5, 0.5, "not recorded", transform=ax.transAxes, ha="center", va="center", color="#7d7d7d")
        ax.set_xticks([])
    for arm, band in drawn.groupby("arm", sort=False):
        i = arms.index(arm)
        ax.plot(
            band["x"],
            band["mean"],
            color=colours[arm],
            label=safe(arm),
            linewidth=1.6,
            linestyle=dashes.get(arm, "solid"),
            **_marked(ARM_MARKERS[i % len(ARM_MARKERS)], len(band), i, len(arms)),
        )
        ax.fill_between(band["x"], band["low"], band["high"], color=colours[arm], alpha=0.2, linewidth=0)


def lr_sweep(points: pd.DataFrame) -> Chart | None:
    """Final validation loss against the learning rate (log scale), a line per swept arm, its winner ringed;
    diverged runs drawn as crosses on the top edge. A panel per frames.lr_sweep panel (by task, plan run, model and
    method, at most frames.PANEL_LINES arms), two side by side, each with its legend in the page's order. A swept arm
    is the page's arms without their rate, so it takes a colour of its own (matplotlib's cycle), not one of the page's
    arms', and a marker of its own in its panel; the axis is ticked at the rates swept, as plain numbers."""
    if points.empty:
        return None
    panels, top = list(dict.fromkeys(points["panel"])), float(points["val_loss"].max())
    cols = min(2, len(panels))
    grid_rows = -(-len(panels) // cols)
    legend_width = 0.4 + text_inches([safe(a) for a in points["arm"].unique()])
    panel_width = 5.5 if cols == 1 else 3.6
    fig, axes = figure(
        cols * (panel_width + legend_width) + 0.6,
        grid_rows * SWEEP_ROW + (grid_rows - 1) * SWEEP_GAP + 0.95,
        grid_rows,
        cols,
    )
    margins(
        fig,
        left=0.75,
        bottom=0.6,
        right=legend_width,
        top=0.35,
        wspace=(legend_width + 0.75) / panel_width,
        hspace=SWEEP_GAP / SWEEP_ROW,
    )
    for ax, panel in zip(axes.flat, panels):
        mine = points[points["panel"] == panel]
        _sweep_lines(ax, mine, float(mine["val_loss"].max() if mine["val_loss"].notna().any() else top))
        _panel_title(ax, panel)
        ax.legend(loc="center left", bbox_to_anchor=(1.02, 0.5), fontsize="small", frameon=False)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("final validation loss")
    refusal = points["refusal"].iloc[0]
    caption = "One run per rate on one seed (a sweep, filed apart so that no verdict counts it). "
    caption += (
        f"suite.judge.sweeps picks no winner: {refusal}."
        if refusal
        else "Ring: each arm's winner by suite.judge.sweeps' rule."
    )
    if len(panels) > 1:
        caption += f" A panel per task, plan run, model or method, at most {frames.PANEL_LINES} arms each."
    return chart(fig, "Final validation loss against the learning rate (the sweep)", caption)


SWEEP_ROW = 2.6  # inches of one row of sweep panels...
SWEEP_GAP = 0.85  # ...and between two rows: the rates, the axis label and the next row's titles


def _sweep_lines(ax, points: pd.DataFrame, top: float) -> None:
    """One panel of the sweep: each arm's line in the panel's own colour and marker, its diverged runs on `top`."""
    for i, (arm, rows) in enumerate(points.groupby("arm", sort=False)):
        colour = f"C{i}"
        done = rows.dropna(subset=["val_loss"])
        ax.plot(done["lr"], done["val_loss"], color=colour, label=safe(arm), linewidth=1.6, marker=ARM_MARKERS[i])
        diverged = rows["val_loss"].isna()
        ax.scatter(rows.loc[diverged, "lr"], [top] * int(diverged.sum()), marker="x", color=colour)
        won = done[done["lr"] == done["winner"]]
        ax.scatter(won["lr"], won["val_loss"], s=160, facecolors="none", edgecolors=colour, linewidths=1.6)
    ax.set_xscale("log")
    rates = sorted(points["lr"].unique())
    ax.set_xlim(rates[0] / SWEEP_MARGIN, rates[-1] * SWEEP_MARGIN)
    ticks = _spaced(rates, ax.get_position().width * ax.figure.get_figwidth())
    ax.set_xticks(ticks, [f"{t:.2g}" for t in ticks])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel(" / ".join(RATE_LABELS[r] for r in dict.fromkeys(points["rate"])))


SWEEP_MARGIN = 1.4  # the sweep's axis reaches this factor beyond its lowest and highest rate
RATE_LABELS = {"lr": "learning rate", "outer_lr": "outer learning rate"}  # suite.judge.sweeps.RATES on the axis


def _spaced(rates: list[float], inches: float) -> list[float]:
    """The rates whose labels fit side by side on a log axis `inches` wide (each keeps clear of the last one kept)."""
    span = np.log10(rates[-1] * SWEEP_MARGIN) - np.log10(rates[0] / SWEEP_MARGIN)
    kept: list[float] = []
    for rate in rates:
        room = (len(f"{rate:.2g}") + len(f"{kept[-1]:.2g}")) / 2 * 0.075 + 0.15 if kept else 0.0
        if not kept or (np.log10(rate) - np.log10(kept[-1])) / span * inches >= room:
            kept.append(rate)
    return kept


# a marker per arm in the loss curves: a second channel beside colour, so arms read in greyscale too
ARM_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")


def _marked(marker: str, points: int, index: int, arms: int) -> dict:
    """About five markers along a line, each arm's shifted along it, so coinciding lines still show every
    arm's marker."""
    step = max(1, points // 5)
    return {"marker": marker, "markersize": 5, "markevery": (index * step // max(arms, 1), step)}


def _coincide_note(groups: list[list[str]]) -> str:
    """The arms drawn on top of each other, said in words (a line hidden under another is invisible)."""
    if not groups:
        return ""
    said = "; ".join(" and ".join(group) for group in groups)
    return f" Coinciding exactly (the same loss at every step, so one line hides the others): {said}."


def memory_bars(memory: pd.DataFrame, label: str, merge: bool = False) -> Chart | None:
    """Per arm, the largest rank's peak memory as stacked parts; a whisker from the smallest rank's peak to it.
    With `merge` (estimates: no seed noise), arms alike in every part are one bar."""
    if memory.empty:
        return None
    parts = [p for p in frames.MEMORY_PARTS if memory[p].sum() > 0]
    groups = alike(memory.set_index("arm")[[*parts, "peak", "peak_low"]], ALIKE if merge else -1)
    memory = memory.set_index("arm").loc[[g[0] for g in groups]].reset_index()
    memory["arm"] = group_labels(groups)
    divisor, unit = _byte_unit(float(memory["peak"].max()))
    names = [safe(a) for a in memory["arm"]]
    fig, axes = figure(11, max(0.32 * len(names) + 1.2, _legend_inches(len(parts) + 1)))
    ax, left = axes[0, 0], np.zeros(len(memory))
    rows = np.arange(len(names))
    for part in parts:
        colour = _part_colours()[part]
        widths = memory[part].to_numpy(float) / divisor
        ax.barh(rows, widths, left=left, color=colour, label=part, height=0.7)
        left += widths
    spread = memory["ranks"] > 1
    ax.errorbar(
        memory["peak"][spread] / divisor,
        rows[spread],
        xerr=[(memory["peak"] - memory["peak_low"])[spread] / divisor, np.zeros(int(spread.sum()))],
        fmt="none",
        ecolor="#333333",
        capsize=3,
        linewidth=1,
        label="smallest rank's peak",
    )
    ax.set_yticks(rows, names)
    ax.invert_yaxis()
    ax.set_xlabel(f"peak per rank ({unit})")
    ax.legend(fontsize="small", loc="lower left", bbox_to_anchor=(1.0, 0.0), frameon=False)
    margins(fig, left=0.3 + text_inches(names), bottom=0.5, right=1.8, top=0.15)
    return chart(
        fig,
        f"Peak memory per rank, largest rank ({label})",
        "Bar: the rank with the largest peak, by part, mean over seeds; whisker: down to the smallest rank's "
        "peak. Every rank is on the run pages." + _alike_note(groups),
        len(names),
    )


def memory_per_rank(per_rank: list[dict], label: str) -> Chart | None:
    """One run's memory, every rank, stacked by part (run pages).

    Written as SVG markup directly, not through matplotlib: a site has a run page per record (a thousand
    in the report benchmark), and a matplotlib figure each would cost a tenth of a second apiece.
    """
    if not per_rank:
        return None
    parts = [p for p in frames.MEMORY_PARTS if any(m.get(p) for m in per_rank)]
    if not parts:
        return None
    totals = [sum(m.get(p) or 0 for p in parts) for m in per_rank]
    divisor, unit = _byte_unit(float(max(totals)))
    colours = {p: "#{:02x}{:02x}{:02x}".format(*(round(255 * c) for c in _part_colours()[p])) for p in parts}
    left, row, top = 70, 18, 34
    width, bar = 1000, 1000 - left - 90  # 90: room for the total after the longest bar
    height = top + row * len(per_rank) + 8
    scale = bar / (max(totals) or 1)
    out = []
    x = left
    for p in parts:  # the legend, one swatch and name per part
        out.append(f'<rect x="{x}" y="8" width="10" height="10" fill="{colours[p]}"/>')
        out.append(f'<text x="{x + 14}" y="17" font-size="11">{escape(p)}</text>')
        x += 24 + 7 * len(p)
    for i, (m, total) in enumerate(zip(per_rank, totals)):
        y, x = top + i * row, float(left)
        out.append(f'<text x="{left - 6}" y="{y + 12}" font-size="11" text-anchor="end">rank {m["rank"]}</text>')
        for p in parts:
            w = (m.get(p) or 0) * scale
            out.append(f'<rect x="{x:.1f}" y="{y + 2}" width="{w:.1f}" height="{row - 5}" fill="{colours[p]}"/>')
            x += w
        out.append(f'<text x="{x + 5:.1f}" y="{y + 12}" font-size="11">{total / divisor:.3g} {unit}</text>')
    title = f"Memory of every rank ({label})"
    svg = (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" role="img" '
        f'font-family="DejaVu Sans, Arial, sans-serif"><title>{escape(title)}</title>{"".join(out)}</svg>'
    )
    return Chart(title, Markup(svg), "Stacked by part at the measured step; the numbers are in the table below.")


ALIKE = 0.01  # bars whose every value is within this fraction of another arm's are drawn once


def alike(values: pd.DataFrame, tolerance: float = ALIKE) -> list[list[str]]:
    """The rows (arms, in order) in groups whose every column is within `tolerance` of the group's first row's
    (a negative one keeps every row apart): a page of sixty estimates that differ only in a setting these
    numbers do not depend on draws a bar per group."""
    groups: list[list[str]] = []
    table = values.to_numpy(float)
    firsts: list[int] = []
    for i, arm in enumerate(values.index):
        for group, first in zip(groups, firsts):
            scale = np.maximum(np.abs(table[first]), np.abs(table[i]))
            if np.all(np.abs(table[i] - table[first]) <= tolerance * scale):
                group.append(arm)
                break
        else:
            groups.append([arm])
            firsts.append(i)
    return groups


def group_labels(groups: list[list[str]]) -> list[str]:
    """A group's label: the words its arms' labels share, and how many arms it stands for."""
    out: list[str] = []
    singles = {group[0] for group in groups if len(group) == 1}
    for n, group in enumerate(groups, 1):
        if len(group) == 1:
            out.append(group[0])
            continue
        common = " ".join(w for w in group[0].split() if all(w in other.split() for other in group[1:]))
        suffix = f" ({len(group)} alike)"
        label = f"{(common or group[0])[: LABEL_LIMIT - len(suffix) - 4].rstrip()}{suffix}"
        out.append(f"{label} #{n}" if label in out or label in singles else label)  # a label names one bar
    return out


def _alike_note(groups: list[list[str]]) -> str:
    """The arms drawn as one bar, named: a group's label gives only the words they share."""
    merged = [g for g in groups if len(g) > 1]
    if not merged:
        return ""
    said = "; ".join(f"{label}: {', '.join(g)}" for g, label in zip(merged, group_labels(merged)))
    return f" Arms within {ALIKE:.0%} of each other in every value drawn are one bar: {said}."


def comm_bytes(comm: pd.DataFrame, label: str, merge: bool = False) -> Chart | None:
    """Payload bytes per step per rank, stacked by collective op and by group tier. With `merge` (estimates),
    arms alike in every op and tier are one bar."""
    if comm.empty:
        return None
    wide = comm.pivot_table(index="arm", columns=["op", "tier"], values="bytes_per_step", aggfunc="sum", sort=False)
    groups = alike(wide.reindex(list(dict.fromkeys(comm["arm"]))).fillna(0), ALIKE if merge else -1)
    drawn = group_labels(groups)
    comm = comm[comm["arm"].isin([g[0] for g in groups])]
    comm = comm.assign(arm=comm["arm"].map({g[0]: label for g, label in zip(groups, drawn)}))
    arms = drawn
    names = [safe(a) for a in arms]
    divisor, unit = _byte_unit(float(comm.groupby("arm")["bytes_per_step"].sum().max()))
    entries = max(comm["op"].nunique(), comm["tier"].nunique())
    legend_rows = -(-entries // 3)
    top = 0.35 + 0.22 * legend_rows
    fig, axes = figure(11, 0.32 * len(arms) + 0.9 + top, 1, 2, sharey=True)
    for ax, key in zip(axes[0], ("op", "tier")):
        table = comm.pivot_table(index="arm", columns=key, values="bytes_per_step", aggfunc="sum", sort=False)
        table = table.reindex(arms).fillna(0) / divisor
        table.index = names
        colours = [category_colour(c) for c in table.columns]
        table.columns = [safe(c, 24) for c in table.columns]
        table.plot.barh(stacked=True, ax=ax, color=colours, width=0.7)
        ax.set_xlabel(f"{unit} per step per rank")
        ax.set_ylabel("")
        ax.legend(
            title=f"by {key}",
            fontsize="small",
            loc="lower left",
            bbox_to_anchor=(0.0, 1.0),
            ncol=3,
            frameon=False,
            alignment="left",
        )
    axes[0, 0].invert_yaxis()
    margins(fig, left=0.3 + text_inches(names), bottom=0.5, top=top, wspace=0.05)
    return chart(
        fig,
        f"Bytes per step by op and by group tier ({label})",
        "Payload bytes, mean over ranks and seeds; wire bytes are on the run pages." + _alike_note(groups),
        len(names),
    )


def throughput(
    ratios: pd.DataFrame, reference: str, label: str, colours: dict, unsteady: pd.Series | None = None
) -> Chart | None:
    """Speed over the reference baseline's by wall time (tokens/s) and, beside it, by CPU time per step: a bar
    per arm (geometric mean over its configurations, if several), a dot per configuration. Arms whose repeats
    differ in tokens/s beyond frames.REPEAT_TOLERANCE (`unsteady`) are hatched: their wall ratio is load."""
    if ratios.empty:
        return None
    unsteady = unsteady if unsteady is not None else pd.Series(dtype=float)
    panels = (
        ("ratio", f"tokens/s ÷ {safe(reference, 20)}'s"),
        ("cpu_ratio", f"{safe(reference, 16)}'s CPU s/step ÷ arm's"),
    )
    arms = list(frames.geometric_means(ratios).index)
    names = [safe(a) for a in arms]
    fig, axes = figure(11, 0.32 * len(arms) + 1.5, 1, 2, sharey=True)
    several = ratios.groupby("arm")["config"].nunique().max() > 1
    for ax, (column, x_label) in zip(axes[0], panels):
        means = frames.geometric_means(ratios.dropna(subset=[column]), column).reindex(arms)
        bars = ax.barh(range(len(arms)), means.fillna(0).to_numpy(float), color=[colours[a] for a in arms], height=0.6)
        for bar, arm in zip(bars, arms):
            if arm in unsteady.index:
                bar.set_hatch("///")
                bar.set_edgecolor("#1b1f24")
        if several:
            rows = {a: i for i, a in enumerate(arms)}
            ax.scatter(ratios[column], ratios["arm"].map(rows), color="black", s=14, zorder=3)
        _value_labels(ax, means, ratios.groupby("arm")[column].max().reindex(arms))
        ax.axvline(1.0, color="#555555", linestyle="--", linewidth=1)
        ax.set_xlabel(x_label)
    axes[0, 0].set_yticks(range(len(arms)), names)
    axes[0, 0].invert_yaxis()
    axes[0, 0].set_title("by wall time", loc="left", fontsize="small")
    axes[0, 1].set_title("by CPU time", loc="left", fontsize="small")
    margins(fig, left=0.3 + text_inches(names), bottom=0.55, right=0.3, top=0.35, wspace=0.08)
    return chart(fig, f"Speed against {safe(reference, 24)} ({label})", _throughput_caption(several, unsteady))


def _value_labels(ax, means: pd.Series, reach: pd.Series) -> None:
    """Each bar's value written after it (past its dots): the bars read without their colours."""
    ends = pd.concat([means, reach], axis=1).max(axis=1).fillna(0)
    for row, (mean, end) in enumerate(zip(means, ends)):
        if pd.notna(mean):
            ax.annotate(f"{mean:.2f}x", (end, row), xytext=(3, 0), textcoords="offset points", va="center", size=8)
    ax.set_xlim(0, max(float(ends.max()), 1.0) * 1.18)


def _throughput_caption(several: bool, unsteady: pd.Series) -> str:
    how = (
        "Bar: geometric mean over configurations; dot: one configuration (median over seeds)."
        if several
        else "Median over seeds; dashed line: the baseline."
    )
    caption = (
        f"Each arm against the baseline on the same model and ranks, above 1 is faster, its value written after "
        f"its bar. {how} Wall time counts "
        "the waiting of a shared machine; CPU time per step does not."
    )
    if unsteady.empty:
        return caption
    spread = ", ".join(f"{arm} {value:.0%}" for arm, value in unsteady.items())
    return (
        f"{caption} Warning, hatched: the seeds of {spread} differ in tokens/s by more than "
        f"{frames.REPEAT_TOLERANCE:.0%} (the throughput gate's tolerance), so their wall-time ratio is machine load."
    )


@dataclass(frozen=True)
class Sweep:
    """One baseline's value at every swept setting, against the paper's number for it and the band."""

    baseline: str
    paper: float
    within: float
    points: tuple[tuple[str, float, bool], ...]  # (setting, value, whether every jointly calibrated arm fits)
    quantity: str = "peak per device"  # what is calibrated, as the axis names it


def calibration_sweep(sweeps: list[Sweep], cards: list[str]) -> Chart | None:
    """A paper table's calibration (`calibrate` with `jointly`): a panel per baseline over the same settings,
    drawn once for the cards of that table, which are judged at one setting. Bytes in GB (10^9), the unit the
    paper's table prints."""
    sweeps = [s for s in sweeps if s.points]
    if not sweeps:
        return None
    settings = list(dict.fromkeys(setting for s in sweeps for setting, _, _ in s.points))
    labels = [wrap(setting.replace("model=", ""), 24) for setting in settings]
    lines = sum(label.count("\n") + 1 for label in labels)
    # the tick labels and every line of the longest axis label
    below = 0.4 + 0.15 * max(_sweep_label(s).count("\n") + 1 for s in sweeps)
    fig, axes = figure(
        2.2 + 3.2 * len(sweeps), 0.35 + below + 0.2 * lines + 0.1 * len(settings), 1, len(sweeps), sharey=True
    )
    for ax, sweep in zip(axes[0], sweeps):
        _sweep_panel(ax, sweep, settings)
    axes[0, 0].set_yticks(range(len(settings)), labels)
    axes[0, 0].invert_yaxis()
    margins(fig, left=0.3 + text_inches(labels), bottom=below, top=0.15, right=0.25, wspace=0.15)
    caption = (
        f"{sweep_finding(sweeps).split(': ', 1)[1]} (green); the paper's value and ±{sweeps[0].within:.0%} in "
        f"orange. One sweep for the cards {', '.join(cards)}: one setting for the whole table."
    )
    return chart(fig, f"Calibration of {' and '.join(s.baseline for s in sweeps)}", caption)


def sweep_finding(sweeps: list[Sweep]) -> str:
    """A calibration in one sentence: how many of the swept settings put every baseline in the paper's band."""
    sweeps = [s for s in sweeps if s.points]
    settings = {setting for s in sweeps for setting, _, _ in s.points}
    fits = sum(f for _, _, f in sweeps[0].points) if sweeps else 0
    within = f"{sweeps[0].within:.0%}" if sweeps else "the band"
    return (
        f"Calibration of {' and '.join(s.baseline for s in sweeps)}: {fits} of {len(settings)} settings put every "
        f"baseline within {within} of the paper's value"
    )


def _sweep_panel(ax, sweep: Sweep, settings: list[str]) -> None:
    values = {setting: (value, fits) for setting, value, fits in sweep.points}
    rows = [i for i, setting in enumerate(settings) if setting in values]
    scale = 1e9
    ax.barh(
        rows,
        [values[settings[i]][0] / scale for i in rows],
        color=["#137333" if values[settings[i]][1] else "#9aa0a6" for i in rows],
    )
    low, high = sweep.paper * (1 - sweep.within), sweep.paper * (1 + sweep.within)
    ax.axvspan(low / scale, high / scale, color="#fbbc04", alpha=0.3)
    ax.axvline(sweep.paper / scale, color="#b06000", linewidth=1.5)
    ax.set_xlabel(_sweep_label(sweep))


def _sweep_label(sweep: Sweep) -> str:
    return wrap(f"{sweep.baseline} {sweep.quantity} (GB)", 30)


def _ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About `count` round values spanning [low, high] (1, 2 or 5 times a power of ten apart)."""
    if not high > low:
        return [low]
    raw = (high - low) / count
    power = 10 ** np.floor(np.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = np.ceil(low / step) * step
    return [float(v) for v in np.arange(first, high + step * 1e-9, step)]


RUN_LINES = {"train_loss": ("training loss", "#3b6ea5"), "val_loss": ("validation loss", "#d9822b")}


def run_losses(curve: list[dict], label: str) -> Chart | None:
    """One run's training and validation loss against step (run pages).

    SVG markup written directly, as memory_per_rank: a site has a run page per record."""
    lines = {y: [(p["step"], p[y]) for p in curve if p.get(y) is not None and np.isfinite(p[y])] for y in RUN_LINES}
    lines = {y: points for y, points in lines.items() if points}
    if not lines:
        return None
    xs = [x for points in lines.values() for x, _ in points]
    ys = [y for points in lines.values() for _, y in points]
    x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    pad = 0.05 * (max(ys) - min(ys) or 1.0)
    y0, y1 = min(ys) - pad, max(ys) + pad
    left, top, width, height = 60, 30, 900, 260

    def sx(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * width

    def sy(y: float) -> float:
        return top + (y1 - y) / (y1 - y0) * height

    out = [f'<rect x="{left}" y="{top}" width="{width}" height="{height}" fill="none" stroke="#d0d7de"/>']
    for t in _ticks(y0, y1):
        out.append(f'<line x1="{left}" x2="{left + width}" y1="{sy(t):.1f}" y2="{sy(t):.1f}" stroke="#eef1f4"/>')
        out.append(f'<text x="{left - 6}" y="{sy(t) + 4:.1f}" font-size="11" text-anchor="end">{t:.4g}</text>')
    for t in _ticks(x0, x1):
        out.append(f'<text x="{sx(t):.1f}" y="{top + height + 16}" font-size="11" text-anchor="middle">{t:,.0f}</text>')
    out.append(f'<text x="{left + width / 2}" y="{top + height + 34}" font-size="12" text-anchor="middle">step</text>')
    x = left
    for y, points in lines.items():
        name, colour = RUN_LINES[y]
        path = " ".join(f"{sx(a):.1f},{sy(b):.1f}" for a, b in points)
        out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="1.8"/>')
        if len(points) < 30:  # few points (validation every N steps): mark each
            out += [f'<circle cx="{sx(a):.1f}" cy="{sy(b):.1f}" r="2.5" fill="{colour}"/>' for a, b in points]
        out.append(f'<rect x="{x}" y="10" width="14" height="4" fill="{colour}"/>')
        out.append(f'<text x="{x + 18}" y="16" font-size="11">{name}</text>')
        x += 30 + 7 * len(name)
    title = f"Loss against step ({label})"
    svg = (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {left + width + 20} {top + height + 44}" role="img" '
        f'font-family="DejaVu Sans, Arial, sans-serif"><title>{escape(title)}</title>{"".join(out)}</svg>'
    )
    return Chart(title, Markup(svg), "Every recorded point; the numbers are in the run's record, below.")


def trend(found: dict, unit: str) -> Chart | None:
    """A card's trend finding (suite/judge/trends.py trend_of's data): the method's advantage at each point of the
    axis with its 95% interval, the fitted line over the points, and the paper's setting marked at the right edge,
    with the extrapolated projection there where one was drawn. None where there is no finding."""
    if not found or not found.get("word"):
        return None
    effects, paper, projection = found["effects"], found["paper"], found["projection"]
    xs = np.array([e["x"] for e in effects])
    fig, axes = figure(4.6, 2.3)
    ax = axes[0, 0]
    ax.set_xscale("log", base=2)
    ax.axhline(0, color="#5f6368", linewidth=0.8)
    ax.errorbar(
        xs,
        [e["value"] for e in effects],
        yerr=[[e["value"] - e["low"] for e in effects], [e["high"] - e["value"] for e in effects]],
        fmt="o",
        color="#1a73e8",
        capsize=3,
        label="measured (95% interval over seeds)",
    )
    span = np.array([xs.min(), xs.max()] if projection is None else [xs.min(), projection["x"]])
    line = found["intercept"] + found["slope"] * np.log2(span)
    ax.plot(span, line, color="#1a73e8", linestyle="-" if projection is None else "--", linewidth=1)
    if projection is not None:
        ax.errorbar(
            [projection["x"]],
            [projection["value"]],
            yerr=[[projection["value"] - projection["low"]], [projection["high"] - projection["value"]]],
            fmt="o",
            mfc="white",
            color="#1a73e8",
            capsize=3,
            label="extrapolated, not a verdict",
        )
    if paper is not None:
        ax.axvline(paper, color="#b06000", linestyle=":", linewidth=1.5)
        ax.annotate(f"paper: {paper:g}", (paper, 1), xycoords=("data", "axes fraction"), ha="right", va="top",
                    fontsize="small", color="#b06000", xytext=(-3, -2), textcoords="offset points")  # fmt: skip
    marked = [] if paper is None else [paper]
    ax.set_xlim(xs.min() / 1.5, max([xs.max(), *marked]) * 1.5)
    ticks = sorted({*xs.tolist(), *marked})
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.minorticks_off()
    axis = found["axis"].replace("_", " ")
    ax.set_xlabel(axis)
    ax.set_ylabel("advantage")
    ax.legend(fontsize="x-small", loc="best")
    margins(fig, left=0.85, bottom=0.45, top=0.1)
    caption = (
        f"The method's advantage over the baseline in {unit} (positive: the method ahead) at each point; "
        f"{found['word']}, slope {signed(found['slope'])} a doubling. "
        + ("The dotted line is the paper's setting." if paper is not None else "The paper's setting is not known.")
    )
    return chart(fig, f"The method's advantage along {axis}", caption)
