"""Issue 45, item 4: figures a reader can read, checked on every committed page's SVG (matplotlib's markup: each axes a
<g id="axes_N">, each line a <g id="line2d_N"> styled with its stroke colour, dashes and a <use> of its marker).

A line figure (loss curves, the learning-rate sweep) draws at most frames.PANEL_LINES arms in one panel, never two in
one colour; a zoomed loss panel spans no more than ZOOM_FACTOR times the spread of the final losses it shows (so the
hundredths of a nat the claims judge are visible); a claims-at-a-glance chart of more than glance.GLANCE_ROWS rows
repeats its x axis's numbers at least every that many rows, and above its first. The pieces behind them (panels,
colours within a panel, the sweep's order and tasks) are checked on small inputs too.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from suite.records import load_records
from suite.report import frames, glance, labels

ROOT = Path(__file__).resolve().parents[1]
REPORTS = ROOT / "reports"
SVG = "{http://www.w3.org/2000/svg}"
HREF = "{http://www.w3.org/1999/xlink}href"
LOSS_FIGURE, SWEEP_FIGURE = "loss against tokens", "against the learning rate"  # titles with a line per arm
ZOOM_FACTOR = 2.0  # a zoomed loss panel spans at most this times the spread of its arms' final losses...
ZOOM_FLOOR = 0.1  # ...or of this many nats, where they end closer than that


def pages(root: Path = REPORTS) -> list[Path]:
    """Every committed page but the run pages (whose figures are written by hand, a line each)."""
    return sorted(p for p in root.rglob("*.html") if p.parent.name != "runs")


def svgs(page: Path) -> list[tuple[str, ET.Element]]:
    """Each matplotlib figure of the page: its title and its parsed <svg>."""
    out = []
    for markup in re.findall(r"<svg[^>]*>.*?</svg>", page.read_text(), re.S):
        root = ET.fromstring(markup)
        if root.find(f".//{SVG}g[@id='figure_1']") is not None:
            out.append((root.find(f"{SVG}title").text or "", root))
    return out


def _style(element: ET.Element) -> dict[str, str]:
    pairs = (part.split(":", 1) for part in (element.get("style") or "").split(";") if ":" in part)
    return {k.strip(): v.strip() for k, v in pairs}


def axes_of(root: ET.Element) -> list[ET.Element]:
    return [g for g in root.iter(f"{SVG}g") if (g.get("id") or "").startswith("axes_")]


def series(axes: ET.Element) -> list[tuple[str, str, str, list[float]]]:
    """The axes' data lines (not its grid, ticks or legend): stroke colour, dashes, marker and the y of each vertex."""
    out = []
    for line in axes.findall(f"{SVG}g"):
        if not (line.get("id") or "").startswith("line2d_"):
            continue
        path, use = line.find(f"{SVG}path"), line.find(f".//{SVG}use")
        style = _style(path if path is not None else use)
        d = (path.get("d") or "") if path is not None else ""
        ys = [y for _, y in path_points(d)]
        marker = use.get(HREF) if use is not None else ""
        out.append((style.get("stroke", ""), style.get("stroke-dasharray", ""), marker, ys))
    return out


PATH_TOKEN = re.compile(r"[A-Za-z]|-?(?:\d+(?:\.\d*)?|\.\d+)(?:e[-+]?\d+)?")
PAIRS = {"M": 1, "m": 1, "L": 1, "l": 1, "Q": 2, "C": 3}


def path_points(d: str) -> list[tuple[float, float]]:
    """The vertices of an SVG path as compact.py writes it (absolute moves and curves, lines relative "l", a command
    letter not repeated, ".5" and "-.5" numbers), in absolute coordinates."""
    points, at, start, command, numbers = [], (0.0, 0.0), (0.0, 0.0), "", []
    for token in [*PATH_TOKEN.findall(d), "z"]:
        if token.isalpha():
            command, numbers = token, []
            if token in "zZ":
                at = start
            continue
        numbers.append(float(token))
        if len(numbers) < 2 * PAIRS.get(command, 1):
            continue
        x, y = numbers[-2:]
        at = (at[0] + x, at[1] + y) if command in "ml" else (x, y)
        start = at if command in "Mm" else start
        points.append(at)
        numbers = []
        command = {"M": "L", "m": "l"}.get(command, command)  # pairs after a move are lines
    return points


