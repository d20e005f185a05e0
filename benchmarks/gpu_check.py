"""One prepared check for a GPU node (one H200, about 10 minutes in all): `nox -s gpu-check`.

    python -m benchmarks.gpu_check [--dry-run] [--gpus N] [--budget SECONDS] [--results results/gpu] [--no-install]

Uses the node's own torch: it installs only the project and what the node lacks (`pip install -e .` with
torch held at the installed version by a constraint, so pip never fetches another torch), then runs, each
command under its own time limit and each step within its share of the budget:

1. the estimator against a measurement on CUDA: `estimate fsdp --model llama-134m --world-size 1 --measure`;
2. the baselines' gpu preset, every run shortened to SHORT_STEPS steps;
3. the SDP gpu preset with one seed (SDP_SEEDS=1), shortened; it needs 2 GPUs, so one GPU skips it;
4. the GPU items of the other reproductions: fl-fsdp (needs 4 GPUs), dion and flash-io, their gpu presets'
   runs shortened (one seed) and their microbenchmark items (`suite micro NAME ITEM --preset gpu`).

Records go under results/gpu/<step>/, each command's output under results/gpu/logs/, and a summary of every
command (status: ok, failed, timed out, not run; seconds; records written) to results/gpu/summary.json and
summary.md. A command that runs out of time is stopped with its process group and the check goes on; the exit
status is 1 only when a command failed, 0 otherwise. `--dry-run` prints every command with its limit and runs
none (tests/test_gpu_check.py parses each with the suite's own argument parser); `--gpus N` then builds the
plans as on a node with N GPUs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHORT_STEPS = 20  # training steps of each shortened run: enough for step times past warm-up and the meters
RUN_LIMIT_S = 60  # one shortened run: start-up (CUDA, NCCL, importing torch) is most of it
MICRO_LIMIT_S = 45
ESTIMATE_LIMIT_S = 120
# each step's share of the budget in seconds, 600 in all; a step runs its commands in order until its share is
# spent (the rest are listed as not run), so the first command of each step is the one that matters most
SHARES = {"install": 60, "estimate": 120, "baselines": 180, "sdp": 45, "fl-fsdp": 15, "dion": 90, "flash-io": 90}
IMAGE_MODELS = ("resnet", "wrn", "swin")


@dataclass
class Command:
    step: str
    argv: list[str]
    limit_s: float
    env: dict[str, str] = field(default_factory=dict)
    status: str = "not run"
    seconds: float = 0.0
    records: list[str] = field(default_factory=list)

    def line(self) -> str:
        env = " ".join(f"{k}={v}" for k, v in self.env.items())
        return f"{env + ' ' if env else ''}{shlex.join(self.argv)}"


@dataclass
class Step:
    name: str
    commands: list[Command]
    share_s: float
    skipped: str | None = None  # why the step cannot run on this node


def install_command() -> Command:
    """pip install of the project, torch held at the node's version (the constraint file is written at run time)."""
    argv = [sys.executable, "-m", "pip", "install", "-q", "-e", ".", "-c", "{torch_constraint}"]
    return Command("install", argv, SHARES["install"])


@contextmanager
def pretend_gpus(n: int | None):
    """Plans read torch.cuda.device_count(); a dry run on a CPU machine builds them as on a node with `n` GPUs."""
    import torch

    if n is None:
        yield
        return
    saved = torch.cuda.device_count, torch.cuda.is_available
    torch.cuda.device_count, torch.cuda.is_available = (lambda: n), (lambda: n > 0)
    try:
        yield
    finally:
        torch.cuda.device_count, torch.cuda.is_available = saved


def shortened(cfg, steps: int = SHORT_STEPS):
    """`cfg` with a token budget of `steps` steps (samples for image models) and one evaluation, at the end."""
    per_step = cfg.nproc * cfg.micro_batch * cfg.grad_accum
    if not cfg.model.startswith(IMAGE_MODELS):
        per_step *= cfg.seq_len
    return dataclasses.replace(
        cfg, tokens=steps * per_step, flops=None, time_s=None, target=None, eval_every=steps, run_id=None
    )


