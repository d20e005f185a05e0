"""Learning rates picked from a sweep (issue 26 item 3): each arm's winner, by AlgoPerf's rule.

A plan files its sweep runs under a reproduction name of their own (suite.plan.plans.lr_sweep), so that no verdict
counts a tuning run as evidence. An arm here is a record's arm (suite/arms.py) without its learning rate: the runs of
one arm at several rates are that arm's trials. The rule: every arm gets the same number of trials, on one seed; the
winner is the rate of the lowest final validation loss, a diverged run losing to every finished one; and a winner at
the lowest or highest rate swept says nothing about the rates beyond it, so the grid must be extended there first.
The rate an arm sweeps is the run's learning rate (`lr`) or its method's outer one (`outer_lr`: DiLoCo's family,
whose methods differ in the outer step), whichever varies among its trials (RATES); an arm that varies both is refused.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from suite.arms import arm_of, label
from suite.records import FINISHED, final_val_loss, load_records

RATES = ("lr", "outer_lr")  # what a sweep may vary: the run's learning rate, or the method's outer rate (its variant)


@dataclass(frozen=True)
class Winner:
    """An arm's picked rate: `label` names the arm without its rate, `grid` holds every rate swept, ascending, and
    `rate` which of RATES it is."""

    label: str
    lr: float
    val_loss: float
    grid: tuple[float, ...]
    rate: str = "lr"


def without_rates(config: dict) -> dict:
    """An arm's configuration (suite.arms.arm_of's) less the rates a sweep may vary (RATES): its trials' common part."""
    variant = {k: v for k, v in (config.get("variant") or {}).items() if k not in RATES}
    return {**{k: v for k, v in config.items() if k not in RATES}, "variant": variant}


def rates_of(record: dict) -> dict[str, float | None]:
    """The record's value of each of RATES: its learning rate and its method's outer rate (None without one)."""
    settings = record.get("settings") or {}
    return {"lr": settings.get("lr"), "outer_lr": (arm_of(record)["config"].get("variant") or {}).get("outer_lr")}


def swept_rate(records: list[dict]) -> str:
    """Which of RATES varies among one arm's trials (`lr` where none does); ValueError (one line) where both do."""
    varying = [r for r in RATES if len({rates_of(rec)[r] for rec in records}) > 1]
    if len(varying) > 1:
        raise ValueError(f"trials vary {' and '.join(varying)}: a sweep varies one rate, the other held fixed")
    return varying[0] if varying else "lr"


def sweep_winners(folder: str | Path | list[Path], reproduction: str) -> dict[str, Winner]:
    """Each arm's winner among the records of `reproduction` (the sweep's name) in the results folder `folder` (or
    folders: a grid extended by a later plan, each folder one plan run), by the arm's label; ValueError (one line)
    where the sweep cannot pick (pick_winners)."""
    folders = folder if isinstance(folder, list) else [Path(folder)]
    sweep = [r for f in folders for r in load_records(f)[0] if r["reproduction"] == reproduction]
    if not sweep:
        shown = ", ".join(map(str, folders))
        raise ValueError(f"no records of sweep {reproduction!r} in {shown}; run the plan's tune preset first")
    return pick_winners(sweep)


def pick_winners(records: list[dict]) -> dict[str, Winner]:
    """Each arm's winner among sweep records, by the arm's label. ValueError (one line) where a run is unfinished,
    the runs have two seeds, an arm has two runs at one rate, the arms have unequal trial counts, or a winner sits
    at its grid's edge."""
    unfinished = [r.get("_path") or r["run_id"] for r in records if r["status"] not in FINISHED]
    if unfinished:
        raise ValueError(f"the sweep is not finished ({', '.join(unfinished)}): run its plan again")
    seeds = sorted({r["env"]["seed"] for r in records})
    if len(seeds) > 1:
        raise ValueError(f"the sweep ran seeds {seeds}: AlgoPerf's rule tunes on one seed and reports on others")
    trials = _trials(records)
    counts = {name: len(losses) for name, (losses, _) in trials.items()}
    if len(set(counts.values())) > 1:
        shown = ", ".join(f"{name}: {n}" for name, n in sorted(counts.items()))
        raise ValueError(f"unequal trial counts ({shown}): AlgoPerf's rule gives every arm the same number of rates")
    winners = {name: _winner(name, losses, rate) for name, (losses, rate) in trials.items()}
    edges = [fix for fix in map(_edge, winners.values()) if fix]
    if edges:  # every arm's fix at once: one more sweep extends them all
        raise ValueError("; ".join(edges))
    return winners


def _trials(records: list[dict]) -> dict[str, tuple[dict[float, float], str]]:
    """arm name -> (rate -> final validation loss, infinite for a diverged run; which of RATES it sweeps)."""
    configs = [without_rates(arm_of(rec)["config"]) for rec in records]
    names = _names(configs)
    runs: dict[str, list[dict]] = {}
    for rec, config in zip(records, configs):
        runs.setdefault(names[json.dumps(config, sort_keys=True, default=str)], []).append(rec)
    trials: dict[str, tuple[dict[float, float], str]] = {}
    for name, recs in runs.items():
        rate, losses = swept_rate(recs), {}
        for rec in recs:
            value = rates_of(rec)[rate]
            if value in losses:
                raise ValueError(f"{name} has two runs at {rate}={value:g}: a sweep runs each rate once, on one seed")
            losses[value] = _final_loss(rec)
        trials[name] = (losses, rate)
    return trials


def _names(configs: list[dict]) -> dict[str, str]:
    """Each arm's name: its label, and where arms share a label (the label shows the method's parameters, not the
    budget: one sweep at two budgets) the fields that set them apart, e.g. "ddp adamw n1 llama-tiny budget=512000"."""
    by_label: dict[str, dict[str, dict]] = {}
    for config in configs:
        by_label.setdefault(label(config), {})[json.dumps(config, sort_keys=True, default=str)] = config
    names = {}
    for name, arms in by_label.items():
        apart = sorted({k for a in arms.values() for b in arms.values() for k in {*a, *b} if a.get(k) != b.get(k)})
        for key, config in arms.items():
            names[key] = " ".join([name, *(f"{k}={config.get(k)}" for k in apart)])
    return names


def _final_loss(rec: dict) -> float:
    if rec["status"] == "diverged":  # its last finite loss came before it blew up: it loses to every finished run
        return math.inf
    loss = final_val_loss(rec)
    if loss is None:
        raise ValueError(f"{rec.get('_path') or rec['run_id']} has no validation loss: a sweep needs evaluations")
    return loss


def _winner(name: str, losses: dict[float, float], rate: str) -> Winner:
    grid = tuple(sorted(losses))
    lr = min(grid, key=losses.__getitem__)  # ties go to the lower rate
    if math.isinf(losses[lr]):
        raise ValueError(f"every rate of {name} diverged: extend the grid below {grid[0]:g}")
    return Winner(name, lr, losses[lr], grid, rate)


def _edge(winner: Winner) -> str:
    """The fix where the winner is the lowest or highest rate swept, else ''."""
    at = f"{winner.label}'s winner {winner.rate}={winner.lr:g}"
    if winner.lr == winner.grid[0]:
        return f"{at} is the lowest rate swept: extend the grid below {winner.lr:g}"
    if winner.lr == winner.grid[-1]:
        return f"{at} is the highest rate swept: extend the grid above {winner.lr:g}"
    return ""
