"""The report's figures: seaborn/matplotlib drawn on the Agg canvas, embedded as base64 PNG data URIs.

pyplot is never imported: each figure is a plain matplotlib Figure, so drawing needs no display and
leaves no global state behind. Every function takes a long-form frame from frames.py and returns a
Chart, or None when there is nothing to draw. Labels come from records, so they are made safe for
matplotlib's mathtext ($) and legends (a leading _ hides an entry).
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from suite.report import frames

DPI = 80


@dataclass(frozen=True)
class Chart:
    title: str
    uri: str  # data:image/png;base64,...
    caption: str = ""


def safe(label: str, limit: int = 48) -> str:
    label = label if len(label) <= limit else label[: limit - 1] + "…"
    return label.replace("$", r"\$").lstrip("_") or "(unnamed)"


def _figure(width: float, height: float, rows: int = 1, cols: int = 1, **kwargs) -> tuple[Figure, np.ndarray]:
    with sns.axes_style("whitegrid"), sns.plotting_context("notebook", font_scale=0.8):
        fig = Figure(figsize=(width, height))
        return fig, fig.subplots(rows, cols, squeeze=False, **kwargs)


def _margins(fig: Figure, left: float = 0.6, bottom: float = 0.5, right: float = 0.15, **spacing: float) -> None:
    """Margins in inches. Set by hand: a layout engine would lay out every text twice per figure."""
    width, height = fig.get_size_inches()
    fig.subplots_adjust(
        left=left / width, right=1 - right / width, bottom=bottom / height, top=1 - 0.3 / height, **spacing
    )


def _text_inches(labels: list[str]) -> float:
    """About how long the longest label is in small type (about 0.06 inch a character)."""
    return 0.06 * max((len(label) for label in labels), default=0)


def _encode(fig: Figure) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _colours(arms: list[str]) -> dict[str, tuple]:
    return dict(zip(arms, sns.color_palette("tab10" if len(arms) <= 10 else "husl", len(arms))))


def _byte_unit(largest: float) -> tuple[float, str]:
    for power, unit in ((3, "GiB"), (2, "MiB"), (1, "KiB")):
        if largest >= 1024**power:
            return 1024.0**power, unit
    return 1.0, "bytes"


def loss_curves(curve: pd.DataFrame, label: str) -> Chart | None:
    """Loss against tokens, FLOPs and wall time: mean over seeds with a min-max band.

    Validation loss where every arm has a curve of it, else training loss: one row keeps the figure cheap.
    """
    axes_x = (("tokens", "tokens"), ("flops", "FLOPs"), ("wall_s", "wall time (s)"))
    for y in ("val_loss", "train_loss"):
        bands = {x: frames.seed_band(curve, x, y) for x, _ in axes_x}
        if not bands["tokens"].empty and set(bands["tokens"]["arm"]) == set(curve["arm"]):
            break
    else:
        return None
    arms = list(dict.fromkeys(curve["arm"]))
    colours = _colours(arms)
    fig, axes = _figure(12, 3.4, 1, 3)
    for ax, (x, x_label) in zip(axes[0], axes_x):
        for arm, band in bands[x].groupby("arm", sort=False):
            ax.plot(band["x"], band["mean"], color=colours[arm], label=safe(arm))
            ax.fill_between(band["x"], band["low"], band["high"], color=colours[arm], alpha=0.2, linewidth=0)
        ax.set_xlabel(x_label)
    axes[0, 0].set_ylabel(y.replace("_", " "))
    legend_width = 0.4 + _text_inches([safe(a) for a in arms])
    fig.legend(*axes[0, 0].get_legend_handles_labels(), loc="center right", fontsize="small")
    _margins(fig, left=0.6, bottom=0.55, right=legend_width, wspace=0.25)
    return Chart(
        f"{y.replace('_', ' ').capitalize()} against tokens, FLOPs and wall time ({label})",
        _encode(fig),
        "Line: mean over seeds; band: lowest to highest seed.",
    )


def memory_bars(memory: pd.DataFrame, label: str) -> Chart | None:
    """Per-rank memory as stacked bars of params, grads, optimizer state, activations and other."""
    if memory.empty:
        return None
    divisor, unit = _byte_unit(float(memory[list(frames.MEMORY_PARTS)].sum(axis=1).max()))
    names = [f"{safe(a, 32)} r{r}" for a, r in zip(memory["arm"], memory["rank"])]
    fig, axes = _figure(max(6.0, 0.3 * len(names) + 2.5), 3.5 + 0.7 * _text_inches(names))
    ax, bottom = axes[0, 0], np.zeros(len(memory))
    for part, colour in zip(frames.MEMORY_PARTS, sns.color_palette("Set2", len(frames.MEMORY_PARTS))):
        heights = memory[part].to_numpy(float) / divisor
        ax.bar(range(len(names)), heights, bottom=bottom, color=colour, label=part)
        bottom += heights
    ax.set_xticks(range(len(names)), names, rotation=60, ha="right", fontsize="small")
    ax.set_ylabel(unit)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    _margins(fig, left=0.7, bottom=0.3 + 0.7 * _text_inches(names), right=1.3)
    return Chart(
        f"Memory per rank ({label})",
        _encode(fig),
        f"Mean over seeds; ranks beyond {frames.MAX_RANKS} are not drawn (see the run pages).",
    )


def comm_bytes(comm: pd.DataFrame, label: str) -> Chart | None:
    """Payload bytes per step per rank, stacked by collective op and by group tier."""
    if comm.empty:
        return None
    arms = list(dict.fromkeys(comm["arm"]))
    names = [safe(a, 32) for a in arms]
    divisor, unit = _byte_unit(float(comm.groupby("arm")["bytes_per_step"].sum().max()))
    fig, axes = _figure(12, 0.35 * len(arms) + 1.6, 1, 2, sharey=True)
    for ax, key in zip(axes[0], ("op", "tier")):
        table = comm.pivot_table(index="arm", columns=key, values="bytes_per_step", aggfunc="sum", sort=False)
        table = table.reindex(arms).fillna(0) / divisor
        table.index = names
        table.columns = [safe(c, 24) for c in table.columns]
        table.plot.barh(stacked=True, ax=ax, colormap="tab20", width=0.7)
        ax.set_xlabel(f"{unit} per step per rank")
        ax.set_ylabel("")
        ax.set_title(f"by {key}", fontsize="medium")
        ax.legend(fontsize="small", loc="lower right")
    axes[0, 0].invert_yaxis()
    _margins(fig, left=0.3 + _text_inches(names), bottom=0.5, wspace=0.05)
    return Chart(
        f"Bytes per step by op and by group tier ({label})",
        _encode(fig),
        "Payload bytes, mean over ranks and seeds; wire bytes are on the run pages.",
    )


def throughput(ratios: pd.DataFrame, geomeans: pd.Series, reference: str, label: str) -> Chart | None:
    """tokens/s ratios to the reference baseline: a bar at each arm's geometric mean, a dot per configuration."""
    if ratios.empty:
        return None
    order = [safe(a, 32) for a in geomeans.index]
    points = ratios.assign(arm=[safe(a, 32) for a in ratios["arm"]])
    fig, axes = _figure(max(5.0, 0.7 * len(order) + 2), 3.0 + 0.5 * _text_inches(order))
    ax = axes[0, 0]
    sns.barplot(x=order, y=geomeans.to_numpy(float), ax=ax, color="#9ecae1", order=order)
    sns.stripplot(data=points, x="arm", y="ratio", order=order, ax=ax, color="black", size=5)
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    ax.set_xlabel("")
    ax.set_ylabel(f"tokens/s ÷ {safe(reference, 24)}")
    ax.tick_params(axis="x", rotation=30)
    for tick in ax.get_xticklabels():
        tick.set_horizontalalignment("right")
    _margins(fig, left=0.7, bottom=0.3 + 0.5 * _text_inches(order))
    return Chart(
        f"Throughput against {safe(reference, 24)} ({label})",
        _encode(fig),
        "Bar: geometric mean over configurations; dot: one configuration (median over seeds).",
    )


