"""Nsight Compute's DRAM bytes for one attention forward + backward (kernel.py), where `ncu` is installed.

Metrics dram__bytes_read.sum and dram__bytes_write.sum, summed over the kernels inside kernel.py's NVTX
range, in bytes (`--print-units base`). Profiling needs permission to read GPU counters (root, or the driver's
NVreg_RestrictProfilingToAdminUsers=0); without it ncu exits non-zero and the error is recorded.
"""

from __future__ import annotations

import csv
import io
import shutil
import subprocess
import sys

# the NVTX range kernel.py marks the attention call with, and the profile is filtered to
RANGE = "attention"

METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum")


def command(*, backend: str, n: int, d: int, batch: int, heads: int, causal: bool, dtype: str) -> list[str]:
    """The ncu command line: CSV, base units, only kernels inside the attention range, every process."""
    kernel = [sys.executable, "-m", "reproductions.flash_io.kernel", "--backend", backend]
    kernel += [f"--{k}={v}" for k, v in (("n", n), ("d", d), ("batch", batch), ("heads", heads), ("dtype", dtype))]
    kernel += ["--causal"] if causal else []
    return [
        "ncu",
        "--metrics",
        ",".join(METRICS),
        "--csv",
        "--print-units",
        "base",
        "--nvtx",
        "--nvtx-include",
        f"{RANGE}/",
        "--target-processes",
        "all",
        *kernel,
    ]


def parse(text: str) -> dict[str, float]:
    """Each metric summed over the profiled kernels, from ncu's CSV (lines before the header are ncu's log)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise ValueError("no CSV table in ncu's output (its first lines: " + " | ".join(lines[:3]) + ")")
    totals = dict.fromkeys(METRICS, 0.0)
    kernels = set()
    for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        if row["Metric Name"] in totals:
            totals[row["Metric Name"]] += float(row["Metric Value"].replace(",", ""))
            kernels.add(row["ID"])
    read, write = totals[METRICS[0]], totals[METRICS[1]]
    return {"dram_bytes_read": read, "dram_bytes_write": write, "dram_bytes": read + write, "kernels": len(kernels)}


def measure(cmd: list[str]) -> dict:
    """Run ncu; the parsed bytes, or None values with the reason where ncu is missing or fails."""
    if shutil.which(cmd[0]) is None:
        return {"dram_bytes_read": None, "dram_bytes_write": None, "ncu": "not installed"}
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [""]
        return {"dram_bytes_read": None, "dram_bytes_write": None, "ncu": f"exit {done.returncode}: {tail[0]}"}
    return {**parse(done.stdout), "ncu": " ".join(cmd)}
