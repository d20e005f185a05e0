"""python -m suite {run,reproduce,report,verdicts,evaluate,estimate,simulate,micro}: the command-line contract.

This module only parses: the flags come from the settings' declarations (suite/config.py), and each command hands
what it parsed to the group that does the work, whose checks run before any worker starts, so that a mistake costs
one line of error naming the fix instead of a traceback from inside torch and a half-written record.
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys

from suite.config import FIELDS, RunConfig, apply_sets, field_type
from suite.errors import UsageError
from suite.evals import add_evaluate_command

ESTIMATE_WORLD = 8  # ranks an estimate stands for unless --world-size says otherwise
ESTIMATE_RESULTS = "results/estimates"


def add_settings(p: argparse.ArgumentParser, verb: str) -> None:
    """The flags of every RunConfig field that has one (suite/config.py declares them), and `--set`."""
    groups: dict[str, argparse._ArgumentGroup] = {}
    for name, f in FIELDS.items():
        meta = f.metadata
        wanted = meta["reproduce"] if verb == "reproduce" else meta["estimate"] or verb == "run"
        if not meta["flag"] or not wanted:
            continue
        target = p
        if meta["group"]:
            target = groups.setdefault(meta["group"], p.add_argument_group(meta["group"]))
        flag, default = meta["flag"], f.default
        if verb == "estimate" and name == "nproc":
            flag, default = "--world-size", ESTIMATE_WORLD
        if verb == "estimate" and name == "results":
            default = ESTIMATE_RESULTS
        if field_type(name) is bool:
            action = "store_false" if default else "store_true"
            target.add_argument(flag, dest=name, action=action, help=meta["help"])
            continue
        kw = {"choices": meta["choices"], "metavar": meta["metavar"]}
        target.add_argument(
            flag,
            dest=name,
            type=field_type(name),
            default=default,
            help=meta["help"],
            **{k: v for k, v in kw.items() if v is not None},
        )
    if verb != "reproduce":
        p.add_argument(
            "--set",
            dest="sets",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="a config field (lr, micro_batch, seq_len, ...; see suite/config.py) or a method or optimizer "
            "parameter (`run METHOD --help` lists them)",
        )


def _run_parser(sub, argv: list[str]) -> None:
    p = sub.add_parser(
        "run",
        help="one training run; prints the record's path last",
        epilog=parameters_help(argv),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("method", nargs="?", help="a baseline (ddp, fsdp, hsdp) or a method")
    add_settings(p, "run")
    p.add_argument("--over-limits", action="store_true", help="run beyond this machine's memory or cores")
    p.add_argument(
        "--resume", dest="resume_record", metavar="RECORD", help="continue an incomplete run from its newest checkpoint"
    )


def parameters_help(argv: list[str]) -> str | None:
    """`run METHOD --help` (and `--optimizer NAME`) lists the method's and optimizer's parameters."""
    if "-h" not in argv and "--help" not in argv:
        return None
    from suite.params import help_lines
    from suite.run import optim, strategy

    words = [w for w in argv if not w.startswith("-")]
    lines = []
    known = strategy.methods()
    method = next((w for w in words[1:] if w in known), None)
    if method is not None:
        lines += help_lines(f"method {method}", known[method].params)
    name = argv[argv.index("--optimizer") + 1] if "--optimizer" in argv[:-1] else RunConfig.optimizer
    if name in optim.optimizers():
        lines += help_lines(f"optimizer {name}", optim.get_spec(name).params)
    return "\n".join(lines) or None


def config_from_args(args: argparse.Namespace, argv: list[str]) -> RunConfig:
    """The RunConfig that a `run` or `estimate` command line gives (its flags are the fields' own names)."""
    given = {name: getattr(args, name) for name in FIELDS if hasattr(args, name)}
    cfg = RunConfig(**given)
    cfg.command = shlex.join(["python", "-m", "suite", *argv])
    try:
        return apply_sets(cfg, args.sets)
    except ValueError as err:
        raise UsageError(str(err)) from None


def _estimate_parser(sub) -> None:
    p = sub.add_parser(
        "estimate", help="memory, FLOPs and bytes at any world size on fake tensors; prints the record's path last"
    )
    p.add_argument("method", help="any registered method (ddp, fsdp, hsdp, b-sdp, ...)")
    add_settings(p, "estimate")
    p.add_argument("--gpus-per-node", type=int, default=8, help="node size: group tiers, hsdp's default shard")
    p.add_argument(
        "--ranks",
        choices=("auto", "all"),
        default="auto",
        help="auto: rank 0 stands for all when sampled ranks match it, else one rank per class, one more checked; "
        "all: every rank",
    )
    p.add_argument(
        "--measure",
        action="store_true",
        help="also run the same steps for real on --world-size local workers and print both",
    )
    p.add_argument(
        "--device", choices=("cpu", "cuda"), default="cpu", dest="measure_device", help="device of the --measure run"
    )


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


def parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m suite", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    _run_parser(sub, argv or [])
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
    add_settings(rep, "reproduce")  # how every run is kept alive (--checkpoint-every, --max-restarts)
    rep.add_argument(
        "--dry-run",
        action="store_true",
        help="run nothing, write nothing: print the plan, each item's command, those --results already holds "
        "(skipped) and the claims it judges; with --launcher slurm, the batch scripts it would submit",
    )
    rep.add_argument(
        "--launcher",
        choices=("local", "slurm"),
        default="local",
        help="local: workers on this machine; slurm: one batch job per run (estimates and microbenchmarks run here)",
    )
    from suite.plan.slurm import add_arguments

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
    rp.add_argument("results_dir", nargs="*", help="folders of run records (a reproduction's plan runs: one report)")
    rp.add_argument("-o", "--output", default="reports/latest")
    rp.add_argument(
        "--site",
        metavar="DIR",
        help="instead: write DIR/index.html, the index of every report folder in DIR (--site reports)",
    )
    _estimate_parser(sub)
    _simulate_parser(sub)
    return p


def cmd_run(args: argparse.Namespace, argv: list[str]) -> int:
    from suite.run.command import resume_config, run

    if args.resume_record and args.method:
        raise UsageError("--resume continues a run as it was configured: give the record alone, no method or flags")
    if not args.resume_record and not args.method:
        raise UsageError("name a method: python -m suite run METHOD (or --resume RECORD)")
    cfg = resume_config(args.resume_record) if args.resume_record else config_from_args(args, argv)
    if args.resume_record and args.nproc not in (RunConfig.nproc, cfg.nproc):
        raise UsageError(f"{args.resume_record} was made by {cfg.nproc} workers and resumes with them; drop --nproc")
    return run(cfg, args.over_limits, resuming=bool(args.resume_record))


def cmd_estimate(args: argparse.Namespace, argv: list[str]) -> int:
    from suite.estimate.command import estimate_command

    cfg = dataclasses.replace(config_from_args(args, argv), tokens=1.0)  # a fixed number of steps, no budget
    return estimate_command(cfg, args.gpus_per_node, args.ranks, args.measure_device if args.measure else None)


def cmd_reproduce(args: argparse.Namespace, argv: list[str]) -> int:
    from suite.plan.command import reproduce

    return reproduce(args)


def cmd_micro(args: argparse.Namespace, argv: list[str]) -> int:
    from suite.plan.command import micro

    return micro(args)


def cmd_report(args: argparse.Namespace, argv: list[str]) -> int:
    from suite.report.command import report

    return report(args)


def cmd_verdicts(args: argparse.Namespace, argv: list[str]) -> int:
    from suite.judge.command import verdicts

    return verdicts(args.results, args.json)


def cmd_simulate(args: argparse.Namespace, argv: list[str]) -> int:
    from suite.sim.command import simulate

    return simulate(args, shlex.join(["python", "-m", "suite", *argv]))


def cmd_evaluate(args: argparse.Namespace, argv: list[str]) -> int:
    from suite.evals import cmd_evaluate as evaluate

    return evaluate(args, argv)


# each command's work lives with its group (suite/run, plan, estimate, judge, report, sim, evals): here they are
# only parsed and handed over
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
    args = parser(argv).parse_args(argv)
    try:
        return COMMANDS[args.command](args, argv)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