def calibration_sweep(
    points: list[tuple[str, float, bool]], paper: float, within: float, baseline: str
) -> Chart | None:
    """The baseline's value at every swept setting against the paper's number and its band (`calibrate`)."""
    if not points:
        return None
    scale, unit = 1e9, "GB, 10^9 bytes as the paper's GB are read"
    labels = [safe(setting.replace("model=", ""), 60) for setting, _, _ in points]
    fig, axes = _figure(7.5, 0.8 + 0.28 * len(points))
    ax = axes[0, 0]
    colours = ["#137333" if fits else "#9aa0a6" for _, _, fits in points]
    ax.barh(range(len(points)), [v / scale for _, v, _ in points], color=colours)
    ax.axvspan(paper * (1 - within) / scale, paper * (1 + within) / scale, color="#fbbc04", alpha=0.3)
    ax.axvline(paper / scale, color="#b06000", linewidth=1.5)
    ax.set_yticks(range(len(points)), labels)
    ax.invert_yaxis()
    ax.set_xlabel(f"{safe(baseline)} peak per device ({unit}); paper's value and ±{within:.0%} in orange")
    _margins(fig, left=0.3 + _text_inches(labels), bottom=0.55)
    fits = sum(f for _, _, f in points)
    caption = f"{fits} of {len(points)} settings put {baseline} within {within:.0%} of the paper's value (green)"
    return Chart(f"Calibration of {baseline}", _encode(fig), caption)
