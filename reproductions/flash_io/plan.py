"""FlashAttention IO's plan: HBM accesses counted by the instrumented algorithms, SDPA's backends measured.

Smoke (this CPU, about 10 minutes on 2 cores):
- `io-*` items: forward + backward accesses of one head, tiled and standard, across N, d and M (Theorem 2's
  growth; report.py fits the constants and slopes and draws Proposition 3's bound), executed where the tiles
  are few (micro.EXECUTE_TILES) and in closed form always; `io-gpt2`: GPT-2 medium (N 1024, d 64, 16 heads,
  batch 64) at the A100's SRAM (count.A100_M), causal and not: the HBM bytes beside Figure 2's.
- `sdpa-*` items: every SDPA backend this machine has, forward and forward + backward, across N, d and
  batch x heads: time, peak memory (MemTracker), FLOPs (FlopCounterMode and the benchmark formula);
  `sdpa-gpt2` the GPT-2 medium head shape at batch 4 (64 would need 17 GB per N x N tensor on the math path).
- `matmul`: the host's fp32 matrix-multiply rate, the calibration every timing is read against.
- two training runs of llama-tiny at sequence 1024, DDP on one worker with the math or the flash backend
  forced: the IO meter's section, tokens/s and peak memory of a real step.
GPU (`--preset gpu`, also `paper`): the same items on CUDA in fp16 at the paper's batch 64, every backend the
GPU has (cuDNN included), the CUDA allocator's peak, kernel times from torch.profiler, Nsight Compute's DRAM
bytes where `ncu` is installed, and the fp16 matmul peak for TFLOP/s.
"""

from __future__ import annotations

from pathlib import Path

import torch

from reproductions.flash_io.count import A100_M
from reproductions.flash_io.micro import available_backends
from suite.config import RunConfig
from suite.plan.micro import Microbench
from suite.plan.plans import Plan

MICRO = "reproductions.flash_io.micro"
PAPER_SHAPE = dict(n=1024, d=64)  # GPT-2 medium: sequence 1024, head dimension 64
PAPER_HEADS, PAPER_BATCH = 16, 64
# Theorem 2 sweeps: N at d 64 and M 16,384 (B_c = B_r = 26); d at N 4,096; M at N 4,096, d 64 from 1,024 (one
# row of each tile is 8d + 7 = 519 elements; B_c = 1 below 1,046) to N d
SWEEP_N = (256, 512, 1024, 2048, 4096, 8192, 16384)
SWEEP_D = (16, 32, 64, 128, 256)
SWEEP_M = (1024, 2048, 4096, 16384, 32768, 65536, 262144)
SWEEP_M_FIXED, SWEEP_N_FIXED, SWEEP_D_FIXED = 16384, 4096, 64
# float64 shapes whose blocks do not divide N (B_c = B_r = 9; B_c = B_r = 3), causal and not
EXACTNESS = [dict(n=n, d=d, m=m, causal=c) for n, d, m in ((200, 16, 1600), (97, 8, 300)) for c in (False, True)]
SDPA_N = (256, 512, 1024, 2048, 4096)
SDPA_D = (32, 64, 128)
SDPA_BH = ((1, 4), (1, 16), (4, 16))
SMOKE_BH = (1, 8)
SMOKE_GPT2_BATCH = 4
TRAIN = dict(model="llama-tiny", nproc=1, seq_len=1024, micro_batch=2, eval_every=100, eval_batches=1, log_every=2)
TRAIN_STEPS = 6


def _io_items() -> list[Microbench]:
    def item(name: str, shapes: list[dict]) -> Microbench:
        return Microbench(name, f"{MICRO}:io", shapes, warmup=0, repeat=1, provenance="counted")

    n_sweep = [dict(n=n, d=SWEEP_D_FIXED, m=SWEEP_M_FIXED, causal=c) for c in (False, True) for n in SWEEP_N]
    gpt2 = [dict(**PAPER_SHAPE, m=A100_M, causal=c, heads=PAPER_HEADS * PAPER_BATCH) for c in (True, False)]
    return [
        item("io-n", n_sweep),
        item("io-d", [dict(n=SWEEP_N_FIXED, d=d, m=SWEEP_M_FIXED) for d in SWEEP_D]),
        item("io-m", [dict(n=SWEEP_N_FIXED, d=SWEEP_D_FIXED, m=m) for m in SWEEP_M]),
        item("io-gpt2", gpt2),
        Microbench("exactness", f"{MICRO}:exactness", EXACTNESS, warmup=0, repeat=1),
    ]


