"""One forward + backward of scaled_dot_product_attention with a forced backend, inside an NVTX range
named "attention" on CUDA: the process Nsight Compute profiles (ncu.py). Inputs are made and the backend is
warmed up outside the range, so only the attention kernels are counted.

    python -m reproductions.flash_io.kernel --backend flash --n 1024 --d 64 --batch 64 --heads 16 --causal
"""

from __future__ import annotations

import argparse
from contextlib import nullcontext

import torch

from reproductions.flash_io.micro import BACKENDS, sdpa
from reproductions.flash_io.ncu import RANGE


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", choices=sorted(BACKENDS), required=True)
    for name in ("n", "d", "batch", "heads"):
        p.add_argument(f"--{name}", type=int, required=True)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--dtype", default="float16")
    p.add_argument("--device", default="cuda")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    work = sdpa(device, args.backend, args.n, args.d, args.batch, args.heads, args.causal, True, args.dtype)
    work()
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
    with torch.cuda.nvtx.range(RANGE) if cuda else nullcontext():
        work()
        if cuda:
            torch.cuda.synchronize(device)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