def texts(group: ET.Element) -> list[tuple[str, float]]:
    """Every text under `group`: its words and its baseline's y (an attribute, or a translation's)."""
    out = []
    for t in group.iter(f"{SVG}text"):
        y = t.get("y") or re.search(r"translate\([-\d.e]+ ([-\d.e]+)\)", t.get("transform", "")).group(1)
        out.append(("".join(t.itertext()).strip(), float(y)))
    return out


def ticks(axes: ET.Element, which: str) -> list[tuple[str, float]]:
    return [t for g in axes.iter(f"{SVG}g") if (g.get("id") or "").startswith(f"{which}tick_") for t in texts(g)]


def line_figures(root: Path = REPORTS) -> list[tuple[str, str, ET.Element]]:
    return [
        (page.relative_to(root).as_posix(), title, svg)
        for page in pages(root)
        for title, svg in svgs(page)
        if LOSS_FIGURE in title or SWEEP_FIGURE in title
    ]


def panel_problems(figures: list[tuple[str, str, ET.Element]]) -> list[str]:
    """A panel with more than frames.PANEL_LINES lines, or two lines in one colour."""
    found = []
    for page, title, svg in figures:
        for n, axes in enumerate(axes_of(svg), 1):
            colours = [colour for colour, *_ in series(axes)]
            if len(colours) > frames.PANEL_LINES or len(set(colours)) < len(colours):
                found.append(f"{page}: {title}, panel {n}: {len(colours)} lines, {len(set(colours))} colours")
    return found


def zoom_problems(figures: list[tuple[str, str, ET.Element]]) -> list[str]:
    """A zoomed loss panel (one with numbers on its loss axis, not the whole run's) wider than ZOOM_FACTOR times the
    spread of its lines' last points (in nats, read from its tick labels), and a loss figure without one."""
    found = []
    for page, title, svg in figures:
        if LOSS_FIGURE not in title:
            continue
        zoomed = [a for a in axes_of(svg) if "whole run" not in [w for w, _ in texts(a)]]
        labelled = [(a, numbers) for a in zoomed if len(numbers := _numbers(ticks(a, "y"))) >= 2]
        if not labelled:
            found.append(f"{page}: {title} has no zoomed panel")
        for axes, numbers in labelled:
            (v0, y0), (v1, y1) = numbers[0], numbers[-1]
            nats = abs((v1 - v0) / (y1 - y0))  # per SVG unit
            # the axes' background, its first path (compact.py unwraps the patch's group, which has no id left)
            background = axes.find(f"{SVG}path")
            box = [c for point in path_points(background.get("d")) for c in point]
            height = (max(box[1::2]) - min(box[1::2])) * nats
            ends = [ys[-1] for *_, ys in series(axes) if ys]
            spread = (max(ends) - min(ends)) * nats
            if height > ZOOM_FACTOR * max(spread, ZOOM_FLOOR):
                found.append(f"{page}: {title}: a panel spans {height:.2f} nats for final losses {spread:.3f} apart")
    return found


def _numbers(labelled: list[tuple[str, float]]) -> list[tuple[float, float]]:
    out = []
    for words, y in labelled:
        try:
            out.append((float(words.replace("−", "-")), y))
        except ValueError:
            continue
    return sorted(out, key=lambda pair: pair[1])


def glance_problems(root: Path = REPORTS) -> list[str]:
    """A ratio chart of more than GLANCE_ROWS rows whose x axis's numbers are not above its first row and then within
    every GLANCE_ROWS rows."""
    found = []
    for page in pages(root):
        for title, svg in svgs(page):
            if not title.startswith("Claims at a glance: ratio claims"):
                continue
            rows = sorted(y for a in axes_of(svg) for _, y in ticks(a, "y"))
            numbers = sorted({round(y, 1) for a in axes_of(svg) for _, y in ticks(a, "x")})
            if len(rows) <= glance.GLANCE_ROWS:
                continue
            between = [sum(low < y < high for y in rows) for low, high in zip([-1e9, *numbers], [*numbers, 1e9])]
            if not numbers or numbers[0] > rows[0] or max(between) > glance.GLANCE_ROWS:
                found.append(f"{page.relative_to(root)}: {len(rows)} rows, rows between the axis's numbers {between}")
    return found