def run_commands(name: str, results: Path, env: dict[str, str] | None = None, one_seed: bool = True) -> list[Command]:
    """The plan's microbenchmark items, then one shortened run of each kind of arm (method, optimizer,
    activation checkpointing, precision; seed 0 with `one_seed`; not its sweeps), as suite commands."""
    from suite.config import command_line
    from suite.plan.plans import load_plan

    plan = load_plan(name, "gpu")
    kinds = {}
    for cfg in plan.runs:
        if cfg.reproduction in (None, "", plan.name) and (not one_seed or cfg.seed == 0):
            kinds.setdefault((cfg.method, cfg.optimizer, cfg.ac, cfg.precision, cfg.model), shortened(cfg))
    micro = [
        Command(
            name,
            [
                sys.executable,
                "-m",
                "suite",
                "micro",
                name,
                item.name,
                "--preset",
                "gpu",
                "--results",
                str(results / name),
            ],
            MICRO_LIMIT_S,
            env or {},
        )
        for item in plan.micro
    ]
    runs = [
        Command(
            name,
            [sys.executable, *command_line(cfg).split()[1:], "--results", str(results / name)],
            RUN_LIMIT_S,
            env or {},
        )
        for cfg in kinds.values()
    ]
    return micro + runs


PLAN_LIMIT_S = 60  # building a plan: SDP's gpu preset counts the FLOPs of one llama-134m step on the CPU
DRY_RUN_MEMORY = 8 * 2**30  # a dry run on a shared CPU machine must not build a GPU-sized model in full


