"""A reproduction's plan: the runs of a preset, the protocol they share, and where its claims live.

Each reproduction declares `plan(preset: str) -> Plan` (suite.extensions). Runs are launched for real;
estimates are paper-scale configurations stepped on fake tensors (suite/estimate),
each optionally projected onto network topologies (suite/sim), so claims at a scale this machine cannot
run get numbers labelled `estimated` and `simulated`, never mixed with measurements.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from suite.config import RunConfig, command_line
from suite.extensions import get_reproduction
from suite.plan.micro import Microbench


@dataclass
class Estimate:
    """One configuration to estimate, on nodes of `gpus_per_node`, and the topologies to project it onto.

    A projection's compute time is the busiest rank's FLOPs / (the topology's peak x `mfu`): an assumption
    the simulated record states.
    """

    cfg: RunConfig
    gpus_per_node: int = 8
    topologies: tuple[str, ...] = ()
    mfu: float = 0.4


@dataclass
class Plan:
    """A preset's runs, estimates and microbenchmark items. The reproduction's name, each run's `reproduction`
    (where the plan leaves it at the default) and each run's command are filled in by load_plan from the
    declaration, so a reproduction writes its name once."""

    preset: str
    runs: list[RunConfig]
    protocol: str
    claims: Path | None = None
    notes: list[str] = field(default_factory=list)
    estimates: list[Estimate] = field(default_factory=list)
    micro: list[Microbench] = field(default_factory=list)  # microbenchmark items (suite/plan/micro.py)
    name: str = ""


def load_plan(name: str, preset: str) -> Plan:
    """The plan of reproduction `name` at `preset`; ValueError (one line) for an unknown name or preset."""
    rep = get_reproduction(name)
    if rep.plan is None:
        raise ValueError(f"reproduction {name!r} declares no plan")
    if preset not in rep.presets:
        raise ValueError(f"reproduction {name!r} has no preset {preset!r}; its presets: {', '.join(rep.presets)}")
    plan = rep.plan(preset)
    plan.name = rep.name
    if plan.claims is None:
        plan.claims = rep.claims
    default = RunConfig.reproduction
    for cfg in [*plan.runs, *(e.cfg for e in plan.estimates)]:
        if cfg.reproduction == default:  # a plan may file some runs elsewhere (dion's learning-rate sweep)
            cfg.reproduction = rep.name
    for cfg in plan.runs:
        cfg.command = command_line(cfg)
    return plan


@dataclass(frozen=True)
class Schedule:
    """The learning-rate schedule of a quality protocol, one rule for every arm of a card (issue 26): linear
    warm-up over `warmup` of the baseline's steps, then cosine down to `min_lr_ratio` over each arm's own budget
    (suite/run/optim.py: the cosine follows the fraction of the budget spent, so an arm that trains longer under an
    equal-FLOPs budget decays over its longer run and every arm ends its schedule where it stops)."""

    warmup: float = 0.1
    min_lr_ratio: float = 0.1

    def settings(self, baseline_steps: int) -> dict:
        """The RunConfig fields of every arm of a card whose baseline runs `baseline_steps` steps."""
        warmup_steps = max(1, round(self.warmup * baseline_steps))
        return {"warmup_steps": warmup_steps, "lr_decay": "cosine", "min_lr_ratio": self.min_lr_ratio}


def lr_sweep(arms: list[RunConfig], grid: tuple[float, ...], reproduction: str) -> list[RunConfig]:
    """Every arm at every rate of `grid` on seed 0 (AlgoPerf's rule: the same trials for every arm, tuned on one
    seed and reported on others), filed as `reproduction` so that no verdict counts a tuning run as evidence;
    suite.judge.sweeps picks each arm's winner from the records. Rate by rate, so a sweep stopped midway leaves every
    arm with nearly as many trials as the others."""
    return [
        replace(cfg, lr=lr, seed=0, reproduction=reproduction, variant=dict(cfg.variant)) for lr in grid for cfg in arms
    ]


def tuned_runs(
    arms: list[RunConfig],
    rates: dict[str, float | None],
    key: Callable[[RunConfig], str],
    seeds: tuple[int, ...],
    tune: str,
    table: str = "LR_TUNED",
) -> list[RunConfig]:
    """Every arm at its tuned rate (`rates[key(cfg)]`, a winner of suite.judge.sweeps) on each of `seeds`, which exclude
    the tune's seed 0 (AlgoPerf's rule: tuned on one seed, reported on others). ValueError (one line) naming the
    tune to run first (`tune`, a command) and the plan's `table` of rates while a rate is unset."""
    unset = sorted({str(key(cfg)) for cfg in arms if rates.get(key(cfg)) is None})
    if unset:
        raise ValueError(
            f"no tuned learning rate for {', '.join(unset)}: run `{tune}`, commit its records and set the plan's "
            f"{table} to the winners suite.judge.sweeps.sweep_winners picks"
        )
    return [replace(cfg, lr=rates[key(cfg)], seed=s, variant=dict(cfg.variant)) for s in seeds for cfg in arms]


@dataclass(frozen=True)
class StepCost:
    """An arm's wall seconds per training step and per validation pass on the machine a preset is sized for
    (2 quiet cores), read from the committed smoke records of the same model, world size and micro-batch: the
    larger of the record's median wall step (`throughput.step_s_median`) and its CPU demand, world size x
    `throughput.cpu_step_s_median` / cores; per evaluation, `timing.eval_s` over the record's evaluations; per
    metered step (FLOPs, memory, collectives: suite/meters/schedule.py), `metered_s`, where a short run's metered
    steps weigh (None: as a timed step)."""

    step_s: float
    eval_s: float
    metered_s: float | None = None


def estimated_wall_s(runs: list[tuple], per_run_s: float = 2.0, launch_s: float = 30.0, launches: int = 1) -> float:
    """Estimated (not measured) wall seconds of a plan: each run is (its arm's cost, steps, evaluations) or (its
    arm's cost, steps, evaluations, how many of the steps are metered); `per_run_s` covers a run's set-up and record
    in a shared launch, `launch_s` one torchrun launch and the workers' imports (the smoke plans' summaries: 10-30
    s), `launches` how many the plan makes (one per world size)."""
    total = launch_s * launches
    for cost, steps, evals, *metered in runs:
        m = metered[0] if metered else 0
        per_metered = cost.step_s if cost.metered_s is None else cost.metered_s
        total += cost.step_s * (steps - m) + per_metered * m + cost.eval_s * evals + per_run_s
    return total
