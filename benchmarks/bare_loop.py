"""The reference for the suite's own overhead: a bare training loop of the suite's llama-tiny.

    python -m benchmarks.bare_loop --nproc 1|2 --steps N [--warmup W] [--ddp] [--clock wall|cpu]

Same model, micro-batch (8 x 128 tokens), optimizer (foreach AdamW, decay on matrices and the head only) and
clipping (1.0) as `python -m suite run ddp --model llama-tiny --set micro_batch=8 --set seq_len=128`,
and nothing else: random token ids, no meters, no records, no control messages. Prints one JSON line
with the median step time after warm-up (rank 0's; the ranks wait for each other in DDP's all-reduce) and each
rank's median CPU seconds per step.

Workers are spawned fresh, as the suite's launcher starts them, so they take OMP_NUM_THREADS
(cores / nproc, as suite/run/launch.py sets it) and the allocator variables (MALLOC_*) of this process's
environment at start-up: set those in the shell to compare allocator settings.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from suite import models

MODEL = "llama-tiny"
# the name a bench pair gives this loop (benchmarks/pairs.py: "suite/bare-loop")
BARE_LOOP = "bare-loop"
# the suite's RunConfig defaults for the matched AdamW
LR, BETAS, WEIGHT_DECAY = 3e-3, (0.9, 0.95), 0.1
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bare_loop", description=__doc__.split("\n\n")[0])
    p.add_argument("--nproc", type=int, choices=(1, 2), default=1)
    p.add_argument("--steps", type=int, default=20, help="timed steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    p.add_argument("--ddp", action="store_true", help="wrap in DDP on a gloo group of --nproc processes")
    p.add_argument("--micro-batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--clip", type=float, default=1.0, help="max gradient norm; 0: no clipping")
    p.add_argument(
        "--clock",
        choices=tuple(CLOCKS),
        default="wall",
        help="cpu: this process's CPU seconds (all threads, user + system), which other processes on a "
        "shared machine move far less than wall time; compare at OMP_NUM_THREADS=1, where no thread spins",
    )
    args = p.parse_args(argv)
    if args.nproc > 1 and not args.ddp:
        p.error("--nproc 2 needs --ddp: processes without DDP would just be independent loops")
    return args


def adamw(model: nn.Module) -> torch.optim.Optimizer:
    """Two groups as the suite's AdamW: decay on 2-D weights but embeddings (matrices, head), none on the rest."""
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    decayed = [p for p in model.parameters() if p.ndim >= 2 and id(p) not in embeddings]
    kept = {id(p) for p in decayed}
    rest = [p for p in model.parameters() if id(p) not in kept]
    groups = [{"params": decayed, "weight_decay": WEIGHT_DECAY}, {"params": rest, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=LR, betas=BETAS, foreach=True)


def wrap_ddp(model: nn.Module) -> nn.Module:
    # as the suite's DDP: no buffer broadcast each forward (the flag was renamed in torch 2.14)
    flag = (
        "forward_sync_buffers"
        if "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters
        else "broadcast_buffers"
    )
    return DistributedDataParallel(model, **{flag: False})


def train_step(model: nn.Module, opt: torch.optim.Optimizer, tokens: torch.Tensor, clip: float) -> torch.Tensor:
    """One step; the loss, detached (benchmarks/compile_step.py compares two arms' losses)."""
    out = model(tokens[:, :-1])
    loss = F.cross_entropy(out.reshape(-1, out.shape[-1]).float(), tokens[:, 1:].reshape(-1))
    loss.backward()
    if clip > 0:
        nn.utils.clip_grad_norm_(model.parameters(), clip, foreach=True)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.detach()


def step_times(args: argparse.Namespace) -> tuple[list[float], list[float]]:
    """Seconds of each step after warm-up on `args.clock`, and CPU seconds of this process in each, drawing its
    batch included (the suite's step does)."""
    torch.manual_seed(0)
    model = models.build_model(MODEL, max_seq_len=args.seq_len)
    vocab = models.model_config(MODEL)["vocab_size"]
    if args.ddp:
        model = wrap_ddp(model)
    opt = adamw(model)
    gen = torch.Generator().manual_seed(dist.get_rank() if dist.is_initialized() else 0)
    clock, times, cpu_times = CLOCKS[args.clock], [], []
    for step in range(args.warmup + args.steps):
        start, cpu_start = clock(), time.process_time()
        tokens = torch.randint(0, vocab, (args.micro_batch, args.seq_len + 1), generator=gen)
        train_step(model, opt, tokens, args.clip)
        if step >= args.warmup:
            times.append(clock() - start)
            cpu_times.append(time.process_time() - cpu_start)
    return times, cpu_times


def worker(rank: int, args: argparse.Namespace, port: int) -> None:
    if args.ddp:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.nproc)
    times, cpu_times = step_times(args)
    cpu_per_rank = [statistics.median(cpu_times)]
    if args.ddp:
        cpu_per_rank = [None] * args.nproc
        dist.all_gather_object(cpu_per_rank, statistics.median(cpu_times))
    if rank == 0:
        print(json.dumps(summary(args, times, cpu_per_rank)), flush=True)
    if args.ddp:
        dist.destroy_process_group()


def summary(args: argparse.Namespace, times: list[float], cpu_per_rank: list[float]) -> dict:
    tokens = args.micro_batch * args.seq_len * args.nproc
    median = statistics.median(times)
    return {
        "model": MODEL,
        "nproc": args.nproc,
        "ddp": args.ddp,
        "micro_batch": args.micro_batch,
        "seq_len": args.seq_len,
        "clip": args.clip,
        "steps": len(times),
        "warmup": args.warmup,
        "clock": args.clock,
        "step_s_median": median,
        "step_s_min": min(times),
        "step_s_max": max(times),
        "tokens_per_s": tokens / median,
        # each rank's median CPU seconds per step (user + system of its process), and their median
        "cpu_step_s_per_rank": cpu_per_rank,
        "cpu_step_s_median": statistics.median(cpu_per_rank),
        "threads": torch.get_num_threads(),
        "env": {k: v for k, v in os.environ.items() if k.startswith("MALLOC_") or k == "OMP_NUM_THREADS"},
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    # before the workers start: OpenMP reads it once, at their import of torch (suite/run/launch.py does the same)
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // args.nproc)))
    mp.start_processes(worker, args=(args, free_port()), nprocs=args.nproc, start_method="spawn")


if __name__ == "__main__":
    main()
