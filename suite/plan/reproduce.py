"""Run a reproduction's plan, print its comparison table, and write its HTML report.

Plans resume. Each item of a plan (a run, an estimate with its projections, a microbenchmark item) has the
command that makes it, and the plan skips an item whose results folder already holds a complete record of
the same configuration, so the same command run again after a crash, a reboot or Ctrl-C picks up where the
plan stopped. Same configuration means:
- the same command, read as words, without the folder it wrote into (`--results`, `--write`) and with a
  record argument (simulate's) by its file name. The command names every setting that differs from the
  defaults (suite.config.command_line): method and its parameters, model, workers, budget, seed, options,
  the reproduction. The folder is left out because every record compared lies in that one folder, which
  may have moved since (a committed folder; an absolute path on one machine, a relative one on another);
- for a run or an estimate, the same recorded settings as well: the command names only what differs from
  today's defaults, so a default changed since the record was made would otherwise pass unseen (fields a
  record does not know, added since, are not compared);
- for a microbenchmark item, the same function, shapes, warm-up, repeat and device (its command names
  only the item).
No key sees a change to a method's or an item's code (the record keeps git_sha): `--fresh` reruns.

A failed or incomplete record does not count as done. `--fresh` runs every item. A new record supersedes
the older records of its configuration only once it is complete (they are removed then), so a folder
never holds two complete records of one configuration, which the verdicts would pool as seeds, and a fresh
run that dies loses nothing; an older record that is not complete goes as soon as a newer one is written.
Records are written one per item as the plan goes: an interrupted plan loses at most the item in
progress, whose record says `incomplete` with the interruption.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import shlex
import signal
import sys
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

from torch.distributed.elastic.multiprocessing.api import SignalException

from suite import config
from suite.atomic import atomic_write
from suite.config import RunConfig, command_line
from suite.judge.claims import ClaimsError, claims_for
from suite.judge.verdicts import VERDICTS, evidence_label, judge_all
from suite.plan.lock import one_writer
from suite.plan.micro import Microbench, micro_record
from suite.plan.multirun import launch_runs, shares_launch
from suite.plan.plans import Estimate, Plan
from suite.records import FINISHED, load_records, read_record, summary_row, write_record
from suite.run.checkpoint import CheckpointError, latest, resumable_config, run_folder
from suite.run.launch import close_record, launch
from suite.run.recorder import failed_record, new_run_id, repository_path
from suite.timing import PlanTimer, render

MiB = 2**20
SUMMARY = "plan-summary.txt"  # beside the records: the table and the time breakdown of the plan's last run
# flags whose value is the folder a command wrote into (left out of the key, as are how a run was kept
# alive: config.OPERATIONAL_FLAGS and `--set` of an operational field)
_FOLDER_FLAGS = ("--results", "--write")
# what a plan's command does not carry as a setting is not compared: where the record went, its id, and how
# the run was kept alive (checkpoints, restarts, resumption: suite.config.OPERATIONAL)
_NOT_COMPARED = (*config.NOT_SETTINGS, *config.OPERATIONAL)


class Interrupted(Exception):
    """The plan stopped on a signal (Ctrl-C, SIGTERM); what was written stays, and the same command resumes."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"interrupted by {signal.Signals(signum).name}")


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def config_key(command: str) -> tuple[str, ...]:
    """What identifies a configuration in one results folder: the command's words (module docstring)."""
    try:
        words = shlex.split(command)
    except ValueError:  # unbalanced quotes: no planned command looks like that, so it matches none
        return (command,)
    key, folder_value = [], False
    for word in words:
        if folder_value:
            folder_value = False
        elif word in _FOLDER_FLAGS or word in config.OPERATIONAL_FLAGS:
            folder_value = True
        elif key and key[-1] == "--set" and word.partition("=")[0] in config.OPERATIONAL:
            key.pop()
        else:
            key.append(Path(word).name if word.endswith(".json") else word)
    return tuple(key)


def _plain(value: object) -> object:
    """As JSON gives it back (tuples become lists), so planned and recorded values compare."""
    return json.loads(json.dumps(value))


