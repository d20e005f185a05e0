"""Claims at a glance: every claim of a reproduction in one view, and each card's figure of its runs.

Ratio claims share one log axis, its numbers repeated every GLANCE_ROWS rows: the paper's value (a black
tick) inside its band (grey), our value with what was judged against the band (the seeds' interval or the range
over settings), and values shown beside the verdict (projections, other settings) in grey. Other claims
(quality, absolute values) get a small panel each, headed by the claim, its verdict and scale, with every seed
of the method and of the baseline; where a claim's numbers are rows of its records rather than fields of the
claim frame, its metric gives the seeds of both sides (a quality metric: the merge step's) or the verdict's
value alone (a microbenchmark's). The glance table beside the figures carries each claim's numbers as text
(pages.glance_rows). The marker tells measured (circle), estimated (diamond) and projected (simulated: triangle)
apart; the colour is the verdict, which is also written out. Seed values are read from the records the verdict
names (Verdict.run_ids), through suite.judge.verdicts.claim_frame.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter

import numpy as np
import pandas as pd
from matplotlib.font_manager import FontProperties
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter
from matplotlib.transforms import blended_transform_factory

from suite.judge.claims import Claim
from suite.judge.metrics import QUALITY, RATIOS, side
from suite.judge.verdicts import SMALL_SCALE, VERDICTS, Verdict, seed_samples
from suite.report.figures import Chart, chart, figure, margins, safe, text_inches, wrap

COLOURS = {
    "reproduced": "#137333",
    "matches the model": "#00796b",
    "exceeded": "#0b57d0",
    "fell short": "#c5221f",
    "inconclusive": "#b08800",
    "not testable here": "#80868b",
    "measured, no paper value": "#5b6fa8",
    "counted, no paper value": "#5b6fa8",
    "estimated, no paper value": "#5b6fa8",
    # a small-scale finding: its paper word's hue (SMALL_SCALE in suite/judge/verdicts.py), its words and scale
    # tell it apart
    "holds at small scale": "#137333",
    "does not hold at small scale": "#c5221f",
    "inconclusive at small scale": "#b08800",
}
MARKERS = {"measured": "o", "counted": "s", "estimated": "D", "projected": "^"}
SHOWN = "#7d7d7d"
VERDICT_WIDTH = text_inches(["estimated, no paper value"]) + 0.2


def kind(evidence: str | None) -> str:
    """measured, counted, estimated or projected (suite/sim's simulated records project time)."""
    if evidence is None or evidence.startswith("measured"):
        return "measured"
    if evidence == "counted":
        return "counted"
    return "projected" if evidence == "simulated" else "estimated"


def counts(verdicts: list[tuple[Claim, Verdict]]) -> list[tuple[str, list[tuple[str, int]]]]:
    """How many claims got each verdict word, in the order of VERDICTS, in three groups: the paper's claims judged
    in its regime (or not testable here), small-scale findings (titled with the scales they were found at), and the
    suite's own measurements and checks (no paper value, our formula). Empty groups and words are left out."""
    groups: dict[str, Counter] = {PAPER: Counter(), SMALL: Counter(), OWN: Counter()}
    scales: dict[str, None] = {}
    for _, v in verdicts:
        if v.small_scale:
            groups[SMALL][v.verdict] += 1
            scales.update(dict.fromkeys(v.at.split("; ")))
        else:
            groups[PAPER if v.verdict in PAPER_WORDS else OWN][v.verdict] += 1
    titles = {PAPER: PAPER, SMALL: f"{SMALL} ({'; '.join(scales)})", OWN: OWN}
    return [(titles[g], [(w, n[w]) for w in VERDICTS if n[w]]) for g, n in groups.items() if n]


PAPER = "the paper's claims, in its regime"
SMALL = "small-scale findings"
OWN = "the suite's own measurements and checks"
PAPER_WORDS = (*SMALL_SCALE, "not testable here")  # the words said of a paper's claim in its regime


def on_ratio_axis(claim: Claim) -> bool:
    """A ratio metric's claims, and a microbenchmark claim divided by its `over` side (flash-io's metric)."""
    return claim.metric.get("name") in RATIOS or bool(claim.metric.get("over"))


def _clauses(text: str) -> list[str]:
    """`text` split at "; " outside parentheses, each clause without its parenthesised asides (an aside is
    detail a card keeps: sources, what an estimate leaves out). Unbalanced parentheses keep the text whole."""
    clauses, current, depth = [], "", 0
    for i, ch in enumerate(text):
        depth += (ch == "(") - (ch == ")")
        if depth < 0:
            return [text]
        if depth == 0 and text.startswith("; ", i):
            clauses.append(current)
            current = ""
        elif depth == 0 and ch != ")" and not (ch == " " and text.startswith(" (", i)):
            current += ch
    if depth:
        return [text]
    return [c.strip() for c in [*clauses, current] if c.strip()]


def _cut(text: str, limit: int) -> str:
    """`text` in `limit` characters: cut at the last word that fits (or inside a word longer than that)."""
    if len(text) <= limit:
        return text
    space = text.rfind(" ", 0, limit - 1)
    return text[: space if space > 0 else limit - 2].rstrip(",;:") + " …"


def plain_words(statement: str, limit: int = 160) -> str:
    """The claim as the paper makes it: a statement's first clause ("...; here the count of ..." follows)."""
    return _cut(_first_clause(statement), limit)


def _first_clause(statement: str) -> str:
    depth = 0
    for i, ch in enumerate(statement):
        depth += (ch == "(") - (ch == ")")
        if depth == 0 and statement.startswith("; ", i):
            return statement[:i]
    return statement


def brief(reason: str, limit: int = 160) -> str:
    """A verdict's reason in one line: its clauses without asides, while they fit in `limit` characters, the
    first that does not cut where there is room for its start (why a value is not judged comes second: "...
    if judged here: ...; calibration: none of ..."); the direction ("lower is better") is left out, a glance
    row has a column for it."""
    kept: list[str] = []
    for clause in _clauses(reason):
        if clause in ("lower is better", "higher is better"):
            continue
        room = limit - len("; ".join(kept)) - 2 * bool(kept)
        if kept and len(clause) > room:
            kept += [_cut(clause, room)] if room >= 40 else []
            break
        kept.append(clause)
    return _cut("; ".join(kept), limit)


def _values(frame: pd.DataFrame, run_ids: tuple[str, ...], field: str | None) -> pd.DataFrame:
    """The rows of these runs with a finite `field` (seed values), or an empty frame."""
    if frame.empty or not field or field not in frame.columns or not run_ids:
        return pd.DataFrame(columns=["run_id", "method", "evidence", "value"])
    rows = frame[frame["run_id"].isin(run_ids)]
    values = pd.to_numeric(rows[field], errors="coerce")
    rows = rows.assign(value=values)[np.isfinite(values.to_numpy(dtype=float))]
    return rows


def _sides(claim: Claim, rows: pd.DataFrame) -> list[tuple[str, pd.Series]]:
    """Each side's label and seed values: the arm the claim names for it (two sides may share a method: ddp
    with Dion against ddp with AdamW), labelled by the method and what tells the sides apart."""
    m = claim.metric
    which = [False, True] if m.get("baseline") else [False]
    if rows.empty:
        return [(m["baseline" if b else "method"], rows["value"]) for b in which]
    sides = [side(rows, m, baseline=b) for b in which]
    configs = [json.loads(side["arm_config"].iloc[0]) if len(side) else {} for side in sides]
    return [(_side_label(config, configs), side["value"]) for config, side in zip(configs, sides)]


def _side_label(config: dict, configs: list[dict]) -> str:
    """The method, then the optimizer and the parameters that both sides have and set apart."""

    def differs(get) -> bool:
        return len({json.dumps(get(c), sort_keys=True) for c in configs}) > 1

    words = [config.get("method", "")]
    if differs(lambda c: c.get("optimizer")) or not differs(lambda c: c.get("method")):
        words.append(str(config.get("optimizer") or ""))
    variant = config.get("variant") or {}
    words += [
        f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
        for k, v in sorted(variant.items())
        if k != "optimizer"
        and all(k in (c.get("variant") or {}) for c in configs)
        and differs(lambda c, k=k: (c.get("variant") or {}).get(k))
    ]
    return " ".join(w for w in words if w)


def _has_panel(claim: Claim, verdict: Verdict, frame: pd.DataFrame) -> bool:
    """Claims off the ratio axis with seed values, or with only the verdict's value (a microbenchmark's
    numbers are rows of its record, not fields of the claim frame)."""
    if on_ratio_axis(claim):
        return False
    return verdict.measured is not None or not _values(frame, verdict.run_ids, claim.metric.get("field")).empty


def summary(verdicts: list[tuple[Claim, Verdict]], frame: pd.DataFrame) -> list[Chart]:
    """The ratio chart (every claim without a panel of its own) and the panels of the other claims."""
    rows = [(c, v) for c, v in verdicts if not _has_panel(c, v, frame)]
    panels = [(c, v) for c, v in verdicts if _has_panel(c, v, frame)]
    charts = [ratio_chart(rows), panel_chart(panels, frame)]
    return [c for c in charts if c is not None]


def _band(claim: Claim) -> tuple[float, float] | None:
    return claim.band_range or claim.paper_range  # no band: the paper's value alone


def _judged(verdict: Verdict) -> tuple[float, float] | None:
    if verdict.interval is not None:
        return verdict.interval
    if verdict.measured is not None and verdict.spread:
        return verdict.measured - verdict.spread, verdict.measured + verdict.spread
    return None


def own_word(verdict: Verdict) -> str:
    """A compound card's own half's word as the card's words read (at small scale where the card is); '' else."""
    if not verdict.own:
        return ""
    return SMALL_SCALE.get(verdict.own, verdict.own) if verdict.small_scale else verdict.own


def _verdict_text(ax, y: float, verdict: Verdict) -> None:
    """The word on the right of a row, "(compound)" after a compound card's (its word is its weakest half's, its
    marker its own half's colour); a small-scale finding has its scale on a second line beneath it."""
    where = blended_transform_factory(ax.transAxes, ax.transData)
    colour = COLOURS[verdict.verdict]
    word = f"{verdict.verdict} (compound)" if verdict.own else verdict.verdict
    if not verdict.small_scale:
        ax.text(1.01, y, word, transform=where, color=colour, va="center", fontsize="small", weight="bold")
        return
    for text, va, lift, style in ((word, "bottom", 1.5, "bold"), (verdict.at, "top", -1.5, "normal")):
        ax.annotate(
            text,
            (1.01, y),
            xycoords=where,
            xytext=(0, lift),  # points apart, so the two lines' boxes do not touch
            textcoords="offset points",
            color=colour,
            va=va,
            fontsize="small" if style == "bold" else "x-small",
            weight=style,
        )


def _verdict_width(verdicts: list[Verdict]) -> float:
    """The right margin the words (and scales) of `verdicts` need."""
    words = [f"{v.verdict} (compound)" for v in verdicts if v.own] + [v.at for v in verdicts if v.small_scale]
    return max(VERDICT_WIDTH, text_inches(words or [""]) + 0.2)


GLANCE_ROWS = 10  # claims between two copies of the ratio chart's x axis: a reader on row 30 reads it nearby


def ratio_chart(rows: list[tuple[Claim, Verdict]]) -> Chart | None:
    """Every claim without a panel of its own on one log axis, a row each. More than GLANCE_ROWS rows are cut into
    blocks of that many, each with the axis's numbers under it, the first with them above it too."""
    if not rows:
        return None
    ids = [safe(c.id) for c, _ in rows]
    blocks = [rows[i : i + GLANCE_ROWS] for i in range(0, len(rows), GLANCE_ROWS)]
    above = 0.25 if len(blocks) > 1 else 0.0  # the numbers above the first block
    gap = 0.4  # between two blocks: the numbers under the first
    fig, axes = figure(
        11,
        0.34 * len(rows) + 1.3 + above + gap * (len(blocks) - 1),
        len(blocks),
        1,
        sharex=True,
        gridspec_kw={"height_ratios": [len(block) for block in blocks]},
    )
    seen: list[float] = []
    ratio_rows = 0
    bounds = any(v.floor is not None for _, v in rows)
    for ax, block in zip(axes[:, 0], blocks):
        for y, (claim, verdict) in enumerate(block):
            values, counted = _ratio_row(ax, y, claim, verdict)
            seen += values
            ratio_rows += counted
        ax.set_yticks(range(len(block)), [safe(c.id) for c, _ in block])
        ax.set_ylim(len(block) - 0.5, -0.5)
        ax.grid(axis="y", visible=False)
        ax.tick_params(axis="x", labelbottom=True)
    for ax in axes[:, 0]:
        _log_limits(ax, seen)
    axes[0, 0].tick_params(axis="x", labeltop=len(blocks) > 1)
    axes[-1, 0].set_xlabel("method ÷ baseline (log scale)" if ratio_rows else "")
    axes[0, 0].legend(
        handles=_legend_handles(bounds),
        loc="lower left",
        bbox_to_anchor=(0.0, 1.0),
        borderaxespad=0.5 + above * 72 / 8.5,  # in font sizes: above the numbers over the first block
        ncol=4,
        frameon=False,
        fontsize="small",
    )
    margins(
        fig,
        left=0.3 + text_inches(ids),
        right=_verdict_width([v for _, v in rows]),
        bottom=0.55,
        top=0.65 + above,
        hspace=gap * len(blocks) / (0.34 * len(rows) + 0.1),
    )
    return chart(
        fig,
        "Claims at a glance: ratio claims and claims without runs here",
        "Black tick: the paper's value; grey bar: its band. Marker: our value (circle measured, diamond "
        "estimated); coloured line: what was judged against the band (the seeds' 95% interval or the range over "
        "settings). Hollow grey markers are shown beside the verdict, not judged (triangle: projected by "
        "suite/sim). Colour and the word on the right: the verdict; a compound card's word is its weakest half's, "
        "marked (compound); its marker has its own half's colour."
        + (" Lower bound: every seed of the method lies above it (none reached the target)." if bounds else ""),
    )


def _ratio_row(ax, y: int, claim: Claim, verdict: Verdict) -> tuple[list[float], bool]:
    """One claim's row at `y`: its band, paper value, our value and what was judged, values shown beside, or a note
    that there is none; the verdict on the right. Returns the values drawn and whether the row is on the axis."""
    colour = COLOURS[own_word(verdict) or verdict.verdict]  # a compound card's value is its own half's
    seen: list[float] = []
    band = _band(claim) if on_ratio_axis(claim) else None
    if band is not None and band[0] > 0:
        ax.barh(y, band[1] - band[0], left=band[0], height=0.6, color="#dadce0", zorder=1)
        for value in set(claim.paper_range):
            ax.plot([value, value], [y - 0.3, y + 0.3], color="black", linewidth=1.5, zorder=2)
        seen += list(band)
    drawn = on_ratio_axis(claim) and verdict.measured is not None and verdict.measured > 0
    if drawn:
        judged = _judged(verdict)
        if judged is not None and judged[0] > 0 and judged[1] > judged[0]:
            ax.plot(judged, [y, y], color=colour, linewidth=2.5, zorder=3)
            seen += list(judged)
        ax.scatter(
            verdict.measured,
            y,
            marker=MARKERS[kind(verdict.provenance)],
            s=55,
            color=colour,
            zorder=4,
            edgecolors="white",
            linewidths=0.8,
        )
        seen.append(verdict.measured)
    for shown in verdict.shown if on_ratio_axis(claim) else ():
        if shown.value > 0:
            ax.scatter(
                shown.value,
                y,
                marker=MARKERS[kind(shown.evidence)],
                s=40,
                facecolors="white",
                edgecolors=SHOWN,
                linewidths=1.3,
                zorder=3,
            )
            seen.append(shown.value)
            drawn = True
    if not drawn and on_ratio_axis(claim) and verdict.floor is not None and verdict.floor > 0:
        # a lower bound (suite/judge/verdicts.py, _beyond_floors): every seed lies to its right
        ax.scatter(verdict.floor, y, marker=">", s=70, color=colour, zorder=4, edgecolors="white", linewidths=0.8)
        seen.append(verdict.floor)
        drawn = True
    if not drawn:
        note = "no run here" if not verdict.run_ids else "no value on this axis"
        where = blended_transform_factory(ax.transAxes, ax.transData)
        ax.text(0.005, y, note, transform=where, va="center", fontsize="small", color=SHOWN, style="italic")
    _verdict_text(ax, y, verdict)
    return seen, band is not None or drawn


def _log_limits(ax, values: list[float]) -> None:
    values = [v for v in values if v > 0 and math.isfinite(v)]
    low, high = (min(values), max(values)) if values else (0.5, 2.0)
    low, high = min(low, 1.0), max(high, 1.0)
    ax.set_xscale("log")
    ax.set_xlim(low / 1.3, high * 1.3)
    ax.axvline(1.0, color="#999999", linewidth=0.8, linestyle=":", zorder=0)
    # plain numbers, not powers of ten: 1-2-5 steps, finer within a decade or two
    steps = (1, 1.5, 2, 3, 5, 7) if high / low < 30 else (1, 2, 5) if high / low < 1000 else (1,)
    decades = range(math.floor(math.log10(low / 1.3)), math.ceil(math.log10(high * 1.3)) + 1)
    ticks = [m * 10.0**d for d in decades for m in steps if low / 1.3 <= m * 10.0**d <= high * 1.3]
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.xaxis.set_minor_formatter("")


def _legend_handles(bounds: bool = False) -> list:
    def marker(shape: str, label: str, hollow: bool = False) -> Line2D:
        return Line2D(
            [],
            [],
            marker=shape,
            linestyle="",
            color="#3c4043",
            markerfacecolor="white" if hollow else "#3c4043",
            markeredgecolor=SHOWN if hollow else "#3c4043",
            label=label,
            markersize=7,
        )

    return [
        Line2D([], [], color="black", marker="|", linestyle="", markersize=12, label="paper's value"),
        Patch(color="#dadce0", label="paper's band"),
        marker(MARKERS["measured"], "measured"),
        marker(MARKERS["counted"], "counted"),
        marker(MARKERS["estimated"], "estimated"),
        marker(MARKERS["projected"], "projected (shown)", hollow=True),
        marker(MARKERS["measured"], "other setting (shown)", hollow=True),
        *([marker(">", "lower bound")] if bounds else []),
    ]


PANEL_INCHES = 0.7  # the height of one claim's panel (its two rows of seeds)


def panel_chart(panels: list[tuple[Claim, Verdict]], frame: pd.DataFrame) -> Chart | None:
    """A panel per claim: every seed of the method (verdict colour) and of the baseline (grey), their means; over
    each, the claim's id, its verdict and the scale it was found at, stacked (side by side they ran into each other)."""
    if not panels:
        return None
    cols = 1 if len(panels) == 1 else 2
    grid_rows = math.ceil(len(panels) / cols)
    lines = max(wrap(_unit_label(c)).count("\n") + 1 for c, _ in panels)
    above = max(_heading(None, c, v) for c, v in panels) / 72 + 0.05  # inches over each panel
    below = 0.4 + 0.17 * lines  # inches under each panel: its numbers and the axis label
    fig, axes = figure(
        11, above + grid_rows * PANEL_INCHES + (grid_rows - 1) * (above + below) + below, grid_rows, cols
    )
    labels: list[str] = []
    for ax, (claim, verdict) in zip(axes.flat, panels):
        labels += _panel(ax, claim, verdict, frame)
        _heading(ax, claim, verdict)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    gap = (text_inches(labels) + 0.3) / (11 / cols)  # room for the right panel's row labels
    margins(
        fig,
        left=0.3 + text_inches(labels),
        right=0.2,
        bottom=below,
        top=above,
        hspace=(above + below) / PANEL_INCHES,
        wspace=0.15 + gap,
    )
    return chart(
        fig,
        "Claims at a glance: quality and other claims, every seed",
        "Filled: the method's seeds (colour: the verdict); hollow grey: the baseline's; a vertical stroke marks "
        "each arm's mean; shaded: the test's margin around the baseline's mean, or the paper's band.",
    )


def _heading(ax, claim: Claim, verdict: Verdict) -> float:
    """Over the panel `ax`, from the top: the claim's id, its verdict, and the scale a small-scale finding was found
    at (wrapped to LABEL_LIMIT); their height in points (with ax None, only that)."""
    scale = verdict.word_at[len(verdict.verdict) :].strip()
    parts = (
        (wrap(scale) if scale else "", "x-small", "normal", COLOURS[verdict.verdict]),
        (verdict.verdict, "small", "bold", COLOURS[verdict.verdict]),
        (safe(claim.id), "small", "normal", "#262626"),
    )
    lift = 3.0
    for text, size, weight, colour in parts:
        if not text:
            continue
        if ax is not None:
            ax.annotate(text, (0, 1), xycoords="axes fraction", xytext=(0, lift), textcoords="offset points",
                        ha="left", va="bottom", fontsize=size, weight=weight, color=colour)  # fmt: skip
        lift += 1.25 * FontProperties(size=size).get_size_in_points() * (text.count("\n") + 1) + 1
    return lift


def _panel(ax, claim: Claim, verdict: Verdict, frame: pd.DataFrame) -> list[str]:
    rows = _values(frame, verdict.run_ids, claim.metric.get("field"))
    sides = _sides(claim, rows) if not rows.empty else metric_sides(claim, verdict, frame)
    arms = [(safe(label, 28), values) for label, values in sides]
    colour = COLOURS[verdict.verdict]
    for y, (_, values) in enumerate(arms):
        method_arm = y == 0
        ax.scatter(
            values,
            [y] * len(values),
            s=36,
            zorder=3,
            marker=MARKERS[kind(verdict.provenance)],
            facecolors=colour if method_arm else "white",
            edgecolors=colour if method_arm else SHOWN,
            linewidths=1.2,
        )
        if len(values):
            ax.plot([values.mean()] * 2, [y - 0.3, y + 0.3], color=colour if method_arm else SHOWN, linewidth=2)
    margin = claim.margin.value if claim.margin else None
    if len(arms) > 1 and len(arms[1][1]) and margin:
        centre = float(arms[1][1].mean())
        worse = 1 if claim.better == "lower" else -1
        span = (
            (centre - margin, centre + margin)
            if claim.test == "equivalence"
            else sorted((centre, centre + worse * margin))
        )
        ax.axvspan(*span, color="#dadce0", zorder=0)
    band = _band(claim)
    if band is not None and len(arms) == 1:
        ax.axvspan(*band, color="#dadce0", zorder=0)
    ax.set_yticks(range(len(arms)), [a for a, _ in arms])
    ax.set_ylim(len(arms) - 0.4, -0.6)
    ax.grid(axis="y", visible=False)
    ax.set_xlabel(wrap(_unit_label(claim)), fontsize="small")
    ax.tick_params(labelsize="small")
    ax.xaxis.get_offset_text().set_fontsize("small")
    return [a for a, _ in arms]


def metric_sides(claim: Claim, verdict: Verdict, frame: pd.DataFrame) -> list[tuple[str, pd.Series]]:
    """Where the claim's values are rows of its records, not fields of the frame: a quality metric's seeds of
    both sides as the metric gives them (the merge step's items), else the verdict's one value (a
    microbenchmark's number, module docstring)."""
    m = claim.metric
    used = frame[frame["run_id"].isin(verdict.run_ids)] if not frame.empty else frame
    if m["name"] in QUALITY and m.get("baseline") and not used.empty:
        samples = seed_samples(claim, used)
        if len(samples.values):
            return [(m["method"], pd.Series(samples.values)), (m["baseline"], pd.Series(samples.baseline))]
    return [(m.get("method", "ours"), pd.Series([verdict.measured]))]


def _unit_label(claim: Claim) -> str:
    return claim.unit or claim.metric.get("field", "")


def claim_runs(
    claim: Claim, verdict: Verdict, frame: pd.DataFrame, labels: dict[str, str], colours: dict[str, str]
) -> Chart | None:
    """A card's figure: the claim's field in every run it used (and the runs shown beside), one row per arm."""
    field = claim.metric.get("field")
    run_ids = tuple(dict.fromkeys([*verdict.run_ids, *(r for s in verdict.shown for r in s.run_ids)]))
    rows = _values(frame, run_ids, field)
    if rows.empty:
        return None
    rows = rows.assign(arm=[labels.get(r, m) for r, m in zip(rows["run_id"], rows["method"])])
    arms = list(dict.fromkeys(rows["arm"]))
    divisor, unit = _unit(field, float(rows["value"].abs().max()), decimal=in_gb(claim))
    xlabel = wrap(f"{field}{f' ({unit})' if unit else ''}")
    below = 0.35 + 0.15 * (xlabel.count("\n") + 1)  # the tick labels and every line of the axis label
    fig, axes = figure(5.2, 0.3 * len(arms) + 0.45 + below)
    ax = axes[0, 0]
    where = blended_transform_factory(ax.transAxes, ax.transData)
    for y, arm in enumerate(arms):
        mine = rows[rows["arm"] == arm]
        # the arm's value written beside its row: the figure reads without the arms' colours
        ax.text(1.03, y, _row_value(mine["value"] / divisor), transform=where, va="center", fontsize="small")
        for evidence, points in mine.groupby("evidence"):
            ax.scatter(
                points["value"] / divisor,
                [y] * len(points),
                marker=MARKERS[kind(evidence)],
                s=34,
                color=colours.get(arm, "#3c4043"),
                edgecolors="white",
                linewidths=0.6,
                zorder=3,
            )
    names = [safe(a) for a in arms]
    ax.set_yticks(range(len(arms)), names, fontsize="small")
    ax.set_ylim(len(arms) - 0.5, -0.5)
    ax.grid(axis="y", visible=False)
    ax.tick_params(axis="x", labelsize="small")
    ax.xaxis.get_offset_text().set_fontsize("small")
    ax.set_xlabel(xlabel, fontsize="small")
    positive = rows["value"][rows["value"] > 0]
    if len(positive) == len(rows) and positive.max() > 50 * positive.min():  # two scales: log, or one is a dot at 0
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))  # plain text, not mathtext powers
        ax.xaxis.set_minor_formatter("")
    elif unit or on_ratio_axis(claim) and (rows["value"] >= 0).all():  # amounts: an axis from zero
        ax.set_xlim(0, float(rows["value"].max()) / divisor * 1.08)
    margins(fig, left=0.25 + 0.9 * text_inches(names), bottom=below, right=0.95, top=0.1)
    return chart(
        fig,
        f"{field} in the runs behind {claim.id}",
        "One marker per run (seed or setting), in the arm's colour on this page; circle measured, diamond "
        "estimated, triangle projected. Right: the arm's value (the mean, where it has several runs, and their "
        "count).",
    )


def _row_value(values: pd.Series) -> str:
    """One arm's value in a card's figure: its mean, with how many runs where it has several."""
    mean = f"{values.mean():.4g}"
    return mean if len(values) == 1 else f"{mean} (n={len(values)})"


def in_gb(claim: Claim) -> bool:
    """Whether the paper states this card's bytes in GB (10^9): its unit, its statement or the absolute value
    it is calibrated on. The card's figure then uses GB too, so one card never mixes GB and GiB."""
    return claim.calibrate is not None or re.search(r"\bGB\b", f"{claim.unit} {claim.statement}") is not None


def _unit(field: str | None, largest: float, decimal: bool = False) -> tuple[float, str]:
    if field and "bytes" in field and decimal:
        return 1e9, "GB, 10^9 bytes"
    if field and "bytes" in field:
        for power, unit in ((4, "TiB"), (3, "GiB"), (2, "MiB"), (1, "KiB")):
            if largest >= 1024**power:
                return 1024.0**power, unit
        return 1.0, "bytes"
    return 1.0, ""
