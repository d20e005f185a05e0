"""The figures' SVG written smaller (suite/report/compact.py) draws the same: every point of every path within half
the last kept decimal of matplotlib's own, every text's words, every id something refers to."""

from __future__ import annotations

import io
import re

import matplotlib
import numpy as np
import pytest
from matplotlib.figure import Figure

from suite.report.compact import DECIMALS, compact
from suite.report.figures import RC

TOLERANCE = 0.5 * 10**-DECIMALS + 1e-9
PAIRS = {"M": 1, "L": 1, "Q": 2, "C": 3}


def points(path: str) -> list[tuple[float, float]]:
    """Every point a path names, absolute, reading relative lines ("l") from the point before."""
    tokens = re.findall(r"[A-Za-z]|-?(?:\d+\.?\d*|\.\d+)", path)
    out, at, start, command, i = [], (0.0, 0.0), (0.0, 0.0), "", 0
    while i < len(tokens):
        if tokens[i].isalpha():
            command, i = tokens[i], i + 1
            if command in "zZ":
                at = start
                continue
        n = 2 * PAIRS[command.upper()]
        values = [float(v) for v in tokens[i : i + n]]
        i += n
        pairs = list(zip(values[::2], values[1::2]))
        if command == "l":
            pairs = [(at[0] + pairs[0][0], at[1] + pairs[0][1])]
        out += pairs
        at = pairs[-1]
        start = at if command == "M" else start
    return out


def texts(svg: str) -> list[str]:
    return [" ".join(re.sub(r"<[^>]+>", " ", t).split()) for t in re.findall(r"<text\b.*?</text>", svg, re.S)]


@pytest.fixture(scope="module")
def drawn() -> tuple[str, str]:
    """matplotlib's SVG of a figure with what the report draws (lines with markers, a band, a log axis whose
    labels are mathtext, a legend, a rotated label) and its compacted copy."""
    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    x = np.linspace(1, 600, 240)
    for k in range(3):
        y = 4 / np.sqrt(x) + 0.1 * k + 0.01 * np.sin(x * (k + 1))
        ax.plot(x, y, marker="os^"[k], markevery=20, label=f"arm {k} <&>")
        ax.fill_between(x, y - 0.02, y + 0.02, alpha=0.2)
    ax.set_xscale("log")
    ax.set_ylabel("val loss")
    ax.legend()
    buffer = io.StringIO()
    with matplotlib.rc_context(RC):  # text as text, as the report writes it
        fig.savefig(buffer, format="svg")
    return buffer.getvalue(), compact(buffer.getvalue())


def test_every_point_lands_where_matplotlib_put_it(drawn):
    raw, small = drawn
    before = [points(d) for d in re.findall(r' d="([^"]*)"', raw)]
    after = [points(d) for d in re.findall(r' d="([^"]*)"', small)]
    assert len(before) == len(after) and sum(map(len, before)) > 1000
    for old, new in zip(before, after):
        assert len(old) == len(new)
        assert np.abs(np.array(old) - np.array(new)).max(initial=0) <= TOLERANCE


def test_texts_and_referenced_ids_stay(drawn):
    raw, small = drawn
    assert texts(small) == texts(raw) and "arm 0 &lt;&amp;&gt;" in texts(small)
    referenced = set(re.findall(r"(?:url\(|href=\")#([^\")]+)", small))
    assert referenced and referenced <= set(re.findall(r' id="([^"]*)"', small))
    assert re.findall(r'rotate\(-90[^"]*"', small)  # the y label's rotation stays; a rotation by 0 goes
    assert small.count("<use ") == raw.count("<use ") > 30  # every marker, its line's style said once per line
    lines = re.findall(r'<g [^>]*style="[^"]*">((?:<use [^>]*/>){2,})</g>', small)
    assert len(lines) == 3 and not [line for line in lines if "style=" in line]


def test_the_figure_is_under_half_its_size(drawn):
    raw, small = drawn
    assert len(small) < 0.5 * len(raw), (len(small), len(raw))


def test_a_moveto_after_a_moveto_keeps_its_letter_and_a_close_returns_to_the_start():
    path = '<path d="M 1 2 \nM 3 4 \nL 5.04 5 \nz\nL 0 0"/>'
    (d,) = re.findall(r'd="([^"]*)"', compact(path))
    assert d == "M1 2M3 4l2 1zl-3-4"
    assert points(d) == [(1, 2), (3, 4), (5, 5), (0, 0)]