def _sdpa_items(device: str, backends: list[str], dtype: str, bh: tuple[int, int], gpt2_batch: int) -> list[Microbench]:
    def shapes(**sweep) -> list[dict]:
        """One swept field (or fields joined by _, e.g. batch_heads with tuple values) over the base shape."""
        ((key, values),) = sweep.items()
        base = dict(d=64, n=1024, batch=bh[0], heads=bh[1], causal=True, dtype=dtype)
        return [
            {**base, **dict(zip(key.split("_"), v if isinstance(v, tuple) else (v,))), "backend": b, "backward": bw}
            for bw in (False, True)
            for b in backends
            for v in values
        ]

    def item(name: str, shape_list: list[dict], repeat: int = 5) -> Microbench:
        return Microbench(name, f"{MICRO}:sdpa", shape_list, device=device, warmup=1, repeat=repeat)

    gpt2 = [
        dict(**PAPER_SHAPE, batch=gpt2_batch, heads=PAPER_HEADS, causal=True, backward=True, dtype=dtype, backend=b)
        for b in backends
    ]
    return [
        item("sdpa-n", shapes(n=SDPA_N)),
        item("sdpa-d", shapes(d=SDPA_D)),
        item("sdpa-bh", shapes(batch_heads=SDPA_BH)),
        item("sdpa-gpt2", gpt2),
    ]


def _train_runs() -> list[RunConfig]:
    tokens = TRAIN_STEPS * TRAIN["micro_batch"] * TRAIN["seq_len"]
    return [RunConfig(method=m, tokens=tokens, **TRAIN) for m in ("sdpa-math", "sdpa-flash")]


def _smoke() -> tuple[list[RunConfig], list[Microbench]]:
    micro = [
        *_io_items(),
        *_sdpa_items("cpu", available_backends("cpu"), "float32", SMOKE_BH, SMOKE_GPT2_BATCH),
        Microbench("matmul", f"{MICRO}:matmul", [dict(n=2048)], warmup=1, repeat=5),
    ]
    return _train_runs(), micro


def _gpu() -> tuple[list[RunConfig], list[Microbench]]:
    if not torch.cuda.is_available():
        raise ValueError("the flash-io gpu preset needs a CUDA device; use --preset smoke on this machine")
    backends = available_backends("cuda", "float16")
    profiled = [dict(**PAPER_SHAPE, batch=PAPER_BATCH, heads=PAPER_HEADS, causal=True, backend=b) for b in backends]
    micro = [
        *_io_items(),
        *_sdpa_items("cuda", backends, "float16", (8, PAPER_HEADS), PAPER_BATCH),
        Microbench("profile-gpt2", f"{MICRO}:profiled", profiled, device="cuda", warmup=1, repeat=1),
        Microbench("dram-gpt2", f"{MICRO}:dram_bytes", profiled, device="cuda", warmup=0, repeat=1, once=True),
        Microbench("matmul", f"{MICRO}:matmul", [dict(n=8192, dtype="float16")], device="cuda", warmup=2, repeat=10),
    ]
    # bf16 autocast: on CUDA the flash kernel takes half precision only (the math backend runs the same casts)
    runs = [RunConfig(**{**cfg.__dict__, "device": "cuda", "precision": "bf16"}) for cfg in _train_runs()]
    return runs, micro


def plan(preset: str) -> Plan:
    runs, micro = _gpu() if preset in ("gpu", "paper") else _smoke()
    notes = []
    if preset == "paper":
        notes.append("flash-io's paper preset is its gpu preset: the paper's configuration on one GPU")
    return Plan(
        preset,
        runs,
        protocol="microbenchmark: same shapes for every backend; training runs at equal tokens",
        claims=Path(__file__).with_name("claims.yaml"),
        notes=notes,
        micro=micro,
    )
