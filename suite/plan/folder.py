"""What every launcher of a plan shares: its results folder, the key of a configuration in it, which items a
complete record there already covers, and the bookkeeping of a planned run. The local and SLURM launchers
(suite/plan/reproduce.py, suite/plan/slurm.py) both sit on this module, so that they skip and supersede records
by the same rules and neither reaches into the other.

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
import shlex
import signal
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from suite import config
from suite.config import RunConfig, command_line
from suite.plan.micro import Microbench
from suite.plan.plans import Plan
from suite.records import FINISHED, load_records
from suite.run.recorder import repository_path
from suite.timing import PlanTimer

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


def say(line: str) -> None:
    """A line of the plan's progress, on stderr (stdout carries the table and the report's path)."""
    print(line, file=sys.stderr, flush=True)


def item_count(plan: Plan) -> int:
    """How many items the plan has: the N of each item's `[i/N]`."""
    return len(plan.runs) + len(plan.estimates) + len(plan.micro)


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
                say(
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
        say(f"removed {old['_path']}: superseded by {by}")
        for key, recs in self.by_key.items():
            derived = [r for r in recs if (r.get("simulation") or {}).get("source_run_id") == old["run_id"]]
            for rec in derived:
                Path(rec["_path"]).unlink(missing_ok=True)
                say(f"removed {rec['_path']}: projected from {old['_path']}")
            self.by_key[key] = [r for r in recs if all(r is not d for d in derived)]


def plan_run(cfg: RunConfig, results: Path) -> RunConfig:
    """`cfg` set to write into `results`, with the command that makes it (repository-relative folder)."""
    cfg.results = str(results)
    cfg.command = f"{command_line(cfg)} --results {repository_path(results)}"
    return cfg


def done_run(cfg: RunConfig, folder: Folder, fresh: bool) -> dict | None:
    """The finished record of the planned run `cfg` (plan_run) with its settings, unless `fresh`: it is skipped."""
    return None if fresh else folder.done(cfg.command, same_settings(dataclasses.asdict(cfg)))
