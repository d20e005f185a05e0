"""Microbenchmark items of the plan (suite/plan/micro.py): each function takes a shape and returns the callable
that the harness times, FLOP-counts and memory-tracks; the callable returns the numbers it counted.

- `sdpa`: scaled_dot_product_attention with one backend forced (math, flash, efficient, cuDNN), forward or
  forward + backward; returns the benchmark formula's FLOPs (4 B N^2 H d forward, halved under a causal mask,
  backward 2.5x forward; arXiv 2205.14135's benchmarks) beside the harness's FlopCounterMode count.
- `io`: the instrumented algorithms (execute.py) on one head, executed where the tiles are few enough to loop
  over in Python, and the closed form (count.py) always; both recorded, so a reader sees them agree. The plan
  gives these items provenance `counted`: exact counts of an algorithm, not hardware measurements.
- `matmul`: a square matrix multiply, the device's measured peak for TFLOP/s comparisons.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from reproductions.flash_io.count import block_sizes, check_shape, io_counts, sram_peak
from reproductions.flash_io.execute import execute

BACKENDS = {
    "math": SDPBackend.MATH,
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
}
# Tiles above this many per pass are counted in closed form only: the executed algorithm loops in Python.
EXECUTE_TILES = 100


def attention_flops(batch: int, heads: int, n: int, d: int, *, causal: bool, backward: bool) -> int:
    """The benchmark formula: 4 B N^2 H d forward (two N x N x d products), halved when causal; backward 2.5x
    forward (its four products plus recomputing S)."""
    forward = 4 * batch * n * n * heads * d // (2 if causal else 1)
    return forward + (forward * 5 // 2 if backward else 0)


def available_backends(device: torch.device | str, dtype: str = "float32") -> list[str]:
    """The SDPA backends that run a tiny causal forward + backward on `device` in `dtype`, in BACKENDS order
    (probed in the dtype the items use: on CUDA the flash and cuDNN kernels take float16 and bfloat16 only)."""
    found = []
    for name, backend in BACKENDS.items():
        q = torch.randn(1, 1, 8, 8, device=device, dtype=getattr(torch, dtype), requires_grad=True)
        try:
            with sdpa_kernel(backend):
                F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
        except RuntimeError:
            continue
        found.append(name)
    return found


def sdpa(
    device: torch.device,
    backend: str,
    n: int,
    d: int,
    batch: int,
    heads: int,
    causal: bool = True,
    backward: bool = False,
    dtype: str = "float32",
) -> Callable[[], dict]:
    if backend not in BACKENDS:
        raise ValueError(f"unknown SDPA backend {backend!r}; choose one of: {', '.join(BACKENDS)}")
    torch.manual_seed(0)
    shape = (batch, heads, n, d)
    q, k, v = (torch.randn(shape, device=device, dtype=getattr(torch, dtype), requires_grad=backward) for _ in "qkv")
    grad_out = torch.randn(shape, device=device, dtype=q.dtype)
    counted = {"formula_flops": attention_flops(batch, heads, n, d, causal=causal, backward=backward)}

    def work() -> dict:
        for t in (q, k, v):
            t.grad = None
        with sdpa_kernel(BACKENDS[backend]):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            if backward:
                out.backward(grad_out)
        return counted

    return work


def io(
    device: torch.device,
    n: int,
    d: int,
    m: int,
    causal: bool = False,
    heads: int = 1,
    bytes_per_element: int = 2,
) -> Callable[[], dict]:
    """Forward + backward HBM accesses of one head (and of `heads` identical heads), tiled at SRAM size `m`
    and standard."""
    check_shape(n, d, m)
    bc, br = block_sizes(n, d, m)
    tiles = -(-n // bc) * -(-n // br)
    torch.manual_seed(0)
    q, k, v, grad_out = (torch.randn(n, d, device=device) for _ in range(4))

    def work() -> dict:
        out = {
            "block_c": bc,
            "block_r": br,
            "heads": heads,
            "bytes_per_element": bytes_per_element,
            "sram_elements": m,
            "sram_peak_elements": sram_peak(n, d, bc, br),
        }
        for algorithm in ("tiled", "standard"):
            closed = io_counts(n, d, m, algorithm=algorithm, causal=causal)
            out[f"{algorithm}_reads"], out[f"{algorithm}_writes"] = closed.reads, closed.writes
            out[f"{algorithm}_elements"] = closed.moved
            out[f"{algorithm}_bytes_all_heads"] = closed.moved * heads * bytes_per_element
            out[f"{algorithm}_gb_all_heads"] = out[f"{algorithm}_bytes_all_heads"] / 1e9
            out[f"{algorithm}_executed_elements"] = None
            if tiles <= EXECUTE_TILES:
                run = execute(q, k, v, grad_out, m, algorithm=algorithm, causal=causal)
                out[f"{algorithm}_executed_elements"] = run.io.moved
                if algorithm == "tiled":
                    out["sram_peak_executed_elements"] = run.sram_peak
        out["ratio_standard_to_tiled"] = out["standard_elements"] / out["tiled_elements"]
        return out

    return work


def matmul(device: torch.device, n: int, dtype: str = "float32") -> Callable[[], dict]:
    """An n x n x n product: 2 n^3 FLOPs, timed by the harness (the measured peak for MFU-style ratios)."""
    a, b = (torch.randn(n, n, device=device, dtype=getattr(torch, dtype)) for _ in range(2))
    counted = {"formula_flops": 2 * n**3}

    def work() -> dict:
        torch.mm(a, b)
        return counted

    return work


def profiled(
    device: torch.device,
    backend: str,
    n: int,
    d: int,
    batch: int,
    heads: int,
    causal: bool = True,
    dtype: str = "float16",
) -> Callable[[], dict]:
    """Forward + backward under torch.profiler: the summed self time of the device's kernels (CPU ops on a CPU,
    where this serves as the dry run of the GPU preset)."""
    from torch.profiler import ProfilerActivity, profile

    work = sdpa(device, backend, n, d, batch, heads, causal=causal, backward=True, dtype=dtype)
    cuda = torch.device(device).type == "cuda"
    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU]

    def run() -> dict:
        with profile(activities=activities) as prof:
            counted = work()
            if cuda:
                torch.cuda.synchronize(device)
        events = prof.key_averages()
        micros = sum(e.self_device_time_total if cuda else e.self_cpu_time_total for e in events)
        return {**counted, "kernel_time_s": micros / 1e6, "kernels": "cuda" if cuda else "cpu ops"}

    return run


def dram_bytes(
    device: torch.device,
    backend: str,
    n: int,
    d: int,
    batch: int,
    heads: int,
    causal: bool = True,
    dtype: str = "float16",
) -> Callable[[], dict]:
    """DRAM bytes read and written by the attention kernels of one forward + backward, by Nsight Compute
    (ncu.py); None where ncu is not installed."""
    from reproductions.flash_io import ncu

    command = ncu.command(backend=backend, n=n, d=d, batch=batch, heads=heads, causal=causal, dtype=dtype)

    def run() -> dict:
        counted = ncu.measure(command)
        return {"formula_flops": attention_flops(batch, heads, n, d, causal=causal, backward=True), **counted}

    return run


def exactness(device: torch.device, n: int, d: int, m: int, causal: bool) -> Callable[[], dict]:
    """Largest absolute differences of the tiled algorithm's output and gradients from SDPA's math backend
    (float64, one head)."""
    torch.manual_seed(0)
    q, k, v, grad_out = (torch.randn(n, d, device=device, dtype=torch.float64) for _ in range(4))

    def work() -> dict:
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        with sdpa_kernel(SDPBackend.MATH):
            out = F.scaled_dot_product_attention(*(t[None] for t in leaves), is_causal=causal)[0]
        out.backward(grad_out)
        run = execute(q, k, v, grad_out, m, algorithm="tiled", causal=causal)
        grads = max(float((a - b.grad).abs().max()) for a, b in zip(run.grads, leaves))
        return {
            "max_abs_error_out": float((run.out - out.detach()).abs().max()),
            "max_abs_error_grads": grads,
            "max_abs_error": max(grads, float((run.out - out.detach()).abs().max())),
        }

    return work
