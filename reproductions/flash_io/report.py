"""flash-io's own page: accesses and memory against N (log-log, fitted slopes), Theorem 2's constants,
Proposition 3's bound, and the GPT-2 medium numbers beside the paper's, from the plan's microbenchmark records.

The generic report (suite/report) shows run records, not the rows of microbenchmark records, so this page is
written beside it: `python -m reproductions.flash_io.report RESULTS -o reports/flash-io` writes io.html and
io-summary.json there (suite/report's own files are left alone).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.ticker import FuncFormatter, NullFormatter

from reproductions.flash_io.metrics import FIT_DIGITS, fitted, loglog_slope
from suite.atomic import write_text
from suite.records import load_records
from suite.report import Section, render_page
from suite.report import figures as report_figures
from suite.report.figures import Chart
from suite.report.tables import Cell, Table, number, text

# arXiv 2205.14135 v2, Figure 2 (left): GPT-2 medium attention, forward + backward, A100 (docs/sources.md#flash-io;
# an earlier version of the figure shows other numbers, so the version is part of the source)
PAPER = {
    "source": "arXiv 2205.14135 v2, Figure 2: GPT-2 medium (seq 1024, head dim 64, 16 heads, batch 64), A100",
    "standard_gb": 40.3,
    "tiled_gb": 4.4,
    "standard_ms": 41.7,
    "tiled_ms": 7.3,
}


def micro_rows(records: list[dict], item: str) -> pd.DataFrame:
    """The rows of the newest record of microbenchmark `item`: shape fields, measurements and counts."""
    found = sorted(
        (r for r in records if r.get("kind") == "microbenchmark" and r["method"] == item), key=lambda r: r["created"]
    )
    if not found:
        return pd.DataFrame()
    record = found[-1]
    rows = [
        {
            **row["shape"],
            **row["extra"],
            "time_s": row["time_s_median"],
            "peak_bytes": row["peak_bytes"],
            "flops": row["flops"],
            "device_name": record["env"]["device_name"],
        }
        for row in record["micro"]["rows"]
    ]
    return pd.DataFrame(rows)


def theorem2_constants(df: pd.DataFrame) -> dict:
    """Constants of standard = a N d + b N^2 and tiled = a N^2 d^2 / M + b N d (no mask), by least squares on
    relative errors (the sweep spans five orders of magnitude)."""
    n, d, m = (df[k].astype(float) for k in ("n", "d", "m"))
    out = {}
    for algorithm, terms in (("standard", (n * d, n * n)), ("tiled", (n * n * d * d / m, n * d))):
        y = df[f"{algorithm}_elements"].astype(float).to_numpy()
        design = np.column_stack(terms)
        (a, b), *_ = np.linalg.lstsq(design / y[:, None], np.ones_like(y), rcond=None)
        residual = np.max(np.abs(design @ (a, b) - y) / y)
        # a residual of a few 1e-16 is the kernel's rounding: decimals, not significant digits, keep it off the page
        residual = round(float(residual), FIT_DIGITS)
        out[algorithm] = {"a": fitted(a), "b": fitted(b), "max_rel_residual": residual, "points": len(y)}
    return out


def summarize(records: list[dict]) -> dict:
    io_n, io_d, io_m, gpt2 = (micro_rows(records, f"io-{k}") for k in ("n", "d", "m", "gpt2"))
    summary: dict = {"paper": PAPER}
    if not io_n.empty:
        plain = io_n[~io_n["causal"]]
        summary["slopes_n"] = {a: loglog_slope(plain["n"], plain[f"{a}_elements"]) for a in ("tiled", "standard")}
        summary["executed_equals_closed_form"] = bool(
            all(
                (
                    df[f"{a}_executed_elements"].dropna()
                    == df.loc[df[f"{a}_executed_elements"].notna(), f"{a}_elements"]
                ).all()
                for df in (io_n, io_d, io_m, gpt2)
                if not df.empty
                for a in ("tiled", "standard")
            )
        )
    if not io_d.empty:
        summary["slopes_d"] = {a: loglog_slope(io_d["d"], io_d[f"{a}_elements"]) for a in ("tiled", "standard")}
    if not io_m.empty:
        # where M holds one row of each tile and no more, B_c stays 1, so T_c = N rather than ~ N d / M: fit above
        unclamped = io_m[io_m["block_c"] > 1]
        summary["slope_m_tiled"] = loglog_slope(unclamped["m"], unclamped["tiled_elements"])
        summary["slope_m_tiled_all"] = loglog_slope(io_m["m"], io_m["tiled_elements"])
        sweep = pd.concat([io_n[~io_n["causal"]], io_d, io_m])
        summary["theorem2"] = theorem2_constants(sweep[sweep["block_c"] > 1])
        summary["theorem2"]["excluded"] = "points where M fits only B_c = 1 (T_c = N)"
        bound = sweep["n"] * sweep["n"] * sweep["d"] ** 2 / sweep["m"]
        summary["proposition3"] = {
            "points": len(sweep),
            "min_tiled_over_n2d2_m": float((sweep["tiled_elements"] / bound).min()),
            "max_tiled_over_n2d2_m": float((sweep["tiled_elements"] / bound).max()),
            "min_tiled_over_4nd": float((sweep["tiled_elements"] / (4 * sweep["n"] * sweep["d"])).min()),
        }
    if not gpt2.empty:
        summary["gpt2"] = [
            {
                "causal": bool(r.causal),
                "m": int(r.m),
                "standard_gb": r.standard_bytes_all_heads / 1e9,
                "tiled_gb": r.tiled_bytes_all_heads / 1e9,
                "ratio": r.standard_bytes_all_heads / r.tiled_bytes_all_heads,
                "executed": r.tiled_executed_elements == r.tiled_elements,
            }
            for r in gpt2.itertuples()
        ]
    summary.update(_measured(records))
    return summary


def _measured(records: list[dict]) -> dict:
    out = {}
    sdpa_n, gpt2 = micro_rows(records, "sdpa-n"), micro_rows(records, "sdpa-gpt2")
    if not sdpa_n.empty:
        out["memory_slopes_n"] = {
            f"{b}{'+backward' if bw else ''}": loglog_slope(g["n"], g["peak_bytes"])
            for (b, bw), g in sdpa_n.groupby(["backend", "backward"])
        }
        out["time_slopes_n"] = {
            f"{b}{'+backward' if bw else ''}": loglog_slope(g["n"], g["time_s"])
            for (b, bw), g in sdpa_n.groupby(["backend", "backward"])
        }
    if not gpt2.empty and {"math", "flash"} <= set(gpt2["backend"]):
        t = gpt2.set_index("backend")
        out["runtime_gpt2"] = {
            "math_s": float(t.loc["math", "time_s"]),
            "flash_s": float(t.loc["flash", "time_s"]),
            "ratio": float(t.loc["math", "time_s"] / t.loc["flash", "time_s"]),
            "batch": int(t.loc["math", "batch"]),
            "peak_bytes_math": int(t.loc["math", "peak_bytes"]),
            "peak_bytes_flash": int(t.loc["flash", "peak_bytes"]),
            "device_name": str(t.loc["math", "device_name"]),
        }
    return out


# standard (math) and tiled (flash) keep a colour, a marker and a line style each, so they read in greyscale too
STANDARD = {"color": "#ff7f0e", "marker": "o"}
TILED = {"color": "#000080", "marker": "s"}


def _loglog(ax, x: pd.Series, y: pd.Series, label: str, **style) -> None:
    ax.loglog(x, y, label=f"{label} (slope {loglog_slope(x, y):.2f})", markersize=4, linewidth=1.5, **style)


def _plot(title: str, xlabel: str, ylabel: str, draw) -> Chart:
    """A log-log figure in the site's style (suite/report/figures.py): inline SVG with real text."""
    fig, axes = report_figures.figure(6.4, 4.2)
    ax = axes[0, 0]
    draw(ax)
    for axis in (ax.xaxis, ax.yaxis):  # plain numbers: a mathtext power reads as several texts, cut
        axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}".replace("e+0", "e").replace("e-0", "e-")))
        axis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(xlabel)
    ax.set_ylabel(report_figures.wrap(ylabel, 36))
    ax.legend(fontsize="small", frameon=False)
    report_figures.margins(fig, left=0.95, bottom=0.55, right=0.15, top=0.15)
    return report_figures.chart(fig, title)


