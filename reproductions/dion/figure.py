"""Optimizer-step time against matrix size, one line per optimizer (Dion per rank fraction), from the
microbenchmark records of a results folder:

    python -m reproductions.dion.figure results/dion-smoke reports/dion/step-time.png

The suite's report has no figure for microbenchmark rows; this one is drawn from the records alone.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from suite.atomic import save_figure  # noqa: E402


def series(results: Path) -> dict[str, list[tuple[int, float]]]:
    """label -> [(rows, median step seconds)] from every complete microbenchmark record of `results`."""
    out: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(results.glob("micro-*.json")):
        rec = json.loads(path.read_text())
        if rec.get("kind") != "microbenchmark" or rec["status"] != "complete":
            continue
        for row in rec["micro"]["rows"]:
            shape = row["shape"]
            label = shape["optimizer"]
            if label == "dion":
                label = f"dion r={shape['rank_fraction']:g}"
            out.setdefault(label, []).append((shape["rows"], row["time_s_median"]))
    return {k: sorted(v) for k, v in sorted(out.items())}


def draw(results: Path, target: Path) -> Path:
    data = series(results)
    if not data:
        raise ValueError(f"no microbenchmark records in {results}; run the plan first")
    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    for label, points in data.items():
        ax.plot([p[0] for p in points], [1e3 * p[1] for p in points], marker="o", label=label)
    ax.set(xscale="log", yscale="log", xlabel="matrix rows = cols", ylabel="one optimizer step (ms, median)")
    ax.set_title("Optimizer step on one square matrix, 1 CPU process", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    save_figure(fig, target)  # atomic: a reader never sees half a PNG
    plt.close(fig)
    return target


if __name__ == "__main__":
    print(draw(Path(sys.argv[1]), Path(sys.argv[2])))