def same_settings(settings: dict) -> Callable[[dict], bool]:
    """Whether a record's settings equal these, on the fields both know (but _NOT_COMPARED)."""
    planned = _plain({k: v for k, v in settings.items() if k not in _NOT_COMPARED})

    def check(rec: dict) -> bool:
        recorded = rec.get("settings") or {}
        return all(recorded[k] == v for k, v in planned.items() if k in recorded)

    return check


def same_item(item: Microbench) -> Callable[[dict], bool]:
    """Whether a microbenchmark record measured this item as the plan now defines it."""
    want = _plain([item.function, item.warmup, item.repeat, item.shapes, item.device.split(":")[0]])

    def check(rec: dict) -> bool:
        micro = rec.get("micro") or {}
        rows = micro.get("rows") or []
        got = [micro.get("function"), micro.get("warmup"), micro.get("repeat"), [r.get("shape") for r in rows]]
        return got + [rec["env"]["device"]] == want

    return check


class Folder:
    """A plan's results folder: its records by configuration, and which of them an item supersedes."""

    def __init__(self, path: Path, timer: PlanTimer | None = None) -> None:
        self.path = Path(path)
        self.timer = timer or PlanTimer()  # where the plan's time goes (suite/timing.py)
        self.by_key: dict[tuple, list[dict]] = defaultdict(list)
        for rec in load_records(self.path)[0]:
            self.by_key[config_key(rec["command"])].append(rec)
        for recs in self.by_key.values():
            complete = [r["_path"] for r in recs if r["status"] in FINISHED]
            if len(complete) > 1:
                _say(
                    f"warning: {len(complete)} complete records of one configuration ({', '.join(complete)}); "
                    "the verdicts pool them as seeds: keep one, or rerun the plan with --fresh"
                )

    def records_of(self, command: str) -> list[dict]:
        return list(self.by_key.get(config_key(command), []))

    def done(self, command: str, same: Callable[[dict], bool] | None = None) -> dict | None:
        """The newest finished (complete or diverged) record of this configuration, or None."""
        found = [r for r in self.records_of(command) if r["status"] in FINISHED and (same is None or same(r))]
        done = max(found, key=lambda r: (r["created"], r["_path"]), default=None)
        self.timer.skipped += done is not None
        return done

    def add(self, record: dict, path: Path) -> None:
        """`record`, just written at `path`, supersedes the older records of its configuration: all of them
        when it is complete; otherwise those that are not complete (a complete one stays until replaced)."""
        key, path = config_key(record["command"]), Path(path)
        keep = []
        for old in self.by_key.get(key, []):
            if Path(old["_path"]) == path:
                continue  # the same file, rewritten
            if record["status"] in FINISHED or old["status"] not in FINISHED:
                self._remove(old, path)
            else:
                keep.append(old)
        record["_path"] = str(path)
        self.by_key[key] = [*keep, record]

    def _remove(self, old: dict, by: Path) -> None:
        """Remove `old` and the projections made from it (they name it as their source)."""
        Path(old["_path"]).unlink(missing_ok=True)
        _say(f"removed {old['_path']}: superseded by {by}")
        for key, recs in self.by_key.items():
            derived = [r for r in recs if (r.get("simulation") or {}).get("source_run_id") == old["run_id"]]
            for rec in derived:
                Path(rec["_path"]).unlink(missing_ok=True)
                _say(f"removed {rec['_path']}: projected from {old['_path']}")
            self.by_key[key] = [r for r in recs if all(r is not d for d in derived)]


def plan_run(cfg: RunConfig, results: Path) -> RunConfig:
    """`cfg` set to write into `results`, with the command that makes it (repository-relative folder)."""
    cfg.results = str(results)
    cfg.command = f"{command_line(cfg)} --results {repository_path(results)}"
    return cfg


