"""How long the report takes for 1,000 run records (target: under 10 s on 2 cores). A benchmark, not a test.

    python benchmarks/bench_report.py            # prints the time
    pytest benchmarks/bench_report.py -m bench   # the same under pytest-benchmark

Four reproductions, each with its baselines and methods, 50-point curves, two world sizes and a few
estimates. A validated record per arm is copied for the other seeds with its numbers moved, so the
set-up stays cheap; the timed part reads, validates and renders all 1,000 files.
"""

from __future__ import annotations

import copy
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from suite.report import build_report
from tests.report_fixtures import make_record

N_RECORDS = 1000
ARMS = {
    "harness": [("ddp", {}), ("fsdp", {}), ("hsdp", {})],
    "sdp": [
        ("ddp", {}),
        ("b-sdp", {"C": 0.5}),
        ("b-sdp", {"C": 0.75}),
        ("n-sdp", {"C": 0.5}),
        ("bb-sdp", {"C": 0.375}),
    ],
    "fl-fsdp": [("fsdp", {}), ("hsdp", {}), ("fl-fsdp", {"F": 8}), ("fl-hsdp", {"F": 8})],
    "dion": [
        ("ddp", {"optimizer": "adamw"}),
        ("ddp-muon", {"optimizer": "muon"}),
        ("ddp-dion", {"optimizer": "dion", "rank": 0.25}),
    ],
}


def templates() -> list[dict]:
    """One validated record per reproduction, arm, world size and provenance."""
    out = []
    for reproduction, arms in ARMS.items():
        for i, (method, variant) in enumerate(arms):
            for world_size in (2, 4):
                out.append(
                    make_record(
                        method,
                        0,
                        reproduction=reproduction,
                        variant=variant,
                        world_size=world_size,
                        steps=50,
                        quality=0.05 * i,
                        speed=1 + 0.1 * i,
                        memory_scale=1 - 0.1 * i,
                    )
                )
            out.append(
                make_record(
                    method,
                    0,
                    reproduction=reproduction,
                    variant=variant,
                    world_size=8,
                    steps=2,
                    provenance="estimated",
                    memory_scale=1 - 0.1 * i,
                )
            )
    return out


def write_study(folder: Path, n: int = N_RECORDS) -> None:
    bases, rng = templates(), random.Random(0)
    for k in range(n):
        base, seed = bases[k % len(bases)], k // len(bases)
        record = copy.deepcopy(base)
        record["run_id"] = f"{base['run_id']}-seed{seed}"
        record["env"]["seed"] = record["data"]["seed"] = seed
        shift = 0.02 * rng.gauss(0, 1)
        for point in record["curve"]:
            point["train_loss"] += shift
            point["val_loss"] = None if point["val_loss"] is None else point["val_loss"] + shift
        record["throughput"]["tokens_per_s"] *= 1 + 0.03 * rng.gauss(0, 1)
        (folder / f"{record['run_id']}.json").write_text(json.dumps(record))


def time_report(folder: Path, out: Path) -> float:
    start = time.perf_counter()
    build_report(folder, out)
    return time.perf_counter() - start


@pytest.mark.bench
def test_report_for_1000_records(benchmark, tmp_path):
    (tmp_path / "results").mkdir()
    write_study(tmp_path / "results")
    benchmark.pedantic(build_report, args=(tmp_path / "results", tmp_path / "site"), rounds=1, iterations=1)
    benchmark.extra_info["records"] = N_RECORDS
    benchmark.extra_info["pages"] = len(list((tmp_path / "site").rglob("*.html")))


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(tmp) / "results"
        results.mkdir()
        write_study(results)
        seconds = time_report(results, Path(tmp) / "site")
        pages = len(list((Path(tmp) / "site").rglob("*.html")))
        print(f"report for {N_RECORDS} records: {seconds:.1f} s, {pages} pages (target < 10 s on 2 cores)")