def figures(records: list[dict]) -> list[Chart]:
    """The counted accesses against N and M, and the measured SDPA memory and time against N."""
    io_n, io_m, sdpa_n = micro_rows(records, "io-n"), micro_rows(records, "io-m"), micro_rows(records, "sdpa-n")
    out = []
    if not io_n.empty:
        out.append(
            _plot(
                f"HBM accesses against N, counted by the instrumented algorithms (d {int(io_n['d'][0])}, "
                f"M {int(io_n['m'][0])})",
                "sequence length N",
                "HBM accesses (elements, fwd+bwd, one head)",
                lambda ax: _accesses_n(ax, io_n),
            )
        )
    if not io_m.empty:
        out.append(
            _plot(
                "HBM accesses against SRAM size M, from d to N d, with the lower bound",
                "SRAM size M (elements)",
                "HBM accesses (elements)",
                lambda ax: _accesses_m(ax, io_m),
            )
        )
    if not sdpa_n.empty:
        bh = int(sdpa_n["batch"][0] * sdpa_n["heads"][0])
        for field, label in (("peak_bytes", "peak memory (bytes, MemTracker)"), ("time_s", "time (s, median)")):
            out.append(
                _plot(
                    f"Measured SDPA {label.split(' (')[0]} against N on {sdpa_n['device_name'][0]} "
                    f"(batch x heads {bh}, d 64)",
                    "sequence length N",
                    label,
                    lambda ax, field=field: _sdpa(ax, sdpa_n, field),
                )
            )
    return out