def run_plan(plan: Plan, results: Path, fresh: bool = False, timer: PlanTimer | None = None) -> list[dict]:
    """Every item of the plan in order, skipping those done (unless `fresh`); a failed run is recorded and
    the plan goes on. Returns the plan's records, skipped items' included; Interrupted on a signal.
    `timer` collects where the time went (suite/timing.py)."""
    with one_writer(results, f"reproduce {plan.name}"):
        folder = Folder(results, timer)
        total = len(plan.runs) + len(plan.estimates) + len(plan.micro)
        try:
            return run_runs(plan, folder, fresh, total) + run_local_items(plan, folder, fresh, len(plan.runs), total)
        except KeyboardInterrupt:
            raise Interrupted(signal.SIGINT) from None
        except SignalException as err:  # torchrun's agent turns SIGINT and SIGTERM into this once it has run
            raise Interrupted(err.sigval) from None


def run_local_items(plan: Plan, folder: Folder, fresh: bool, before: int, total: int) -> list[dict]:
    """The plan's estimates (side by side, then their projections) and microbenchmark items."""
    records = []
    items = [(f"{i}/{total}", est) for i, est in enumerate(plan.estimates, before + 1)]
    done = [_done_estimate(est, folder, progress, fresh) for progress, est in items]
    with folder.timer.item("estimates"):
        made = iter(_estimates([item for item, rec in zip(items, done, strict=True) if rec is None], folder.path))
    for (progress, est), record in zip(items, done, strict=True):
        if record is None:
            record = next(made)
            folder.add(record, Path(record["_path"]))
        records += [record, *_projections(est, record, folder, progress)]
    for i, item in enumerate(plan.micro, before + len(plan.estimates) + 1):
        records.append(_micro_item(plan, item, folder, f"{i}/{total}", fresh))
    return records


def run_runs(plan: Plan, folder: Folder, fresh: bool, total: int) -> list[dict]:
    """The plan's runs, in order of the plan's list: skipped when done; those that may share a launch
    (suite/plan/multirun.py) in one launch per world size and device, the others in a launch each."""
    out: dict[int, dict] = {}
    shared: dict[tuple, list[tuple[int, str, RunConfig]]] = defaultdict(list)
    for i, cfg in enumerate(plan.runs, 1):
        cfg, progress = plan_run(cfg, folder.path), f"{i}/{total}"
        if (done := _done_run(cfg, folder, progress, fresh)) is not None:
            out[i] = done
        elif shares_launch(cfg) and _resumable([] if fresh else folder.records_of(cfg.command), cfg) is None:
            shared[(cfg.nproc, cfg.device)].append((i, progress, cfg))
        else:
            out[i] = launch_item(cfg, folder, progress, fresh)
    for group in shared.values():
        if len(group) == 1:
            i, progress, cfg = group[0]
            out[i] = launch_item(cfg, folder, progress, fresh)
        else:
            out.update(_launch_shared(group, folder))
    return [out[i] for i in sorted(out)]


def _launch_shared(group: list[tuple[int, str, RunConfig]], folder: Folder) -> dict[int, dict]:
    """Runs of one world size in one launch; their records by plan position."""
    cfgs = [cfg for _, _, cfg in group]
    for cfg in cfgs:
        cfg.run_id = cfg.run_id or new_run_id(cfg)
    _say(f"one launch of {cfgs[0].nproc} workers for runs {', '.join(p for _, p, _ in group)}")
    made: list[dict] = []
    with folder.timer.launch(made):
        try:
            paths = launch_runs([(f"[{progress}] {cfg.command}", cfg) for _, progress, cfg in group])
        except (KeyboardInterrupt, SignalException) as err:
            # the runs done settle; the one in progress (the first not complete) says it was interrupted
            for cfg in cfgs:
                _close_interrupted(cfg, err)
                _settle(folder, cfg.record_path())
                if read_record(cfg.record_path())["status"] != "complete":
                    break
            raise
        except Exception as err:  # the launcher itself failed: every run it did not finish is recorded failed
            for cfg in cfgs:
                close_record(cfg, "failed", lambda seen, err=err: f"the launcher failed: {err}")
            paths = [cfg.record_path() for cfg in cfgs]
        made += [_settle(folder, path) for path in paths]
    return {i: rec for (i, _, _), rec in zip(group, made, strict=True)}


def _done_run(cfg: RunConfig, folder: Folder, progress: str, fresh: bool) -> dict | None:
    done = None if fresh else folder.done(cfg.command, same_settings(dataclasses.asdict(cfg)))
    if done is not None:
        _say(f"skip [{progress}] {cfg.command}: {done['status']} record {done['_path']}")
    return done


