"""A plan's runs as SLURM batch jobs: one script per run, submitted with sbatch, waited for with squeue, and
their records gathered from the plan's results folder (a filesystem the nodes share with this machine).

Each script starts one torchrun per node with srun; the torchruns meet at a c10d rendezvous on the job's
first node and run `python -m suite run` with the run's own arguments, from the repository (`--chdir`), so
the record names the same command as a local run would and the plan's resume rules (suite/plan/folder.py,
shared with the local launcher) hold unchanged: a run whose complete record is in the folder is not submitted,
and a new complete record replaces the older ones of its configuration when it is gathered.

Rank 0 picks the run id when the run starts, so a record is found by its command: a job's record is the
one of its configuration that was not in the folder when the job was submitted. The jobs submitted and not
yet gathered are kept in `slurm/jobs.jsonl` under the results folder, so that running the same command again
(after a timeout, or after this process was stopped) waits for jobs still in the queue instead of
submitting their runs twice, and gathers the records of those that ended meanwhile.
Estimates and microbenchmark items need no cluster: they run in this process while the jobs wait
(suite/plan/items.py). SlurmLauncher is this launcher behind the interface both launchers share
(suite/plan/launchers.py).
"""

from __future__ import annotations

import argparse
import getpass
import json
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from suite.atomic import atomic_write, write_text
from suite.config import RunConfig
from suite.errors import UsageError
from suite.plan.folder import Folder, Interrupted, config_key, done_run, item_count, plan_run
from suite.plan.items import run_items_here
from suite.plan.plans import Plan
from suite.run.lock import one_writer
from suite.timing import PlanTimer

JOBS = "jobs.jsonl"


@dataclass
class SlurmOptions:
    nodes: int | None = None  # per job; default: as many as the run's workers need at gpus_per_node each
    gpus_per_node: int | None = None  # workers per node; default: all of a run's workers on one node
    partition: str | None = None
    time: str | None = None  # the job's time limit, as sbatch takes it (HH:MM:SS, D-HH:MM)
    account: str | None = None
    port: int = 29500  # the rendezvous port on each job's first node
    poll_s: float = 30.0
    timeout_s: float | None = None  # how long to wait for the jobs; None: until they leave the queue


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("--launcher slurm (docs/plans.md)")
    g.add_argument("--nodes", type=int, help="nodes per run (default: workers / --gpus-per-node)")
    g.add_argument("--gpus-per-node", type=int, help="workers (GPUs) per node (default: a run's workers on one node)")
    g.add_argument("--partition", help="#SBATCH --partition")
    g.add_argument("--time", dest="slurm_time", metavar="LIMIT", help="#SBATCH --time, e.g. 02:00:00")
    g.add_argument("--account", help="#SBATCH --account")
    g.add_argument("--rdzv-port", type=int, default=SlurmOptions.port, help="rendezvous port on a job's first node")
    g.add_argument("--poll", type=float, default=SlurmOptions.poll_s, metavar="SECONDS", help="squeue interval")
    g.add_argument(
        "--wait-timeout", type=float, metavar="SECONDS", help="stop waiting for the jobs after this (default: never)"
    )


def given(args: argparse.Namespace) -> list[str]:
    """The --launcher slurm options given on the command line (with the local launcher they would do nothing)."""
    defaults = {"nodes": None, "gpus_per_node": None, "partition": None, "slurm_time": None}
    defaults |= {"account": None, "rdzv_port": SlurmOptions.port, "poll": SlurmOptions.poll_s, "wait_timeout": None}
    flags = {"slurm_time": "time", "poll": "poll", "wait_timeout": "wait-timeout"}
    return [f"--{flags.get(k, k).replace('_', '-')}" for k, v in defaults.items() if getattr(args, k) != v]


