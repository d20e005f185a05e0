"""A quality preset on one GPU with emulated workers (issue 43 item 5; docs/emulation.md).

Quality claims depend on the arithmetic of the updates, not on where the workers sit, so one device can run a
preset's K workers in turn. `fit` takes a reproduction's builder of an emulated quality preset (its runs for a given
model) and sizes it to the device: in bf16, at the largest model of a ladder whose K replicas fit the device's
memory and whose runs fit the time budget (10 minutes by default), estimated from the step and evaluation costs it
measures first on the device (a few steps of each arm, `measure`). The plan's notes give every size it tried, with
its measured costs and estimate, so a reader sees which size fits and why the next does not.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

from suite.config import RunConfig
from suite.plan.plans import StepCost, estimated_wall_s
from suite.records import read_record
from suite.run import limits

BUDGET_S = 600.0  # 10 minutes of one GPU: what a lent device gives a session's check
MEASURED_STEPS = 3  # timed steps of each arm, after the clock's warm-up
PRECISION = "bf16"  # every emulable method trains under bf16 autocast or FSDP2's bf16 policy


@dataclass(frozen=True)
class Size:
    """One model of the ladder as tried: the measured cost of each arm, the estimate, and whether it fits."""

    model: str
    costs: dict[str, StepCost]
    wall_s: float | None
    why_not: str | None

    def note(self, budget_s: float) -> str:
        if self.wall_s is None:
            return f"{self.model}: {self.why_not}"
        fits = "fits" if self.why_not is None else "does not fit"
        costs = ", ".join(f"{arm} {c.step_s:.3g} s a step" for arm, c in self.costs.items())
        return (
            f"{self.model}: estimated {self.wall_s / 60:.1f} minutes, {fits} {budget_s / 60:.0f}, from the steps "
            f"measured on this device ({costs})"
        )


def arm_name(cfg: RunConfig) -> str:
    """An arm's name in the notes: the method and its settings."""
    return " ".join([cfg.method, *(f"{k}={v}" for k, v in sorted(cfg.variant.items()))])


def on_device(runs: list[RunConfig], device: str) -> list[RunConfig]:
    """The runs on `device` as emulated workers (in bf16 on a GPU)."""
    precision = PRECISION if device == "cuda" else None
    return [dataclasses.replace(cfg, device=device, emulate=True, precision=precision or cfg.precision) for cfg in runs]


def measure(cfg: RunConfig, steps: int = MEASURED_STEPS) -> tuple[StepCost, int]:
    """A run of `cfg`'s arm for the clock's warm-up and `steps` timed steps, one evaluation at the end, FLOPs counted
    on its first step (off the clock) and no other meter: its median step and its evaluation in wall seconds, and
    the steps the whole run of `cfg` takes (its tokens, or its FLOPs over the FLOPs the probe counted a step)."""
    from suite.run.launch import launch  # a training launch: only a plan that measures needs it

    never = 10**9
    with tempfile.TemporaryDirectory() as folder:
        probe = dataclasses.replace(
            cfg,
            tokens=(cfg.clock_warmup + steps) * _step_tokens(cfg),
            flops=None,
            mem_step=never,
            comm_step=never,
            eval_every=never,
            evals="",
            results=folder,
            reproduction="one-gpu-probe",
            variant=dict(cfg.variant),
        )
        record = read_record(launch(probe))
    if record["status"] != "complete":
        raise ValueError(f"measuring {arm_name(cfg)} on {cfg.model} failed: {record.get('error')}")
    evaluations = sum(p.get("val_loss") is not None for p in record["curve"])
    cost = StepCost(record["throughput"]["step_s_median"], record["timing"]["eval_s"] / max(evaluations, 1))
    if cfg.tokens:
        return cost, round(cfg.tokens / _step_tokens(cfg))
    totals = record["totals"]
    return cost, round(cfg.flops / (totals["flops"] / totals["steps"]))


def _step_tokens(cfg: RunConfig) -> int:
    return cfg.nproc * cfg.micro_batch * cfg.grad_accum * cfg.seq_len


def fit(
    build: Callable[[str], list[RunConfig]],
    ladder: tuple[str, ...],
    device: str = "cuda",
    budget_s: float = BUDGET_S,
    probe: Callable[[RunConfig], tuple[StepCost, int]] = measure,
) -> tuple[list[RunConfig], list[str]]:
    """`build(model)`'s runs on one `device` at the largest model of `ladder` (smallest first) that fits its memory
    and `budget_s`, and a note for every size tried; ValueError (one line) when even the first does not fit."""
    _require(device)
    chosen: list[RunConfig] | None = None
    notes = []
    for model in ladder:
        runs = on_device(build(model), device)
        size = _try(runs, model, budget_s, probe)
        notes.append(size.note(budget_s))
        if size.why_not:
            break
        chosen = runs
    if chosen is None:
        raise ValueError(f"no model fits one {device} in {budget_s / 60:.0f} minutes: {notes[-1]}")
    return chosen, notes


def _require(device: str) -> None:
    """Sizing measures on the device: a GPU that does not answer is a one-line ValueError, not a torch traceback."""
    if device != "cuda":
        return
    import torch

    try:
        torch.cuda.get_device_properties(0)
    except (RuntimeError, AssertionError) as err:
        first = (str(err).splitlines() or [type(err).__name__])[0]
        why = f"sizing a preset to one GPU measures its steps there, and no GPU answers here: {first}"
        raise ValueError(why) from None


def _try(runs: list[RunConfig], model: str, budget_s: float, probe) -> Size:
    """Whether the runs of one size fit: memory first (nothing is probed at a size the device cannot hold), then
    time, each arm probed once (its seeds share its cost and steps)."""
    for cfg in runs:
        try:
            limits.check_machine(cfg)
        except ValueError as err:
            return Size(model, {}, None, f"{arm_name(cfg)} does not fit: {err}")
    measured: dict[tuple, tuple[StepCost, int]] = {}
    items = []
    for cfg in runs:
        key = (arm_name(cfg), cfg.tokens, cfg.flops)
        if key not in measured:
            measured[key] = probe(cfg)
        cost, steps = measured[key]
        items.append((cost, steps, steps // cfg.eval_every))
    wall = estimated_wall_s(items)
    costs = {name: cost for (name, *_), (cost, _) in measured.items()}
    over = None if wall <= budget_s else "over the time budget"
    return Size(model, costs, wall, over)