def launch_item(cfg: RunConfig, folder: Folder, progress: str, fresh: bool) -> dict:
    """One planned run in a launch of its own (resumed from its checkpoint where one can)."""
    _say(f"[{progress}] {cfg.command}")
    cfg.run_id = cfg.run_id or new_run_id(cfg)
    made: list[dict] = []
    with folder.timer.launch(made):
        try:
            path = _run_one(cfg, [] if fresh else folder.records_of(cfg.command))
        except (KeyboardInterrupt, SignalException) as err:
            _close_interrupted(cfg, err)
            _settle(folder, cfg.record_path())  # a run that completed as the signal came still replaces older ones
            raise
        record = _settle(folder, path)
        made.append(record)
    _say(str(path))
    return record


def _run_one(cfg: RunConfig, existing: list[dict]) -> Path:
    """Run one planned configuration; returns its record's path (written even when the run failed).

    `existing`: the folder's earlier records of this configuration (none under --fresh). An incomplete one
    that a checkpoint can resume is resumed (`run --resume`) instead of started again.
    """
    try:
        resumed = _resumable(existing, cfg)
        if resumed is not None:
            _say(f"resume {resumed.record_path()} from {latest(run_folder(resumed))}")
        return launch(resumed or cfg)
    except (KeyboardInterrupt, SignalException):
        raise
    except Exception as err:  # the launcher itself failed (no rendezvous, no fork): recorded, the plan goes on
        write_record(failed_record(cfg, cfg.nproc, f"the launcher failed: {err}"), cfg.record_path())
        return cfg.record_path()


def _resumable(existing: list[dict], planned: RunConfig) -> RunConfig | None:
    """The planned config continuing the newest incomplete record of the configuration from its checkpoint,
    when the checkpoints beside it are of that very configuration (suite.run.checkpoint.resumable_config)."""
    for rec in sorted((r for r in existing if r["status"] == "incomplete"), key=lambda r: r["created"], reverse=True):
        try:
            return resumable_config(rec, planned)
        except CheckpointError as err:
            if (rec.get("faults") or {}).get("checkpoint_every"):  # it made checkpoints: say why they are not used
                _say(f"not resuming {rec['_path']}: {err}")
    return None


def _close_interrupted(cfg: RunConfig, err: BaseException) -> None:
    """The interrupted run's record says `incomplete`, with the signal (written here if no worker could)."""
    sig = signal.Signals(getattr(err, "sigval", signal.SIGINT)).name

    def account(seen: str | None) -> str:
        return f"interrupted by {sig}: the plan was stopped" + (f"; the workers reported: {seen}" if seen else "")

    close_record(cfg, "incomplete", account)


def _settle(folder: Folder, path: Path) -> dict:
    record = read_record(path)
    folder.add(record, path)
    return record


def micro_command(plan: Plan, item: Microbench, results: Path) -> str:
    return f"python -m suite micro {plan.name} {item.name} --preset {plan.preset} --results {repository_path(results)}"


def run_micro(plan: Plan, item: Microbench, results: Path, progress: str) -> dict:
    """Measure one microbenchmark item of `plan` in this process and write its record into `results`."""
    command = micro_command(plan, item, results)
    _say(f"[{progress}] {command}")
    record = micro_record(item, plan.name, command, str(results))
    path = write_record(record, results / f"{record['run_id']}.json")
    record["_path"] = str(path)
    _say(str(path))
    return record


def _micro_item(plan: Plan, item: Microbench, folder: Folder, progress: str, fresh: bool) -> dict:
    command = micro_command(plan, item, folder.path)
    done = None if fresh else folder.done(command, same_item(item))
    if done is not None:
        _say(f"skip [{progress}] {command}: {done['status']} record {done['_path']}")
        return done
    with folder.timer.item("microbenchmarks"):
        record = run_micro(plan, item, folder.path, progress)
    folder.add(record, Path(record["_path"]))
    return record


def estimate_command(est: Estimate, results: Path) -> str:
    where = repository_path(results)
    return f"{command_line(est.cfg, 'estimate')} --gpus-per-node {est.gpus_per_node} --results {where}"


