"""python -m suite {run,reproduce,report,verdicts,evaluate,estimate,simulate}: the command-line contract of DESIGN.md.

Input is checked here, before any worker starts, so that a mistake costs one line of error naming
the fix instead of a traceback from inside torch and a half-written record.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import sys
import tempfile
from pathlib import Path

from suite.claims import ClaimsError
from suite.config import RunConfig, apply_sets
from suite.errors import UsageError
from suite.evals import add_evaluate_command


def _run_parser(sub) -> None:
    p = sub.add_parser("run", help="one training run; prints the record's path last")
    p.add_argument("method", nargs="?", help="a baseline (ddp, fsdp, hsdp) or a method")
    p.add_argument("--model", default=RunConfig.model)
    p.add_argument("--nproc", type=int, default=RunConfig.nproc, help="workers on this machine")
    p.add_argument("--device", choices=("cpu", "cuda"), default=RunConfig.device)
    budget = p.add_argument_group("budget (exactly one)")
    budget.add_argument("--tokens", type=float, help="global tokens over all workers")
    budget.add_argument("--flops", type=float, help="model FLOPs over all workers")
    budget.add_argument("--time", type=float, dest="time_s", help="training wall-clock seconds")
    budget.add_argument("--target", type=float, help="validation loss to reach (stops at --max-tokens)")
    p.add_argument("--max-tokens", type=float, default=RunConfig.max_tokens, help="token cap of a --target run")
    p.add_argument("--seed", type=int, default=RunConfig.seed)
    p.add_argument("--results", default=RunConfig.results)
    p.add_argument("--ac", action="store_true", help="activation checkpointing of every block")
    p.add_argument("--precision", default=RunConfig.precision, help="fp32 or bf16")
    p.add_argument("--optimizer", default=RunConfig.optimizer)
    p.add_argument("--data", help="text (embedded), fineweb, fineweb-edu, digits (embedded), cifar10, cifar100")
    p.add_argument("--data-root", help="folder of local data files (FineWeb parquet, CIFAR)")
    p.add_argument("--no-meters", dest="meters", action="store_false", help="turn the meters off")
    p.add_argument("--evals", default="", help="lm-eval tasks on the final model: local (heldout_next) or hub names")
    p.add_argument("--checkpoint", help="save the final full model here (for `python -m suite evaluate`)")
    p.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config field (lr, micro_batch, seq_len, ...) or a method parameter",
    )
    faults = p.add_argument_group("checkpoints and faults (README: Checkpoints, resuming, faults)")
    faults.add_argument("--checkpoint-every", type=int, default=0, metavar="STEPS", help="DCP checkpoint cadence")
    faults.add_argument("--resume", metavar="RECORD", help="continue an incomplete run from its newest checkpoint")
    faults.add_argument(
        "--max-restarts", type=int, default=0, help="torchrun restarts the workers from the last checkpoint"
    )
    faults.add_argument(
        "--collective-timeout",
        type=float,
        default=RunConfig.collective_timeout_s,
        metavar="SECONDS",
        help="a collective waiting longer fails the run",
    )
    faults.add_argument("--kill-rank", type=int, metavar="R", help="fault injection: worker R dies at --at-step")
    faults.add_argument("--hang-rank", type=int, metavar="R", help="fault injection: worker R stops answering")
    faults.add_argument("--at-step", type=int, dest="fault_step", metavar="S", help="the step a fault happens at")


def config_from_args(args: argparse.Namespace, argv: list[str]) -> RunConfig:
    cfg = RunConfig(
        method=args.method,
        model=args.model,
        nproc=args.nproc,
        device=args.device,
        tokens=args.tokens,
        flops=args.flops,
        time_s=args.time_s,
        target=args.target,
        max_tokens=args.max_tokens,
        seed=args.seed,
        results=args.results,
        ac=args.ac,
        precision=args.precision,
        optimizer=args.optimizer,
        data=args.data,
        data_root=args.data_root,
        meters=args.meters,
        evals=args.evals,
        checkpoint=args.checkpoint,
        checkpoint_every=args.checkpoint_every,
        max_restarts=args.max_restarts,
        collective_timeout_s=args.collective_timeout,
        kill_rank=args.kill_rank,
        hang_rank=args.hang_rank,
        fault_step=args.fault_step,
    )
    cfg.command = shlex.join(["python", "-m", "suite", *argv])
    try:
        return apply_sets(cfg, args.sets)
    except ValueError as err:
        raise UsageError(str(err)) from None


def check_config(cfg: RunConfig) -> None:
    """Every check that needs no worker; raises UsageError with the fix."""
    from suite import data, models, optim, protocols, strategy
    from suite.config import check_lr_decay, check_precision

    try:
        protocols.from_args(cfg.tokens, cfg.flops, cfg.time_s, cfg.target, cfg.max_tokens)
        check_lr_decay(cfg)
        kind = models.kind_of(cfg.model)
        check_precision(cfg.precision)
        method_params, _ = optim.split_variant(cfg)
        if cfg.nproc < 1:
            raise ValueError(f"--nproc must be at least 1, got {cfg.nproc}")
        if not 0 <= cfg.seed < 2**63:
            raise ValueError(f"--seed must be in [0, 2**63), got {cfg.seed}")
        if cfg.micro_batch < 1 or cfg.grad_accum < 1 or cfg.seq_len < 2:
            raise ValueError("micro_batch and grad_accum must be >= 1 and seq_len >= 2 (--set KEY=VALUE)")
        _check_faults(cfg)
        _check_data(cfg.data or data.default_data_for(kind), cfg.data_root)
        strategy.get_strategy(cfg, method_params).check(cfg.nproc)
        if cfg.evals:
            from suite.evals import check_evals

            check_evals([n for n in cfg.evals.split(",") if n])
    except (ValueError, FileNotFoundError, ConnectionError) as err:
        raise UsageError(str(err)) from None
    if cfg.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UsageError("--device cuda but no CUDA device is visible; use --device cpu")
        if cfg.nproc > torch.cuda.device_count():
            raise UsageError(f"--nproc {cfg.nproc} but only {torch.cuda.device_count()} GPUs; lower --nproc")
    _check_writable(Path(cfg.results))


def _check_faults(cfg: RunConfig) -> None:
    if cfg.checkpoint_every < 0 or cfg.max_restarts < 0:
        raise ValueError("--checkpoint-every and --max-restarts must be 0 (off) or more")
    if not cfg.collective_timeout_s > 0:
        raise ValueError(f"--collective-timeout must be a positive number of seconds, got {cfg.collective_timeout_s}")
    if cfg.kill_rank is not None and cfg.hang_rank is not None:
        raise ValueError("inject one fault per run: --kill-rank or --hang-rank, not both")
    rank = cfg.kill_rank if cfg.kill_rank is not None else cfg.hang_rank
    if (rank is None) != (cfg.fault_step is None):
        raise ValueError("fault injection takes both --kill-rank (or --hang-rank) R and --at-step S")
    if rank is not None and not (0 <= rank < cfg.nproc and cfg.fault_step >= 0):
        raise ValueError(f"--kill-rank/--hang-rank must name a worker in 0..{cfg.nproc - 1} and --at-step be >= 0")


def _check_data(name: str, root: str | None) -> None:
    from suite import data

    if name not in data.NAMES:
        raise ValueError(f"unknown data set {name!r}; choose one of: {', '.join(data.NAMES)}")
    if root is not None and not Path(root).exists():
        raise FileNotFoundError(
            f"no data at --data-root {root!r}; download it first (see README, Data) "
            f"or drop --data-root to use the embedded default"
        )


def _check_writable(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-check-"):
            pass
    except OSError as err:
        raise UsageError(
            f"cannot write run records to {str(folder)!r} ({err.strerror}); choose a writable folder with --results DIR"
        ) from None


def resume_config(record_path: str) -> RunConfig:
    """The config of the incomplete run `record_path`, set to continue from its newest checkpoint."""
    from suite import checkpoint
    from suite.records import RecordError, read_record

    try:
        rec = read_record(record_path)
    except FileNotFoundError:
        raise UsageError(f"no record at {record_path!r}; give the path `run` printed") from None
    except RecordError as err:
        raise UsageError(str(err)) from None
    if rec["status"] == "complete":
        raise UsageError(f"{record_path} is complete: nothing to resume")
    try:
        return checkpoint.resumable_config(rec | {"_path": record_path})
    except checkpoint.CheckpointError as err:
        raise UsageError(f"{record_path} cannot be resumed: {err}; run it again instead") from None


def cmd_run(args: argparse.Namespace, argv: list[str]) -> int:
    from suite.launch import launch, under_torchrun

    if args.resume and args.method:
        raise UsageError("--resume continues a run as it was configured: give the record alone, no method or flags")
    if not args.resume and not args.method:
        raise UsageError("name a method: python -m suite run METHOD (or --resume RECORD)")
    cfg = resume_config(args.resume) if args.resume else config_from_args(args, argv)
    if under_torchrun():
        cfg.nproc = int(os.environ["WORLD_SIZE"])
    check_config(cfg)
    if under_torchrun():
        from suite.train import train

        path = train(cfg)
        if int(os.environ.get("RANK", 0)) == 0:
            print(path)
        return 0
    path = launch(cfg)
    from suite.records import read_record

    status = read_record(path)["status"] if path.exists() else "failed"
    print(path)
    return 0 if status == "complete" else 1


def cmd_report(args: argparse.Namespace, argv: list[str]) -> int:
    from suite.report import build_report

    if not Path(args.results_dir).is_dir():
        raise UsageError(f"no results folder {args.results_dir!r}; give the folder that holds the run records")
    print(build_report(args.results_dir, args.output))
    return 0


def cmd_reproduce(args: argparse.Namespace, argv: list[str]) -> int:
    from suite.extensions import get_reproduction
    from suite.plans import load_plan
    from suite.reproduce import Interrupted, run_plan, table, write_summary
    from suite.timing import PlanTimer, render

    timer = PlanTimer()

    if args.list:
        return _list_reproductions()
    if args.name is None:
        raise UsageError("name a reproduction: python -m suite reproduce NAME (`--list` shows them)")
    preset = args.preset or _default_preset()
    try:
        plan = load_plan(args.name, preset)
    except ValueError as err:
        raise UsageError(str(err)) from None
    results = Path(args.results or f"results/runs/{args.name}-{preset}")
    _check_writable(results)
    on_slurm = args.launcher == "slurm"
    from suite.slurm import given

    if not on_slurm and given(args):
        raise UsageError(f"{', '.join(given(args))}: options of --launcher slurm; add it, or drop them")
    for cfg in plan.runs:  # how the runs are kept alive; not part of what they are (config.OPERATIONAL)
        cfg.checkpoint_every, cfg.max_restarts = args.checkpoint_every, args.max_restarts
    for cfg in plan.runs:
        # a cluster's nodes have the GPUs this machine (a login node) may lack
        check_config(dataclasses.replace(cfg, device="cpu") if on_slurm else cfg)
    for note in plan.notes:
        print(f"note: {note}", file=sys.stderr)
    missing = 0
    try:
        if on_slurm:
            from suite.slurm import options_from_args, run_plan_on_slurm

            outcome = run_plan_on_slurm(plan, results, options_from_args(args), args.fresh)
            if outcome is None:  # --dry-run: the scripts are printed, nothing ran
                return 0
            records, missing = outcome
        else:
            records = run_plan(plan, results, args.fresh, timer)
    except Interrupted as err:
        print(
            f"{err}: the records written so far stay in {results}; "
            "run the same command again to resume (complete records are skipped)",
            file=sys.stderr,
        )
        print(render(timer.breakdown()), file=sys.stderr)
        return 128 + err.signum
    print(table(records))
    report = Path(args.report or f"reports/{args.name}")
    with timer.item("report"):
        try:
            from suite.report import build_report

            print(build_report(results, report))
        except ImportError as err:
            print(f"report not written: {err}", file=sys.stderr)
        if (own := get_reproduction(args.name).report) is not None:
            print(own(results, report))
    print(write_summary(results, table(records), timer))
    return 0 if not missing and all(r["status"] == "complete" for r in records) else 1


def cmd_verdicts(args: argparse.Namespace, argv: list[str]) -> int:
    from suite.records import load_records
    from suite.verdicts import verdict_rows, verdict_table

    records = []
    for folder in args.results:
        if not Path(folder).is_dir():
            raise UsageError(f"no results folder {folder!r}; give folders that hold run records")
        records += load_records(folder)[0]
    try:
        rows = verdict_rows(records)
    except ClaimsError as err:
        raise UsageError(str(err)) from None
    print(json.dumps(rows, indent=1, default=str) if args.json else verdict_table(rows))
    return 0


def _list_reproductions() -> int:
    from suite.extensions import reproductions

    found = reproductions()
    width = max((len(name) for name in found), default=0)
    for name, rep in sorted(found.items()):
        adds = [
            f"{len(items)} {kind}"
            for kind in ("methods", "optimizers", "meters", "pairs")
            if (items := getattr(rep, kind))
        ]
        print(f"{name:<{width}}  {rep.description}" + (f" [{', '.join(adds)}]" if adds else ""))
    return 0


def cmd_micro(args: argparse.Namespace, argv: list[str]) -> int:
    from suite.plans import load_plan
    from suite.reproduce import run_micro

    try:
        plan = load_plan(args.name, args.preset)
    except ValueError as err:
        raise UsageError(str(err)) from None
    items = {item.name: item for item in plan.micro}
    if args.item not in items:
        known = ", ".join(items) or "none"
        raise UsageError(f"{args.name} ({args.preset}) has no microbenchmark {args.item!r}; its items: {known}")
    results = Path(args.results)
    _check_writable(results)
    record = run_micro(plan, items[args.item], results, "micro")
    print(results / f"{record['run_id']}.json")
    return 0


def _default_preset() -> str:
    import torch

    return "gpu" if torch.cuda.is_available() else "smoke"


def _estimate_parser(sub) -> None:
    p = sub.add_parser(
        "estimate", help="memory, FLOPs and bytes at any world size on fake tensors; prints the record's path last"
    )
    p.add_argument("method", help="any registered method (ddp, fsdp, hsdp, b-sdp, ...)")
    p.add_argument("--model", default=RunConfig.model)
    p.add_argument("--world-size", type=int, default=8, help="ranks to estimate")
    p.add_argument("--gpus-per-node", type=int, default=8, help="node size: group tiers, hsdp's default shard")
    p.add_argument(
        "--ranks",
        choices=("auto", "all"),
        default="auto",
        help="auto: rank 0 stands for all when sampled ranks match it; all: every rank",
    )
    p.add_argument("--seed", type=int, default=RunConfig.seed)
    p.add_argument("--results", default="results/estimates")
    p.add_argument("--ac", action="store_true", help="activation checkpointing of every block")
    p.add_argument("--precision", default=RunConfig.precision, help="fp32 or bf16")
    p.add_argument("--optimizer", default=RunConfig.optimizer)
    p.add_argument("--data", help="data set (default: the model's embedded one)")
    p.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config field (micro_batch, seq_len, ...) or a method parameter",
    )
    p.add_argument(
        "--measure",
        action="store_true",
        help="also run the same steps for real on --world-size local workers and print both",
    )
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="device of the --measure run")


def cmd_estimate(args: argparse.Namespace, argv: list[str]) -> int:
    from suite.compare import compare, format_comparison
    from suite.estimate import estimate
    from suite.estimate.compare import measure_beside
    from suite.estimate.record import format_estimate
    from suite.records import write_record

    cfg = RunConfig(
        method=args.method,
        model=args.model,
        nproc=args.world_size,
        seed=args.seed,
        results=args.results,
        ac=args.ac,
        precision=args.precision,
        optimizer=args.optimizer,
        data=args.data,
        tokens=1.0,
        command=shlex.join(["python", "-m", "suite", *argv]),
    )
    try:
        apply_sets(cfg, args.sets)
    except ValueError as err:
        raise UsageError(str(err)) from None
    if args.world_size < 1 or args.gpus_per_node < 1:
        raise UsageError(
            f"--world-size and --gpus-per-node must be at least 1, got {args.world_size} and {args.gpus_per_node}"
        )
    check_config(cfg)
    if args.measure:
        check_config(dataclasses.replace(cfg, device=args.device))
    rec = estimate(cfg, args.gpus_per_node, args.ranks)
    path = write_record(rec, Path(args.results) / f"{rec['run_id']}.json")
    print(format_estimate(rec))
    if args.measure:
        measured = measure_beside(rec, cfg, args.device, args.results)
        print(format_comparison(compare(rec, measured)))
    print(path)
    return 0


def _simulate_parser(sub) -> None:
    from suite.sim import PRESETS
    from suite.sim.collectives import ALGORITHMS

    p = sub.add_parser("simulate", help="project a record's ledger onto a cluster topology (labelled simulated)")
    p.add_argument("record", help="a run record (measured or estimated)")
    p.add_argument("--topology", required=True, choices=sorted(PRESETS))
    p.add_argument(
        "--overlap",
        type=float,
        default=0.0,
        help="fraction of min(compute, communication) hidden behind the other (0 none, 1 perfect)",
    )
    p.add_argument("--mfu", type=float, default=0.4, help="compute = busiest rank's FLOPs / (peak x MFU)")
    p.add_argument(
        "--compute-s",
        type=float,
        help="measured compute seconds per step on the target GPU (instead of FLOPs / (peak x MFU))",
    )
    p.add_argument("--algorithm", choices=ALGORITHMS, default="auto")
    p.add_argument("--write", metavar="DIR", help="also write the simulated record into DIR; prints its path last")


def cmd_simulate(args: argparse.Namespace, argv: list[str]) -> int:
    from suite.records import RecordError, read_record, write_record
    from suite.sim import format_projection, get_topology, project, simulated_record

    try:
        record = read_record(args.record)
    except FileNotFoundError:
        raise UsageError(f"no record at {args.record!r}; give the path `run` or `estimate` printed") from None
    except OSError as err:
        raise UsageError(f"cannot read {args.record!r} ({err.strerror}); give a readable record") from None
    except RecordError as err:
        raise UsageError(str(err)) from None
    compute = (args.compute_s, f"given: {args.compute_s} s per step") if args.compute_s is not None else None
    try:
        proj = project(record, get_topology(args.topology), args.overlap, args.mfu, args.algorithm, compute)
    except ValueError as err:
        raise UsageError(str(err)) from None
    print(format_projection(proj))
    if args.write:
        _check_writable(Path(args.write))
        sim = simulated_record(record, proj, shlex.join(["python", "-m", "suite", *argv]))
        print(write_record(sim, Path(args.write) / f"{sim['run_id']}.json"))
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m suite", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    _run_parser(sub)
    rep = sub.add_parser("reproduce", help="run a reproduction's plan, print its table, write its report")
    rep.add_argument("name", nargs="?", help="a reproduction found in reproductions/ or SUITE_REPRODUCTIONS (--list)")
    rep.add_argument("--list", action="store_true", help="name every reproduction found, with a one-line description")
    rep.add_argument(
        "--preset",
        help="smoke, gpu, paper, or a preset the plan adds; default: gpu where CUDA is available, smoke elsewhere",
    )
    rep.add_argument("--results", help="folder for the run records (default results/runs/NAME-PRESET)")
    rep.add_argument("--report", help="folder for the HTML report (default reports/NAME)")
    rep.add_argument(
        "--fresh",
        action="store_true",
        help="run every item, even those whose complete record is in --results (it is replaced once the new one "
        "is complete); without it the plan resumes: such items are skipped",
    )
    rep.add_argument(
        "--checkpoint-every",
        type=int,
        default=0,
        metavar="STEPS",
        help="checkpoint every run; a plan run again resumes an interrupted run from its last checkpoint",
    )
    rep.add_argument("--max-restarts", type=int, default=0, help="torchrun restarts a failed run from its checkpoint")
    rep.add_argument(
        "--launcher",
        choices=("local", "slurm"),
        default="local",
        help="local: workers on this machine; slurm: one batch job per run (estimates and microbenchmarks run here)",
    )
    from suite.slurm import add_arguments

    add_arguments(rep)
    mic = sub.add_parser("micro", help="run one microbenchmark item of a reproduction's plan; prints its record's path")
    mic.add_argument("name", help="a reproduction (`python -m suite reproduce --list`)")
    mic.add_argument("item", help="the item's name in the plan")
    mic.add_argument("--preset", default="smoke")
    mic.add_argument("--results", default="results/runs", help="folder for the record")
    add_evaluate_command(sub)
    ver = sub.add_parser("verdicts", help="every claim's verdict, value, band, evidence and runs (a table, or --json)")
    ver.add_argument("results", nargs="+", help="folders of run records")
    ver.add_argument("--json", action="store_true", help="JSON for scripts and CI")
    rp = sub.add_parser("report", help="regenerate the HTML report from run records alone")
    rp.add_argument("results_dir")
    rp.add_argument("-o", "--output", default="reports/latest")
    _estimate_parser(sub)
    _simulate_parser(sub)
    return p


def cmd_evaluate(args: argparse.Namespace, argv: list[str]) -> int:
    from suite.evals import cmd_evaluate as evaluate

    return evaluate(args, argv)


COMMANDS = {
    "run": cmd_run,
    "reproduce": cmd_reproduce,
    "report": cmd_report,
    "evaluate": cmd_evaluate,
    "estimate": cmd_estimate,
    "micro": cmd_micro,
    "simulate": cmd_simulate,
    "verdicts": cmd_verdicts,
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args, argv)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
