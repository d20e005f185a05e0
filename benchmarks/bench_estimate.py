"""How long paper-scale estimates take, and how much memory. A benchmark, not a test.

    python benchmarks/bench_estimate.py            # the limits: time and peak RSS of each case
    python benchmarks/bench_estimate.py loopback   # the alpha-beta model against gloo timings here
    pytest benchmarks/bench_estimate.py -m bench   # the limits under pytest-benchmark

Limits (issue 5): llama-1b on 8 ranks within 2 minutes and 8 GiB; llama-8b on 512 ranks (the FL+FSDP
setup) within 5 minutes. Each case runs `python -m suite estimate` in a fresh process, so the time
includes importing torch and the peak RSS is the whole process's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PAPER_BATCH = ["--set", "seq_len=2048", "--set", "micro_batch=1"]
CASES = {
    "llama-1b fsdp x8": (["fsdp", "--model", "llama-1b", "--world-size", "8", *PAPER_BATCH], 120, 8 * 2**30),
    "llama-1b ddp x8": (["ddp", "--model", "llama-1b", "--world-size", "8", *PAPER_BATCH], 120, 8 * 2**30),
    "llama-8b fsdp x512": (["fsdp", "--model", "llama-8b", "--world-size", "512", *PAPER_BATCH], 300, 8 * 2**30),
    "llama-8b hsdp x512": (["hsdp", "--model", "llama-8b", "--world-size", "512", *PAPER_BATCH], 300, 8 * 2**30),
}


def run_case(args: list[str], results: Path) -> tuple[float, int, str]:
    """(seconds, peak RSS bytes, last line) of one `python -m suite estimate` process."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "suite", "estimate", *args, "--results", str(results)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    if status != 0:
        raise RuntimeError(f"estimate {' '.join(args)} failed:\n{out[-3000:]}")
    return seconds, usage.ru_maxrss * 1024, out.strip().splitlines()[-1]


def limits() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for name, (args, max_s, max_rss) in CASES.items():
            seconds, rss, _ = run_case(args, Path(tmp))
            verdict = "ok" if seconds <= max_s and rss <= max_rss else "OVER"
            print(
                f"{name:<22} {seconds:7.1f} s (limit {max_s}), peak RSS {rss / 2**30:5.2f} GiB "
                f"(limit {max_rss / 2**30:.0f})  {verdict}",
                flush=True,
            )


def loopback(world: int = 2) -> None:
    """Fit a tier to gloo all-reduce timings on `world` processes; compare its predictions with timings."""
    from suite.sim.collectives import cost
    from suite.sim.loopback import fit_tier, measure

    sizes = [2**k for k in range(12, 25, 2)]
    timings = measure(world, sizes) + measure(2 * world, sizes, ("all_reduce",))
    fitted = [t for t in timings if t["op"] == "all_reduce" and t["n"] == world]
    tier = fit_tier(fitted)
    print(
        f"fitted on all_reduce x{world}: latency {tier.latency * 1e6:.1f} us, bandwidth {tier.bandwidth / 1e9:.2f} GB/s"
    )
    print(f"{'op':<12}{'n':>3}{'payload':>11}{'measured ms':>13}{'ring ms':>10}{'tree ms':>10}")
    for t in timings:
        ring, tree = (cost(t["op"], t["payload"], t["n"], tier.bandwidth, tier.latency, a) for a in ("ring", "tree"))
        print(
            f"{t['op']:<12}{t['n']:>3}{t['payload']:>11}{t['seconds'] * 1e3:>13.3f}{ring * 1e3:>10.3f}"
            f"{tree * 1e3:>10.3f}"
        )


@pytest.mark.bench
@pytest.mark.parametrize("name", list(CASES))
def test_estimate_limits(benchmark, tmp_path, name):
    args, max_s, max_rss = CASES[name]
    seconds, rss, _ = benchmark.pedantic(run_case, args=(args, tmp_path), rounds=1, iterations=1)
    benchmark.extra_info.update({"seconds": seconds, "peak_rss_bytes": rss})
    assert seconds <= max_s and rss <= max_rss


if __name__ == "__main__":
    if sys.argv[1:] == ["loopback"]:
        loopback()
    else:
        limits()