def _accesses_n(ax, io_n: pd.DataFrame) -> None:
    for causal, g in io_n.groupby("causal"):
        tag, ls = ("causal", "--") if causal else ("no mask", "-")
        _loglog(ax, g["n"], g["standard_elements"], f"standard, {tag}", ls=ls, **STANDARD)
        _loglog(ax, g["n"], g["tiled_elements"], f"tiled, {tag}", ls=ls, **TILED)


def _accesses_m(ax, io_m: pd.DataFrame) -> None:
    above = io_m["block_c"] > 1
    fit = loglog_slope(io_m["m"][above], io_m["tiled_elements"][above])
    ax.loglog(io_m["m"], io_m["tiled_elements"], label=f"tiled (slope {fit:.2f} where B_c > 1)", markersize=4, **TILED)
    ax.loglog(io_m["m"], io_m["standard_elements"], label="standard (M plays no part)", **STANDARD, markersize=4)
    bound = io_m["n"] * io_m["n"] * io_m["d"] ** 2 / io_m["m"]
    ax.loglog(io_m["m"], bound, color="black", ls=":", label="N^2 d^2 / M (Prop. 3, constant 1)")
    ax.loglog(io_m["m"], 4 * io_m["n"] * io_m["d"], color="grey", ls="-.", label="4 N d (read Q, K, V, write O)")


def _sdpa(ax, sdpa_n: pd.DataFrame, field: str) -> None:
    for (backend, backward), g in sdpa_n.groupby(["backend", "backward"]):
        style = STANDARD if backend == "math" else TILED
        label = f"{backend} {'fwd+bwd' if backward else 'fwd'}"
        _loglog(ax, g["n"], g[field], label, ls="-" if backward else "--", **style)
    ax.set_xticks(sorted(sdpa_n["n"].unique()))


def _row(*cells: object) -> list[Cell]:
    """Numbers as right-aligned sortable cells (4 significant digits), words as text."""
    return [number(c) if isinstance(c, (int, float)) and not isinstance(c, bool) else text(c) for c in cells]


def paper_table(summary: dict) -> Table:
    """GPT-2 medium beside Figure 2: HBM traffic counted per mask, against the paper's (counts divide: a count
    does not depend on the machine)."""
    table = Table(["quantity", "paper (A100)", "ours", "ours ÷ paper", "evidence"])
    paper = summary["paper"]
    for row in summary.get("gpt2", []):
        mask = "causal" if row["causal"] else "no mask"
        for name, ours, theirs in (
            ("standard attention HBM traffic (GB)", row["standard_gb"], paper["standard_gb"]),
            ("tiled attention HBM traffic (GB)", row["tiled_gb"], paper["tiled_gb"]),
            ("standard ÷ tiled traffic", row["ratio"], paper["standard_gb"] / paper["tiled_gb"]),
        ):
            table.rows.append(_row(f"{name}, {mask}, M {row['m']:,}", theirs, ours, ours / theirs, "counted"))
    return table


def runtime_table(summary: dict) -> Table:
    """GPT-2 medium's attention time beside Figure 2's, each on its own hardware: side by side, never divided
    (a CPU's fp32 time over an A100's fp16 time measures the machines); each side's standard ÷ flash is its own."""
    run = summary.get("runtime_gpt2")
    if not run:
        return Table(["quantity"])
    paper = summary["paper"]
    table = Table(
        ["quantity", "paper (A100, its Figure 2 setting)", f"ours ({run['device_name']}, batch {run['batch']})"]
    )
    for name, ours, theirs in (
        ("standard attention time (ms)", 1e3 * run["math_s"], paper["standard_ms"]),
        ("flash attention time (ms)", 1e3 * run["flash_s"], paper["tiled_ms"]),
        ("standard ÷ flash time, each on its own hardware", run["ratio"], paper["standard_ms"] / paper["tiled_ms"]),
    ):
        table.rows.append(_row(name, theirs, ours))
    return table