@pytest.fixture(scope="module")
def committed_line_figures() -> list[tuple[str, str, ET.Element]]:
    figures = line_figures()
    assert len(figures) >= 10, "the committed reports have loss and sweep figures"
    return figures


def test_no_panel_draws_more_than_eight_arms_or_one_colour_twice(committed_line_figures):
    assert panel_problems(committed_line_figures) == []


def test_a_zoomed_loss_panel_spans_about_the_spread_of_the_final_losses(committed_line_figures):
    assert zoom_problems(committed_line_figures) == []


def test_no_committed_page_draws_a_placeholder_title():
    """A figure of one panel has no panel title; the empty one read "(unnamed)" on 8 committed pages before."""
    assert [page.name for page in pages() if "(unnamed)" in page.read_text()] == []


def test_a_long_glance_repeats_its_axis_every_ten_rows_and_above_its_first():
    charts = [title for page in pages() for title, _ in svgs(page) if title.startswith("Claims at a glance: ratio")]
    assert charts, "the committed reports have claims-at-a-glance charts"
    assert glance_problems() == []


def test_panels_hold_at_most_the_limit_keep_alike_arms_together_and_say_what_they_share():
    keys = [("text", "quality", "tiny", "ddp")] * 3 + [("net", "quality", "tiny", "ddp")] * 2
    keys += [("text", "swa", "tiny", "ddp")] * 9
    found = frames.panels(keys)
    assert all(len(members) <= frames.PANEL_LINES for _, members in found)
    assert sorted(i for _, members in found for i in members) == list(range(len(keys)))
    assert [title for title, _ in found] == ["text, quality", "text, swa (1 of 2)", "text, swa (2 of 2)", "net"]
    assert frames.panels(keys[:5]) == [("", [0, 1, 2, 3, 4])]  # few enough: one panel, untitled
    assert frames.panels(keys[:5], apart=1) == [("text", [0, 1, 2]), ("net", [3, 4])]  # a task each, however few


def test_arms_of_one_panel_never_share_a_colour_even_fifteen_apart():
    """The 1st and 16th arm of a kind take one palette colour; in one panel the 16th takes the next free one."""
    firsts = [{"provenance": "measured", "settings": {"optimizer": "adamw"}, "variant": {}} for _ in range(17)]
    apart = labels._styles(firsts)
    assert apart[0][0] == apart[15][0]
    together = labels._styles(firsts, [("measured", 0) if i in (0, 15, 16) else None for i in range(17)])
    assert len({together[i][0] for i in (0, 15, 16)}) == 3
    assert {colour for colour, _ in together} <= set(labels.PALETTE)


def merging_records() -> tuple[list[dict], list[str]]:
    """merging's quality plan run (its fine-tunes on four tasks), in the page's order, and their arms' labels."""
    folder = ROOT / "results" / "merging-quality"
    records = [{**r, "_folder": str(folder)} for r in load_records(folder)[0] if r["reproduction"] == "merging"]
    page = labels.arms(records)
    order = {key: i for i, key in enumerate(page)}
    records.sort(key=lambda r: order[labels.key(r)])  # as the page lists them (pages.reproduction_context)
    return records, [page[labels.key(r)].label for r in records]


def test_mergings_fine_tunes_are_drawn_a_task_a_panel_in_the_pages_order():
    """merging's fine-tunes (ddp, each on one task) share a learning-rate figure: no panel mixes two tasks (their
    losses are on different data), and each panel lists its arms as the page does, not sorted as text."""
    records, names = merging_records()
    points = frames.lr_sweep(records, names)
    task = {n: (r.get("data") or {}).get("name") for r, n in zip(records, names)}
    page_order = list(dict.fromkeys(re.sub(r" lr=\S+", "", n) for n in names))
    assert len(set(points["panel"])) >= 4
    for _, panel in points.groupby("panel", sort=False):
        arms = list(dict.fromkeys(panel["arm"]))
        assert len({task[n] for n in names if re.sub(r" lr=\S+", "", n) in arms}) == 1
        assert arms == [a for a in page_order if a in arms]
        assert len(arms) <= frames.PANEL_LINES
