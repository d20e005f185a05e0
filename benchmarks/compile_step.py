"""Does torch.compile speed up a CPU training step of the models the quality presets train? Eager against compiled.

    python -m benchmarks.compile_step [--model llama-tiny] [--steps 30] [--warmup 5] [--rounds 2] [--threads 2]

One process, the bare loop's step (benchmarks/bare_loop.py: the suite's AdamW groups, clipping at 1.0), the same
initial weights and batches for both arms; the compiled arm trains `torch.compile(model)` (inductor, C++ kernels
on CPU). Rounds alternate the order (eager first, then compiled first) so a change of the machine's load lands on
both. Per step it reads this process's CPU seconds (all threads), which other processes on a shared machine move
far less than wall time, and wall seconds. Prints one JSON line: the first compiled step's wall seconds (the
compilation), each arm's median CPU and wall seconds per step after warm-up, compiled / eager, and the largest
difference between the two arms' training losses at the same step (the kernels reorder float sums, so the
losses are close, not equal).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch

from benchmarks.bare_loop import adamw, train_step
from suite import models
from suite.timing import load_average


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.compile_step", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="llama-tiny")
    p.add_argument("--steps", type=int, default=30, help="timed steps per arm and round")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first (the compiled arm compiles in its first)")
    p.add_argument("--rounds", type=int, default=2, help="rounds of both arms, alternating which goes first")
    p.add_argument("--threads", type=int, default=2, help="torch's intra-op threads (the launcher's cores / nproc)")
    p.add_argument("--micro-batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=128)
    args = p.parse_args(argv)
    if min(args.steps, args.rounds, args.threads) < 1 or args.warmup < 1:
        p.error("--steps, --rounds and --threads must be at least 1, --warmup at least 1 (compilation happens there)")
    return args


def run_arm(args: argparse.Namespace, compiled: bool) -> dict:
    """One arm from seed 0: its losses, CPU and wall seconds of every step (warm-up included)."""
    torch.manual_seed(0)
    model = models.build_model(args.model, max_seq_len=args.seq_len)
    opt = adamw(model)
    trained = torch.compile(model) if compiled else model
    vocab = models.model_config(args.model)["vocab_size"]
    gen = torch.Generator().manual_seed(0)
    losses, cpu, wall = [], [], []
    for _ in range(args.warmup + args.steps):
        tokens = torch.randint(0, vocab, (args.micro_batch, args.seq_len + 1), generator=gen)
        start, cpu_start = time.perf_counter(), time.process_time()
        losses.append(train_step(trained, opt, tokens, clip=1.0).item())
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - cpu_start)
    return {"losses": losses, "cpu": cpu, "wall": wall}


def compare(args: argparse.Namespace) -> dict:
    torch.set_num_threads(args.threads)
    load_before = load_average()
    arms: dict[bool, list[dict]] = {False: [], True: []}
    for r in range(args.rounds):
        for compiled in (False, True) if r % 2 == 0 else (True, False):
            arms[compiled].append(run_arm(args, compiled))
    timed = slice(args.warmup, None)

    def median(compiled: bool, clock: str) -> float:
        return statistics.median(t for run in arms[compiled] for t in run[clock][timed])

    eager, compiled = arms[False][0]["losses"], arms[True][0]["losses"]
    return {
        "model": args.model,
        "micro_batch": args.micro_batch,
        "seq_len": args.seq_len,
        "threads": args.threads,
        "steps": args.steps,
        "rounds": args.rounds,
        "torch": torch.__version__,
        "compile_first_step_wall_s": arms[True][0]["wall"][0],
        "eager_cpu_step_s": median(False, "cpu"),
        "compiled_cpu_step_s": median(True, "cpu"),
        "cpu_ratio_compiled_over_eager": median(True, "cpu") / median(False, "cpu"),
        "eager_wall_step_s": median(False, "wall"),
        "compiled_wall_step_s": median(True, "wall"),
        "wall_ratio_compiled_over_eager": median(True, "wall") / median(False, "wall"),
        "max_abs_loss_difference": max(abs(a - b) for a, b in zip(eager, compiled)),
        "final_losses": [eager[-1], compiled[-1]],
        "load_average": [load_before, load_average()],
        "cores": os.cpu_count(),
    }


def main(argv: list[str] | None = None) -> None:
    print(json.dumps(compare(parse_args(argv))), flush=True)


if __name__ == "__main__":
    main()