def plan_step(name: str, results: Path, env: dict[str, str] | None = None, gpus: int | None = None) -> Step:
    """A reproduction's gpu items as a step, its plan built in a child process within PLAN_LIMIT_S (and, in a dry
    run, DRY_RUN_MEMORY); a preset this node cannot run (too few GPUs) is skipped with the plan's reason."""
    argv = [sys.executable, "-m", "benchmarks.gpu_check", "--commands-of", name, "--results", str(results)]
    argv += [] if gpus is None else ["--gpus", str(gpus), "--dry-run"]

    def limit_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (DRY_RUN_MEMORY, DRY_RUN_MEMORY))

    try:
        proc = subprocess.run(
            argv,
            cwd=ROOT,
            env={**os.environ, **(env or {})},
            capture_output=True,
            text=True,
            timeout=PLAN_LIMIT_S,
            preexec_fn=limit_memory if gpus is not None else None,
        )
    except subprocess.TimeoutExpired:
        return Step(name, [], SHARES[name], skipped=f"building its gpu plan took over {PLAN_LIMIT_S} s")
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return Step(name, [], SHARES[name], skipped=f"its gpu plan could not be built here: {last}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if out.get("skipped"):
        return Step(name, [], SHARES[name], skipped=out["skipped"])
    commands = [Command(name, c["argv"], c["limit_s"], env or {}) for c in out["commands"]]
    return Step(name, commands, SHARES[name])


def commands_of(name: str, results: Path, gpus: int | None) -> dict:
    """What `plan_step` reads from its child process: the commands of one reproduction's gpu preset, or why not."""
    from suite.errors import UsageError

    try:
        with pretend_gpus(gpus):
            return {"commands": [{"argv": c.argv, "limit_s": c.limit_s} for c in run_commands(name, results)]}
    except (ValueError, UsageError, RuntimeError) as err:  # RuntimeError: a plan that probes CUDA, on a CPU
        return {"skipped": str(err).splitlines()[0]}


def steps(results: Path, gpus: int | None = None, install: bool = True) -> list[Step]:
    """Every step of the check, in order, with its commands."""
    estimate = [sys.executable, "-m", "suite", "estimate", "fsdp", "--model", "llama-134m", "--world-size", "1"]
    estimate += ["--measure", "--device", "cuda", "--results", str(results / "estimate")]
    out = [Step("install", [install_command()], SHARES["install"], skipped=None if install else "--no-install")]
    out.append(Step("estimate", [Command("estimate", estimate, ESTIMATE_LIMIT_S)], SHARES["estimate"]))
    out.append(plan_step("baselines", results, gpus=gpus))
    out.append(plan_step("sdp", results, {"SDP_SEEDS": "1"}, gpus))
    for name in ("fl-fsdp", "dion", "flash-io"):
        out.append(plan_step(name, results, gpus=gpus))
    return out


def run_one(cmd: Command, limit_s: float, logs: Path, results: Path) -> None:
    """Run `cmd` within `limit_s`; on time-out stop its whole process group (torchrun's workers too)."""
    before = set(results.rglob("*.json"))
    log = logs / f"{cmd.step}-{len(list(logs.glob(cmd.step + '-*')))}.log"
    start = time.perf_counter()
    with log.open("w") as out:
        out.write(cmd.line() + "\n")
        out.flush()
        proc = subprocess.Popen(
            cmd.argv,
            cwd=ROOT,
            env={**os.environ, **cmd.env},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            code = proc.wait(timeout=limit_s)
            cmd.status = "ok" if code == 0 else f"failed (status {code})"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            cmd.status = f"timed out after {limit_s:.0f} s"
    cmd.seconds = time.perf_counter() - start
    cmd.records = sorted(
        str(p.relative_to(ROOT)) for p in set(results.rglob("*.json")) - before if p.name != "summary.json"
    )


def torch_constraint(folder: Path) -> str:
    import torch

    path = folder / "constraints.txt"
    path.write_text(f"torch=={torch.__version__}\n")
    return str(path)


def execute(plan: list[Step], results: Path, budget_s: float, carry_s: float = 0.0) -> float:
    """Run each step's commands within its share plus what the steps before it left unspent (a skipped step's
    whole share: on one GPU the multi-GPU presets' minutes go to the steps after them); returns what is left."""
    logs = results / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + budget_s
    for step in plan:
        if step.skipped:
            carry_s += step.share_s
            continue
        share, spent = step.share_s + carry_s, 0.0
        for cmd in step.commands:
            left = min(share - spent, deadline - time.monotonic())
            if left < 5:
                cmd.status = "not run (the step's share of the budget was spent)"
                continue
            run_one(cmd, min(cmd.limit_s, left), logs, results)
            spent += cmd.seconds
        carry_s = max(0.0, share - spent)
    return carry_s


def summary(plan: list[Step], results: Path, dry_run: bool) -> dict:
    return {
        "what": "nox -s gpu-check (benchmarks/gpu_check.py)",
        "dry_run": dry_run,
        "steps": [
            {
                "step": s.name,
                "share_s": s.share_s,
                "skipped": s.skipped,
                "commands": [
                    {
                        "command": c.line(),
                        "limit_s": c.limit_s,
                        "status": c.status,
                        "seconds": round(c.seconds, 1),
                        "records": c.records,
                    }
                    for c in s.commands
                ],
            }
            for s in plan
        ],
    }


def markdown(report: dict) -> str:
    lines = [
        "# GPU check",
        "",
        "| step | command | limit s | status | seconds | records |",
        "|---|---|---|---|---|---|",
    ]
    for s in report["steps"]:
        if s["skipped"]:
            lines.append(f"| {s['step']} | - | {s['share_s']} | skipped: {s['skipped']} | 0 | 0 |")
        for c in s["commands"]:
            lines.append(
                f"| {s['step']} | `{c['command']}` | {c['limit_s']:.0f} | {c['status']} | {c['seconds']} | "
                f"{len(c['records'])} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gpu_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--dry-run", action="store_true", help="print the commands and their limits; run nothing")
    p.add_argument("--gpus", type=int, help="with --dry-run: build the plans as on a node with this many GPUs")
    p.add_argument("--budget", type=float, default=sum(SHARES.values()), help="seconds for the whole check")
    p.add_argument("--results", type=Path, default=Path("results/gpu"))
    p.add_argument("--no-install", action="store_true", help="the project is installed already")
    p.add_argument("--commands-of", metavar="NAME", help=argparse.SUPPRESS)  # one plan's commands, as JSON
    args = p.parse_args(argv)
    if args.gpus is not None and not args.dry_run:
        p.error("--gpus only goes with --dry-run: a real check uses the GPUs it finds")
    results = args.results if args.results.is_absolute() else ROOT / args.results
    if args.commands_of:
        print(json.dumps(commands_of(args.commands_of, args.results, args.gpus)))
        return 0
    if args.dry_run:
        plan = steps(args.results, args.gpus, install=not args.no_install)
        for step in plan:
            print(f"# {step.name} (share {step.share_s:.0f} s){': skipped, ' + step.skipped if step.skipped else ''}")
            for cmd in step.commands:
                print(f"[{cmd.limit_s:.0f} s] {cmd.line()}")
        print(f"# budget {args.budget:.0f} s; shares sum to {sum(s.share_s for s in plan):.0f} s")
        return 0
    results.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        install = Step(
            "install", [install_command()], SHARES["install"], skipped="--no-install" if args.no_install else None
        )
        install.commands[0].argv = [
            a.replace("{torch_constraint}", torch_constraint(Path(tmp))) for a in install.commands[0].argv
        ]
        carry = execute([install], results, args.budget)
        rest = [s for s in steps(args.results, install=False) if s.name != "install"]
        execute(rest, results, args.budget - (time.monotonic() - start), carry)
        done = [install, *rest]
    report = summary(done, results, dry_run=False)
    (results / "summary.json").write_text(json.dumps(report, indent=1) + "\n")
    (results / "summary.md").write_text(markdown(report))
    print(markdown(report))
    return 1 if any(c.status.startswith("failed") for s in done for c in s.commands) else 0


if __name__ == "__main__":
    sys.exit(main())