def options_from_args(args: argparse.Namespace) -> SlurmOptions:
    opts = SlurmOptions(
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        partition=args.partition,
        time=args.slurm_time,
        account=args.account,
        port=args.rdzv_port,
        poll_s=args.poll,
        timeout_s=args.wait_timeout,
    )
    for name in ("nodes", "gpus_per_node"):
        if getattr(opts, name) is not None and getattr(opts, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
    if opts.poll_s <= 0 or (opts.timeout_s is not None and opts.timeout_s < 0):
        raise UsageError("--poll must be positive and --wait-timeout 0 or more seconds")
    return opts


def layout(nproc: int, opts: SlurmOptions) -> tuple[int, int]:
    """(nodes, workers per node) for a run of `nproc` workers; UsageError when they do not divide evenly."""
    if opts.nodes is not None:
        per_node, rest = divmod(nproc, opts.nodes)
        if rest or per_node == 0 or (opts.gpus_per_node is not None and per_node > opts.gpus_per_node):
            raise UsageError(
                f"a run of {nproc} workers does not fit --nodes {opts.nodes}"
                + (f" x --gpus-per-node {opts.gpus_per_node}" if opts.gpus_per_node else "")
                + "; drop --nodes to size each job by its workers"
            )
        return opts.nodes, per_node
    per_node = min(nproc, opts.gpus_per_node or nproc)
    if nproc % per_node:
        raise UsageError(
            f"a run of {nproc} workers does not fill nodes of --gpus-per-node {per_node}; "
            f"give a --gpus-per-node that divides {nproc}"
        )
    return nproc // per_node, per_node


def _torchrun() -> str:
    """The torchrun beside this interpreter (the same environment on a shared filesystem), else PATH's."""
    beside = Path(sys.executable).with_name("torchrun")
    return str(beside) if beside.exists() else "torchrun"


def batch_script(cfg: RunConfig, job_name: str, opts: SlurmOptions, log: Path, header: str) -> str:
    """The batch script of one planned run (`cfg.command` set by suite.plan.folder.plan_run)."""
    from suite.run.recorder import REPOSITORY, repository_path

    nodes, per_node = layout(cfg.nproc, opts)
    words = shlex.split(cfg.command)
    args = words[3 : words.index("--results")]  # `run METHOD ...`: the run's own arguments
    results = Path(cfg.results).resolve()
    where = repository_path(results) if results.is_relative_to(REPOSITORY) else str(results)
    sbatch = [f"--job-name={job_name}", f"--nodes={nodes}", "--ntasks-per-node=1"]
    if cfg.device == "cuda":
        sbatch.append(f"--gpus-per-node={per_node}")
    sbatch += [
        f"--{k}={v}" for k, v in (("partition", opts.partition), ("time", opts.time), ("account", opts.account)) if v
    ]
    sbatch += [f"--chdir={REPOSITORY}", f"--output={log}"]
    exports = [f"export SUITE_REPRODUCTIONS={shlex.quote(v)}" for v in [_reproductions_env()] if v]
    keep_alive = ["--checkpoint-every", str(cfg.checkpoint_every)] if cfg.checkpoint_every else []
    run = shlex.join([*args, *keep_alive, "--results", where])
    restarts = f" --max-restarts {cfg.max_restarts}" if cfg.max_restarts else ""
    return "\n".join(
        [
            "#!/bin/bash",
            *(f"#SBATCH {line}" for line in sbatch),
            f"# {header}",
            "set -euo pipefail",
            *exports,
            'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
            "# `--`: the run's own flags follow (torchrun's parser would read --nproc as its --nproc-per-node)",
            'srun --nodes="$SLURM_NNODES" --ntasks-per-node=1 \\',
            f'  {shlex.quote(_torchrun())} --nnodes "$SLURM_NNODES" --nproc-per-node {per_node}{restarts} \\',
            f'  --rdzv-backend c10d --rdzv-endpoint "$head:{opts.port}" --rdzv-id "$SLURM_JOB_ID" \\',
            f"  -m -- suite {run}",
            "",
        ]
    )


def _reproductions_env() -> str:
    """SUITE_REPRODUCTIONS for the job, folders made absolute (the job starts in the repository)."""
    import os

    from suite.extensions import ENV

    entries = [e for e in os.environ.get(ENV, "").split(os.pathsep) if e.strip()]
    return os.pathsep.join(str(Path(e).resolve()) if Path(e).is_dir() else e for e in entries)


def _slurm(*argv: str) -> str:
    """Run a SLURM command; its stdout, or UsageError with its own error."""
    if shutil.which(argv[0]) is None:
        raise UsageError(f"no {argv[0]} on PATH: run on a SLURM login node, or use --dry-run to see the scripts")
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise UsageError(f"{' '.join(argv[:2])} failed: {(out.stderr or out.stdout).strip()}")
    return out.stdout


def queued() -> set[str]:
    """Ids of this user's jobs still in the queue (pending or running)."""
    out = _slurm("squeue", "--noheader", "--format=%i", f"--user={getpass.getuser()}")
    return {line.strip() for line in out.splitlines() if line.strip()}


class Jobs:
    """The jobs submitted and not yet gathered, one JSON object a line: job id, command, log, and the records
    of its configuration that were there before it (the one that appears after is the job's)."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / "slurm" / JOBS
        lines = self.path.read_text().splitlines() if self.path.exists() else []
        self.jobs: list[dict] = [json.loads(line) for line in lines if line.strip()]

    def save(self) -> None:
        atomic_write(self.path, lambda f: f.writelines(json.dumps(job) + "\n" for job in self.jobs))


def _wait(jobs: Jobs, opts: SlurmOptions) -> set[str]:
    """Poll squeue until none of `jobs` is queued, or the timeout; returns the ids still queued."""
    deadline = None if opts.timeout_s is None else time.monotonic() + opts.timeout_s
    mine, said = {job["job"] for job in jobs.jobs}, None
    while True:
        waiting = mine & queued()
        if not waiting or (deadline is not None and time.monotonic() >= deadline):
            return waiting
        if waiting != said:
            print(f"waiting for {len(waiting)} jobs: {' '.join(sorted(waiting))}", file=sys.stderr, flush=True)
            said = waiting
        time.sleep(opts.poll_s if deadline is None else max(0.0, min(opts.poll_s, deadline - time.monotonic())))


def _gather(jobs: Jobs, still: set[str], folder: Folder) -> tuple[dict[str, dict], list[dict]]:
    """Records of the jobs that left the queue, by command (each settled into `folder`), and the jobs whose
    record did not arrive."""
    fresh_view, arrived, missing = Folder(folder.path), {}, []
    for job in [j for j in jobs.jobs if j["job"] not in still]:
        before = {str(folder.path / name) for name in job["before"]}
        new = [r for r in fresh_view.records_of(job["command"]) if r["_path"] not in before]
        if not new:
            missing.append(job)
            continue
        record = max(new, key=lambda r: (r["created"], r["_path"]))
        folder.add(record, Path(record["_path"]))
        arrived[job["command"]] = record
    return arrived, missing


@dataclass
class SlurmLauncher:
    """One batch job per run, the plan's other items here (the interface: suite.plan.launchers.Launcher)."""

    opts: SlurmOptions
    on_this_machine = False  # the runs go to the cluster's nodes, whose GPUs this machine (a login node) may lack

    def run(self, plan: Plan, results: Path, fresh: bool, timer: PlanTimer) -> tuple[list[dict], int]:
        """The plan's records and how many runs' records did not arrive."""
        return run_plan_on_slurm(plan, results, self.opts, fresh, timer)

    def dry_run(self, plan: Plan, results: Path, fresh: bool) -> None:
        """Print the batch script of each run that would be submitted; submit, run and write nothing."""
        folder, total = Folder(results), item_count(plan)
        planned = [plan_run(cfg, results) for cfg in plan.runs]

        def show(index: int, cfg: RunConfig) -> None:
            path, script = _script(plan, cfg, index, total, self.opts, results)
            print(f"# ---- {path}\n{script}")

        _each_run(planned, total, folder, fresh, {}, show)
        if plan.estimates or plan.micro:
            print(f"# and here, not on the cluster: {_here(plan)} estimates and microbenchmark items")


def _here(plan: Plan) -> int:
    """How many of the plan's items run in this process, not on the cluster (suite/plan/items.py)."""
    return len(plan.estimates) + len(plan.micro)


def run_plan_on_slurm(
    plan: Plan, results: Path, opts: SlurmOptions, fresh: bool = False, timer: PlanTimer | None = None
) -> tuple[list[dict], int]:
    """Submit the plan's runs (those not done), run its other items here, wait, gather: (the plan's records,
    how many runs' records did not arrive). Interrupted on Ctrl-C."""
    try:
        with one_writer(results, f"reproduce {plan.name} --launcher slurm"):
            return _on_slurm(plan, Folder(results, timer), opts, fresh)
    except KeyboardInterrupt:
        print(
            f"the jobs submitted stay in the queue (their ids: {results / 'slurm' / JOBS}; scancel stops them); "
            "the same command again waits for them and gathers their records",
            file=sys.stderr,
        )
        raise Interrupted(signal.SIGINT) from None


def _on_slurm(plan: Plan, folder: Folder, opts: SlurmOptions, fresh: bool) -> tuple[list[dict], int]:
    jobs, total = Jobs(folder.path), item_count(plan)
    in_queue = queued() if jobs.jobs else set()
    waiting_for = {config_key(j["command"]): j for j in jobs.jobs if j["job"] in in_queue}
    planned = [plan_run(cfg, folder.path) for cfg in plan.runs]

    def submit(index: int, cfg: RunConfig) -> None:
        _submit(plan, cfg, index, total, opts, folder, jobs)

    records = _each_run(planned, total, folder, fresh, waiting_for, submit)
    if plan.estimates or plan.micro:
        print(f"here, not on the cluster: {_here(plan)} estimates and microbenchmark items", file=sys.stderr)
    local_records = run_items_here(plan, folder, fresh, len(plan.runs), total)
    still = _wait(jobs, opts)
    arrived, missing = _gather(jobs, still, folder)
    for job in missing:
        print(f"did not arrive: job {job['job']} {job['command']}; its log: {job['log']}", file=sys.stderr)
    for job in [j for j in jobs.jobs if j["job"] in still]:
        print(
            f"still in the queue after {opts.timeout_s:g}s: job {job['job']} {job['command']}; run the same command "
            "again later to gather it (queued jobs are waited for, not submitted twice)",
            file=sys.stderr,
        )
    jobs.jobs = [j for j in jobs.jobs if j["job"] in still]
    jobs.save()
    records.update(arrived)
    ran = [records[cfg.command] for cfg in planned if cfg.command in records]
    return ran + local_records, len(planned) - len(ran)


def _each_run(
    planned: list[RunConfig],
    total: int,
    folder: Folder,
    fresh: bool,
    waiting: dict[tuple, dict],
    act: Callable[[int, RunConfig], None],
) -> dict[str, dict]:
    """Say which planned runs are done or still queued (`waiting`: their jobs by configuration) and `act` on each
    other one (submit it, or print its script); returns the records of those done, by command."""
    done_records = {}
    for i, cfg in enumerate(planned, 1):
        progress = f"{i}/{total}"
        done = done_run(cfg, folder, fresh)
        if done is not None:
            print(f"skip [{progress}] {cfg.command}: complete record {done['_path']}", file=sys.stderr)
            done_records[cfg.command] = done
        elif (job := waiting.get(config_key(cfg.command))) is not None:
            print(f"in the queue [{progress}] {cfg.command}: job {job['job']}, submitted before", file=sys.stderr)
        else:
            act(i, cfg)
    return done_records


def _script(plan: Plan, cfg: RunConfig, index: int, total: int, opts: SlurmOptions, results: Path) -> tuple[Path, str]:
    """Where the run's batch script goes, and the script."""
    name = f"suite-{plan.name}-{plan.preset}-{index}"
    slurm_dir = Path(results).resolve() / "slurm"
    header = f"run {index}/{total} of plan {plan.name} ({plan.preset}): python -m suite reproduce {plan.name}"
    return slurm_dir / f"{name}.sbatch", batch_script(cfg, name, opts, slurm_dir / f"{name}-%j.out", header)


def _submit(plan: Plan, cfg: RunConfig, index: int, total: int, opts: SlurmOptions, folder: Folder, jobs: Jobs) -> None:
    """Write the run's batch script and submit it."""
    path, script = _script(plan, cfg, index, total, opts, folder.path)
    write_text(path, script)
    job = _slurm("sbatch", "--parsable", str(path)).strip().split(";")[0]
    before = [str(Path(r["_path"]).relative_to(folder.path)) for r in folder.records_of(cfg.command)]
    log = str(path.with_name(f"{path.stem}-{job}.out"))
    jobs.jobs.append({"job": job, "command": cfg.command, "script": str(path), "log": log, "before": before})
    jobs.save()  # at once: a rerun after Ctrl-C must know this job is in the queue
    print(f"submitted [{index}/{total}] {cfg.command}: job {job}, log {log}", file=sys.stderr, flush=True)