# (summary key, entry, what is fitted, the slope the paper's bounds give): Theorem 2's Θ(N d + N²) and
# Θ(N² d² / M), section 3.2's memory linear in N; the paper states no time slope on a CPU
SLOPES = (
    ("slopes_n", "tiled", "tiled accesses against N", "2 (Θ(N² d² / M))"),
    ("slopes_n", "standard", "standard accesses against N", "2 (Θ(N d + N²), N ≫ d)"),
    ("slopes_d", "tiled", "tiled accesses against d", "2 (Θ(N² d² / M))"),
    ("slopes_d", "standard", "standard accesses against d", "0 to 1 (N² dominates where N ≫ d)"),
    ("memory_slopes_n", "flash", "flash peak memory against N", "1 (linear in N, section 3.2)"),
    ("memory_slopes_n", "flash+backward", "flash fwd+bwd peak memory against N", "1 (linear in N, section 3.2)"),
    ("memory_slopes_n", "math", "math peak memory against N", "2 (the N × N matrix)"),
    ("memory_slopes_n", "math+backward", "math fwd+bwd peak memory against N", "2 (the N × N matrix)"),
)


def slopes_table(summary: dict) -> Table:
    """Each fitted log-log slope beside the slope the paper's bounds give."""
    table = Table(["what is fitted", "paper's bound gives", "fitted slope"])
    for key, entry, name, expected in SLOPES:
        if entry in summary.get(key, {}):
            table.rows.append(_row(name, expected, summary[key][entry]))
    if "slope_m_tiled" in summary:
        table.rows.append(_row("tiled accesses against M (B_c > 1)", "-1 (Θ(N² d² / M))", summary["slope_m_tiled"]))
        table.rows.append(_row("tiled accesses against M (every M)", "-1 (Θ(N² d² / M))", summary["slope_m_tiled_all"]))
    for entry, value in summary.get("time_slopes_n", {}).items():
        table.rows.append(_row(f"{entry} time against N (CPU)", "no bound stated", value))
    return table


def constants_table(summary: dict) -> Table:
    """Theorem 2's constants fitted to the counts, and Proposition 3's lower bound checked on every point."""
    table = Table(["fit", "a", "b", "largest relative residual", "points"])
    for algorithm in ("standard", "tiled"):
        if fit := summary.get("theorem2", {}).get(algorithm):
            table.rows.append(_row(algorithm, fit["a"], fit["b"], fit["max_rel_residual"], fit["points"]))
    return table


def bound_table(summary: dict) -> Table:
    table = Table(["Proposition 3 (tiled accesses over its bound)", "value"])
    labels = {
        "points": "points checked",
        "min_tiled_over_n2d2_m": "smallest tiled ÷ (N² d² / M)",
        "max_tiled_over_n2d2_m": "largest tiled ÷ (N² d² / M)",
        "min_tiled_over_4nd": "smallest tiled ÷ 4 N d (reading Q, K, V, writing O)",
    }
    bound = summary.get("proposition3", {})
    table.rows.extend(_row(label, bound[k]) for k, label in labels.items() if k in bound)
    if "executed_equals_closed_form" in summary:
        table.rows.append(_row("executed counts equal the closed form", summary["executed_equals_closed_form"]))
    return table


def sections(summary: dict, records: list[dict]) -> list[Section]:
    charts = tuple(figures(records))
    out = [
        Section("Beside the paper: counts", f"{summary['paper']['source']}.", paper_table(summary)),
        Section(
            "Beside the paper: time, on different hardware",
            "Measured times beside the paper's, not divided: they ran on different machines, precisions and batches.",
            runtime_table(summary),
        ),
        Section("Scaling", "Least-squares slopes of log y against log x over each sweep.", slopes_table(summary)),
        Section("Theorem 2's constants", THEOREM2, constants_table(summary)),
        Section("Proposition 3's bound", "", bound_table(summary)),
        Section("Figures", "Counted accesses and measured SDPA memory and time, log-log.", charts=charts),
    ]
    return [s for s in out if s.charts or (s.table is not None and s.table.rows)]


THEOREM2 = (
    "standard = a N d + b N² and tiled = a N² d² / M + b N d (no mask), by least squares on relative errors; "
    "points where M fits only B_c = 1 (T_c = N) are left out."
)


def write(results_dir: str | Path, out_dir: str | Path) -> Path:
    records, _ = load_records(results_dir)
    report_figures.restart_ids()  # the page's SVG ids depend on no build that ran before it in this process
    summary = summarize(records)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "io-summary.json").write_text(json.dumps(summary, indent=1, default=float) + "\n")
    intro = (
        f"From the records in {results_dir}. Counts are of the instrumented algorithms (reproductions/flash_io), "
        "not GPU measurements; times and memory are measured on the CPU each row names. The numbers are also in "
        "io-summary.json."
    )
    page = render_page("flash-io: HBM accesses counted, SDPA backends measured", intro, sections(summary, records))
    write_text(out / "io.html", page)  # atomic: a reader never sees half a page
    return out / "io.html"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", help="the folder with flash-io's records")
    p.add_argument("-o", "--output", default="reports/flash-io")
    args = p.parse_args(argv)
    if not Path(args.results).is_dir():
        p.error(f"no results folder {args.results!r}; give the folder that holds flash-io's records")
    print(write(args.results, args.output))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