def _projection_command(source: Path, topology: str, mfu: float, results: Path) -> str:
    return (
        f"python -m suite simulate {repository_path(source)} --topology {topology} --mfu {mfu} "
        f"--write {repository_path(results)}"
    )


def _estimate(est: Estimate, results: Path, progress: str, processes: int | None = None) -> dict:
    from suite.estimate.scale import estimate

    command = estimate_command(est, results)
    _say(f"[{progress}] {command}")
    cfg = dataclasses.replace(est.cfg, results=str(results), command=command)
    record = estimate(cfg, est.gpus_per_node, processes=processes)
    record["_path"] = str(write_record(record, results / f"{record['run_id']}.json"))
    _say(record["_path"])
    return record


def _estimates(items: list[tuple[str, Estimate]], results: Path) -> list[dict]:
    """Estimate `items` ((progress, estimate) pairs): side by side, one per core, each stepping its ranks in
    turn, where there are cores for more than one. An estimate is CPU-bound Python on fake tensors, and its
    ranks are independent: this keeps every core busy with the imports paid once per core."""
    workers = min(len(items), os.cpu_count() or 1)
    if workers < 2:
        return [_estimate(est, results, progress) for progress, est in items]
    # spawn: fresh interpreters, with no fake process group or fake mode inherited (suite/estimate); a Pool,
    # not a ProcessPoolExecutor: leaving its block on Ctrl-C or a signal terminates the workers instead of
    # waiting for their estimates to finish
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        return pool.starmap(_estimate, [(est, results, progress, 1) for progress, est in items], chunksize=1)


def _project(source: dict, topology: str, mfu: float, results: Path) -> dict:
    from suite.sim import get_topology, project, simulated_record

    command = _projection_command(Path(source["_path"]), topology, mfu, results)
    clean = {k: v for k, v in source.items() if k != "_path"}
    sim = simulated_record(clean, project(clean, get_topology(topology), mfu=mfu), command)
    sim["_path"] = str(write_record(sim, results / f"{sim['run_id']}.json"))
    _say(sim["_path"])
    return sim


def run_estimate(est: Estimate, results: Path, progress: str) -> list[dict]:
    """The estimate's record and one simulated record per topology, written into `results`."""
    record = _estimate(est, results, progress)
    return [record, *(_project(record, name, est.mfu, results) for name in est.topologies)]


def _done_estimate(est: Estimate, folder: Folder, progress: str, fresh: bool) -> dict | None:
    """The estimate's complete record of this configuration, if the folder has one (and not `fresh`)."""
    from suite.estimate.scale import prepare

    command = estimate_command(est, folder.path)
    done = None if fresh else folder.done(command, same_settings(dataclasses.asdict(prepare(est.cfg))))
    if done is not None:
        _say(f"skip [{progress}] {command}: {done['status']} record {done['_path']}")
    return done


def _projections(est: Estimate, record: dict, folder: Folder, progress: str) -> list[dict]:
    """Each projection of the estimate `record`, skipped when done (made from the estimate it projects)."""
    out = []
    for name in est.topologies:
        sim_command = _projection_command(Path(record["_path"]), name, est.mfu, folder.path)
        sim = folder.done(sim_command)
        if sim is not None:
            _say(f"skip [{progress} projection] {sim_command}: complete record {sim['_path']}")
        else:
            with folder.timer.item("projections"):
                sim = _project(record, name, est.mfu, folder.path)
            folder.add(sim, Path(sim["_path"]))
        out.append(sim)
    return out


def write_summary(results: Path, runs: str, timer: PlanTimer) -> str:
    """The plan's summary (its table and verdicts, then where its time went) in `results`/plan-summary.txt;
    returns the breakdown as printed."""
    text = f"where the plan's time went (wall seconds; suite/timing.py)\n{render(timer.breakdown())}"
    atomic_write(Path(results) / SUMMARY, lambda f: f.write(f"{runs}\n\n{text}\n"))
    return text


