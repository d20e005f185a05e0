"""matplotlib's SVG written smaller, drawing the same: what a reproduction page's 2 MB were mostly made of.

matplotlib writes every coordinate with six decimals, every path command and element on its own indented line, an
id on every group, a rotation by 0 on every text and the font's whole fallback list in every text's style. Here
coordinates keep DECIMALS places (a figure is drawn in points, 1/72 inch, and shown at about 1.3 screen pixels a
point: a twentieth of a point moves nothing a reader can see), the font list is said once on the <svg> (its texts
inherit it), and ids nothing refers to, identity rotations, comments and indentation are left out. A text's words
and the whitespace inside it stay as they were.
"""

from __future__ import annotations

import re
from collections import Counter

DECIMALS = 1
# the groups a reader's tools (and tests/test_report_figures_read.py) find a figure's panels, lines and ticks by:
# their ids stay, and so the groups
STRUCTURE = re.compile(r"(figure|axes|legend|line2d|xtick|ytick)_\d+$")
# the attributes that hold coordinates or lengths (numbers in colours, ids or words stay as written)
GEOMETRY = ("d", "x", "y", "x1", "x2", "y1", "y2", "cx", "cy", "r", "width", "height", "points", "transform")
_ATTRIBUTE = re.compile(rf'(\s(?:{"|".join(GEOMETRY)})=")([^"]*)"')
_NUMBER = re.compile(r"-?\d+\.\d+(?:e[-+]?\d+)?")
_TEXT = re.compile(r"(<text\b.*?</text>)", re.S)
_FONT = re.compile(r"font-family:[^;\"]*;")


def _number(match: re.Match) -> str:
    shown = f"{float(match.group(0)):.{DECIMALS}f}".rstrip("0").rstrip(".")
    return "0" if shown == "-0" else shown


def _attribute(match: re.Match) -> str:
    value = _NUMBER.sub(_number, match.group(2))
    if match.group(1).endswith(' d="'):
        value = _relative_lines(value)
    return f'{match.group(1)}{" ".join(value.split())}"'


_PAIRS = {"M": 1, "L": 1, "Q": 2, "C": 3, "z": 0, "Z": 0}


def _relative_lines(path: str) -> str:
    """A path (rounded to DECIMALS) with each line drawn by its step from the point before ("L585.2 -497.1" after
    585.2 -504.4 is "l0 7.3"), counted in whole units of the last decimal so the points land exactly where they
    were. Curves stay absolute, and a path of other commands (none that matplotlib writes) stays as it was."""
    tokens = re.findall(r"[A-Za-z]|-?[\d.]+", path)
    scale = 10**DECIMALS
    out, at, start, command = [], (0, 0), (0, 0), ""
    i = 0
    while i < len(tokens):
        letter = tokens[i]
        if letter not in _PAIRS or i + 1 + 2 * _PAIRS[letter] > len(tokens):
            return path
        try:
            numbers = [round(float(v) * scale) for v in tokens[i + 1 : i + 1 + 2 * _PAIRS[letter]]]
        except ValueError:
            return path
        i += 1 + len(numbers)
        if letter in "zZ":
            out.append("z")
            at, command = start, "z"
            continue
        shown = numbers if letter != "L" else [numbers[0] - at[0], numbers[1] - at[1]]
        written = "l" if letter == "L" else letter
        repeated = written == command != "M"  # a pair after a moveto would draw a line: "M" is always written
        out.append(("" if repeated else written) + _joined(shown, scale, repeated))
        at, command = (numbers[-2], numbers[-1]), written
        start = at if letter == "M" else start
    return "".join(out)


def _joined(numbers: list[int], scale: int, continued: bool) -> str:
    """Numbers counted in 1/scale, as short as SVG reads them: "0.5" as ".5", no space before a minus sign; after
    the command letter, or after the numbers before them where the command goes on (`continued`)."""
    out = ""
    for n in numbers:
        whole, part = divmod(abs(n), scale)
        text = f"{whole}.{part:0{DECIMALS}d}".rstrip("0").rstrip(".") if part else str(whole)
        text = ("-" if n < 0 else "") + (text[1:] if text.startswith("0.") else text)
        out += text if text.startswith("-") or not (out or continued) else f" {text}"
    return out


def _between_texts(part: str, referenced: set[str]) -> str:
    """Markup outside any <text>: its whitespace and comments draw nothing, nor an id nothing refers to."""
    part = re.sub(r"<!--.*?-->", "", part, flags=re.S)
    part = re.sub(r">\s+<", "><", part)
    part = re.sub(r">\s+$", ">", re.sub(r"^\s+<", "<", part))
    kept = lambda m: m.group(0) if m.group(1) in referenced or STRUCTURE.match(m.group(1)) else ""  # noqa: E731
    return re.sub(r' id="([^"]*)"', kept, part)


def _without_bare_groups(svg: str) -> str:
    """A <g> with no attributes groups nothing a browser draws differently: its tags go, its children stay."""
    out, bare, last = [], [], 0
    for tag in re.finditer(r"<g(?:\s[^>]*)?>|</g>", svg):
        out.append(svg[last : tag.start()])
        last = tag.end()
        if tag.group(0) == "</g>":
            dropped = bare.pop()
        else:
            dropped = tag.group(0) == "<g>"
            if not tag.group(0).endswith("/>"):
                bare.append(dropped)
        if not dropped:
            out.append(tag.group(0))
    return "".join(out) + svg[last:]


def _marker_style_once(group: re.Match) -> str:
    """A line's markers (a group of <use>, each with the line's style) take the style from their group instead."""
    styles = re.findall(r' style="[^"]*"', group.group(2))
    if len(styles) < 2 or len(set(styles)) > 1 or len(styles) < group.group(2).count("<use "):
        return group.group(0)
    style = styles[0]
    return f"<g{group.group(1)}{style}>{group.group(2).replace(style, '')}</g>"


def compact(svg: str) -> str:
    """The SVG drawing the same with fewer characters (the module's docstring says which)."""
    referenced = set(re.findall(r"#([^\s\")]+)", svg))
    svg = _ATTRIBUTE.sub(_attribute, svg)
    svg = re.sub(r' transform="rotate\(-?0 [^")]*\)"', "", svg)
    svg = re.sub(r' style="([^"]*)"', lambda m: f' style="{m.group(1).replace(": ", ":").replace("; ", ";")}"', svg)
    fonts = Counter(_FONT.findall(svg))
    if fonts:  # the commonest font list moves to the <svg>, where every text inherits it
        font = fonts.most_common(1)[0][0]
        svg = svg.replace(font, "").replace(' style=""', "")
        svg = re.sub(r"<svg\b", f'<svg style="{font.rstrip(";")}"', svg, count=1)
    parts = _TEXT.split(svg)
    svg = "".join(part if i % 2 else _between_texts(part, referenced) for i, part in enumerate(parts))
    svg = re.sub(r"<g((?: [\w:-]+=\"[^\"]*\")*)>((?:<use [^>]*/>)+)</g>", _marker_style_once, svg)
    return _without_bare_groups(svg)