# what each kind of evidence's block of the table shows, and what its numbers are (suite.judge.verdicts.EVIDENCE)
KINDS = {
    "measured (gpu)": "runs measured on GPUs",
    "measured (cpu)": "runs measured on CPUs",
    "counted": "exact counts of instrumented algorithms",
    "estimated": "one step per rank on fake tensors (memory and bytes; no time, no loss)",
    "simulated": "suite/sim's projections of the estimates onto a cluster (time projected, not measured)",
}


def _fmt(value: float | None, scale: float = 1.0, spec: str = ".1f") -> str:
    return "-" if value is None else format(value / scale, spec)


# the columns of each block: (header, what a summary row shows there); estimates have no time or loss to show
# and projections only time, so neither shows a number a reader could take for a measurement
_SHARED = (("workers", lambda row: str(row["world_size"])),)
_MEMORY = (
    ("peak MiB/rank", lambda row: _fmt(row["peak_bytes_max"], MiB)),
    ("state MiB/rank", lambda row: _fmt(row["state_bytes_max"], MiB)),
    ("comm MiB/step/rank", lambda row: _fmt(row["comm_bytes_per_rank_step"], MiB, ".2f")),
)
_MEASURED = (
    ("seed", lambda row: str(row["seed"])),
    *_SHARED,
    ("tokens/s", lambda row: _fmt(row["tokens_per_s"], spec=",.0f")),
    ("CPU s/step", lambda row: _fmt(row["cpu_step_s_median"], spec=".3g")),
    *_MEMORY,
    ("final val loss", lambda row: _fmt(row["final_val_loss"], spec=".4f")),
)
COLUMNS = {
    "estimated": (*_SHARED, *_MEMORY),
    "simulated": (*_SHARED, ("projected tokens/s", lambda row: _fmt(row["tokens_per_s"], spec=",.0f"))),
}


def table(records: list[dict]) -> str:
    """The plan's runs, one block per kind of evidence (measured, counted, estimated, simulated: never mixed),
    one row per record, named by its arm's label as the report names it (what varies among the plan's arms)."""
    from suite.report.labels import arms, key

    labels = {k: a.label for k, a in arms(records).items()} if records else {}
    blocks = []
    for kind, what in KINDS.items():
        mine = [r for r in records if evidence_label(r["provenance"], r["env"]["device"]) == kind]
        if mine:
            rows = [(labels[key(r)], summary_row(r)) for r in mine]
            blocks.append(_block(f"{kind}, {len(mine)} record{'s' * (len(mine) != 1)}: {what}", kind, rows))
    return "\n\n".join(blocks)


def _block(title: str, kind: str, rows: list[tuple[str, dict]]) -> str:
    columns = (("evidence", lambda _: kind), *COLUMNS.get(kind, _MEASURED), ("status", lambda row: row["status"]))
    cells = [[label, *(show(row) for _, show in columns)] for label, row in rows]
    head = ["arm", *(name for name, _ in columns)]
    widths = [max(len(line[i]) for line in (head, *cells)) for i in range(len(head))]

    def line(words: list[str]) -> str:  # label and evidence left, the numbers right, each column its widest
        return "  ".join(
            [*(w.ljust(n) for w, n in zip(words[:2], widths)), *(w.rjust(n) for w, n in zip(words[2:], widths[2:]))]
        )

    header = line(head)
    return "\n".join([title, header, "-" * len(header), *(line(c) for c in cells)])


def verdict_summary(records: list[dict]) -> str:
    """How many claims of the plan's reproductions got each verdict word (`suite verdicts` shows each claim)."""
    by_reproduction: dict[str, list[dict]] = defaultdict(list)
    for record in records:
        by_reproduction[record.get("reproduction") or ""].append(record)
    lines = []
    for name, mine in sorted(by_reproduction.items()):
        try:
            words = Counter(v.verdict for _, v in judge_all(claims_for(name), mine))
        except ClaimsError as err:
            lines.append(f"verdicts of {name}: not evaluated: {err}")
            continue
        counts = ", ".join(f"{word} {words[word]}" for word in VERDICTS if words[word]) or "no claims"
        lines.append(f"verdicts of {name}: {counts} (python -m suite verdicts RESULTS shows each claim)")
    return "\n".join(lines)
