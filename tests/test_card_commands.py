"""Every claim card's command plans the arms the card reads: its `--preset` plans runs (or estimates, or
microbenchmark items) on both sides of the card, under the card's protocol. A card whose command plans nothing
it could be judged on sends its reader to run a plan that cannot decide it (issue 25: the Dion wall-clock
card named `--preset gpu`, which planned no llama-1b and no target runs)."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import json
import re
import shlex

import pandas as pd
import pytest
import torch

from reproductions.flash_io.micro import BACKENDS
from suite import config, models
from suite.data import default_data_for
from suite.extensions import get_reproduction, reproductions
from suite.judge.claims import Claim, claims_for
from suite.judge.metrics import one_arm, side
from suite.params import resolved
from suite.plan.plans import Plan, load_plan
from suite.run.optim import get_spec, split_variant
from suite.run.strategy import get_strategy

# the packages export their plan functions as `plan`
flash_io_plan = importlib.import_module("reproductions.flash_io.plan")
sdp_plan = importlib.import_module("reproductions.sdp.plan")
GPUS = 8  # the GPU presets plan on every visible GPU; the cards that need a world size ask for up to 8


def _protocol(cfg: config.RunConfig) -> str:
    return (
        next(k for k, f in (("flops", cfg.flops), ("time", cfg.time_s), ("target", cfg.target)) if f)
        if (cfg.flops or cfg.time_s or cfg.target)
        else "tokens"
    )


def planned_row(cfg: config.RunConfig) -> dict:
    """What the record of a planned run will carry for a card to select on: method, model, variant (declared
    defaults filled in, as the worker records it), arm configuration and protocol."""
    method_params, optimizer_params = split_variant(cfg)
    variant = {
        **get_strategy(cfg, method_params).variant,
        "ac": cfg.ac,
        "precision": cfg.precision,
        "optimizer": cfg.optimizer,
        **resolved(get_spec(cfg.optimizer).params, optimizer_params),
    }
    settings = dataclasses.asdict(cfg)
    arm = {k: settings[k] for k in config.ARM if k in settings and k != "nproc"}
    arm.update(
        method=cfg.method,
        model=cfg.model,
        world_size=cfg.nproc,
        protocol=_protocol(cfg),
        data=cfg.data or default_data_for(models.kind_of(cfg.model)),
        budget=cfg.tokens or cfg.flops or cfg.time_s,  # as suite/run/protocols.py records it (a target run: none)
    )
    return {
        "reproduction": cfg.reproduction,
        "seed": cfg.seed,
        "setting": f"{cfg.model} {cfg.seq_len} {cfg.micro_batch} {cfg.grad_accum} {cfg.precision}",
        "method": cfg.method,
        "model": cfg.model,
        "variant": json.dumps(variant, sort_keys=True, default=str),
        "arm_config": json.dumps(arm, sort_keys=True, default=str),
        "arm": json.dumps({**arm, "variant": variant}, sort_keys=True, default=str),  # a record's arm key hashes both
        "arm_label": f"{cfg.method} {variant}",
        "protocol": _protocol(cfg),
    }


def _frame(plan: Plan) -> pd.DataFrame:
    return pd.DataFrame([planned_row(c) for c in [*plan.runs, *(e.cfg for e in plan.estimates)]])


def missing_sides(card: Claim, plan: Plan) -> list[str]:
    """The sides of `card` that `plan` plans nothing for."""
    m = card.metric
    if m["name"].startswith("micro"):  # micro, micro-slope, micro-merge: microbenchmark items, named by `method`
        items = {item.name for item in plan.micro}  # (and `baseline`, where the metric compares two)
        return [f"micro item {n}" for n in (m["method"], m.get("baseline")) if n and n not in items]
    df = _frame(plan)
    out = []
    for baseline, protocol in ((False, card.protocol), (True, card.baseline_protocol or card.protocol)):
        if baseline and not m.get("baseline"):
            continue
        rows = side(df, m, baseline=baseline) if not df.empty else df
        if protocol and not rows.empty:
            rows = rows[rows["protocol"] == protocol]
        if rows.empty:
            out.append(f"{'baseline' if baseline else 'method'} {m['baseline' if baseline else 'method']}")
    return out


CARDS = [(name, card) for name in sorted(reproductions()) for card in claims_for(name)]


@pytest.mark.parametrize("name, card", CARDS, ids=[card.id for _, card in CARDS])
def test_every_cards_command_plans_the_arms_it_reads(name, card, monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: GPUS)
    monkeypatch.setenv("CIFAR_ROOT", "/data/cifar")
    preset = re.search(r"--preset (\S+)", card.command or "")
    assert preset, f"{card.id}: its command {card.command!r} names no preset"
    if preset.group(1) != "smoke":  # a GPU preset, planned as on a node of GPUS GPUs with every SDPA backend
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(flash_io_plan, "available_backends", lambda device, dtype="float32": list(BACKENDS))
        monkeypatch.setattr(sdp_plan, "step_flops", lambda model, sequences, seq_len, blocks=None: 1e12 * sequences)
    plan = load_plan(name, preset.group(1))
    assert not missing_sides(card, plan), f"{card.id}: `{card.command}` plans no {missing_sides(card, plan)}"


@pytest.mark.parametrize("name, card", CARDS, ids=[card.id for _, card in CARDS])
def test_every_cards_command_runs_the_reproduction_that_holds_it(name, card):
    """A reproduction's name is written once, by its folder: a card copied from another names the wrong one."""
    words = shlex.split(card.command or "")
    assert words[:5] == ["python", "-m", "suite", "reproduce", name], f"{card.id}: {card.command!r} runs no {name}"


# the CPU presets each write a results folder of their own; every card of the reproduction is judged on it
# (microbenchmark cards read items, not runs; baselines and flash-io have no quality preset)
CPU_PRESETS = [
    (name, card, preset)
    for name, card in CARDS
    for preset in ("smoke", "quality")
    if preset in get_reproduction(name).presets and not card.metric["name"].startswith("micro")
]


@pytest.mark.parametrize(
    "name, card, preset", CPU_PRESETS, ids=[f"{card.id}@{preset}" for _, card, preset in CPU_PRESETS]
)
def test_every_card_reads_one_arm_per_side_in_each_cpu_preset(name, card, preset):
    """A side that matches two arms of one setting is a ClaimsError that takes the reproduction's verdicts with
    it (suite/judge/metrics.py one_arm): with two budgets in the quality preset, every card must name its own."""
    # measured runs only: estimates are another kind of evidence, never pooled with them (suite/judge/verdicts.py)
    df = pd.DataFrame([planned_row(c) for c in load_plan(name, preset).runs])
    df = df[df["reproduction"] == name]  # a plan may file runs elsewhere (dion's sweep): verdicts never read them
    for baseline, protocol in ((False, card.protocol), (True, card.baseline_protocol or card.protocol)):
        if baseline and not card.metric.get("baseline"):
            continue
        rows = side(df, card.metric, baseline=baseline)
        one_arm(rows[rows["protocol"] == protocol] if protocol else rows, f"{card.id}'s side")


@functools.cache
def _every_cpu_preset(name: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The planned measured runs and estimates of every preset of `name` that plans on a CPU machine (a GPU preset
    refuses to plan, or plans CUDA runs), read together as `suite verdicts` reads several results folders, each row
    with its `preset`. The sdp paper preset is a GPU preset; its FLOP-matched budgets need no FLOP count here."""
    runs, estimates = [], []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch.cuda, "device_count", lambda: 0)
        mp.setattr(sdp_plan, "step_flops", lambda model, sequences, seq_len, blocks=None: 1e12 * sequences)
        for preset in get_reproduction(name).presets:
            try:
                plan = load_plan(name, preset)
            except ValueError:  # needs GPUs (or is out of reach)
                continue
            if any(c.device != "cpu" for c in plan.runs):
                continue
            runs += [{**planned_row(c), "preset": preset} for c in plan.runs]
            estimates += [{**planned_row(e.cfg), "preset": preset} for e in plan.estimates]
    frames = (pd.DataFrame(runs), pd.DataFrame(estimates))
    return tuple(f[f["reproduction"] == name] if not f.empty else f for f in frames)


# Cards whose sides match CPU runs of a preset their command does not name, each with why those runs cannot decide
# it; strict: an entry that no longer matches another preset's runs fails the test until it goes.
READS_OTHER_PRESETS = {
    "sdp-resnet18-cifar": (
        "requires cuda: the smoke preset's 10-step ResNet-18 runs on CPU (embedded digits, memory only) never decide "
        "it, since CPU runs decide only where the records meet the card's `requires` (suite/judge/verdicts.py)"
    ),
}
RUN_CARDS = [(name, card) for name, card in CARDS if not card.metric["name"].startswith("micro")]


@pytest.mark.parametrize("name, card", RUN_CARDS, ids=[card.id for _, card in RUN_CARDS])
def test_every_card_reads_its_own_preset_when_every_cpu_preset_is_read_together(name, card):
    """`suite verdicts` and the report read results folders together, so a card whose command names one preset
    must not be judged on another preset's records: over the planned runs of every CPU preset of its reproduction
    read together (smoke, quality, tune, tuned, masking, ...), each side matches one arm per setting and only runs of
    the card's own preset (another preset's runs at another setting would join as a sweep, at the same setting
    as seeds). The estimates of every CPU preset, read together, must match one arm per setting too where the card
    allows an estimate (estimates are another kind of evidence, never pooled with runs; the sdp calibrate preset's
    are meant to be read with the smoke preset's: calibration). Before (issue 41 item 11), each preset was
    checked alone."""
    own = re.search(r"--preset (\S+)", card.command or "").group(1)
    runs, estimates = _every_cpu_preset(name)
    read = set()
    for baseline, protocol in ((False, card.protocol), (True, card.baseline_protocol or card.protocol)):
        if baseline and not card.metric.get("baseline"):
            continue
        where = f"{card.id}'s {'baseline' if baseline else 'method'} side over every CPU preset"
        if not runs.empty:
            rows = side(runs, card.metric, baseline=baseline)
            rows = rows[rows["protocol"] == protocol] if protocol else rows
            one_arm(rows, where)
            read |= set(rows["preset"]) - {own}
        if not estimates.empty and "estimated" in card.evidence:  # a card that allows no estimate never reads one
            one_arm(side(estimates, card.metric, baseline=baseline), f"{where} (estimates)")
    if card.id in READS_OTHER_PRESETS:
        assert read, f"{card.id} no longer reads another preset's runs: remove it from READS_OTHER_PRESETS"
    else:
        assert not read, f"{card.id} (`{card.command}`) also reads the runs of preset(s) {sorted(read)}"


# ---- the smoke presets cut to what their cards read (issue 25: every smoke plan under 10 minutes on 2 cores) ----

LEAN_SMOKE = ("dion", "fl-fsdp")


def _readings(card: Claim) -> list[dict]:
    """Every metric a card selects runs with: its own, then each `beside` entry's (shown, never judged)."""
    return [card.metric, *({**card.metric, **extra.overrides} for extra in card.beside)]


def _read_by(card: Claim, df: pd.DataFrame) -> set[int]:
    rows: set[int] = set()
    for metric in _readings(card):
        for baseline in (False, True):
            if not baseline or metric.get("baseline"):
                rows |= set(side(df, metric, baseline=baseline).index)
    return rows


@pytest.mark.parametrize("name", LEAN_SMOKE)
def test_every_smoke_run_is_read_by_a_card(name):
    """A run no card reads (a side or a beside entry) costs the smoke plan time and decides nothing (dion's runs at
    1 rank, its 1-process quality seeds and FL+FSDP's world-6 runs once did)."""
    runs = [c for c in load_plan(name, "smoke").runs if c.reproduction == name]  # dion's sweep is filed apart
    df = pd.DataFrame([planned_row(c) for c in runs])
    read = set().union(*(_read_by(card, df) for card in claims_for(name)))
    assert not [runs[i].command for i in df.index if i not in read]


@pytest.mark.parametrize("name", LEAN_SMOKE)
def test_the_smoke_cards_keep_every_side_their_beside_entries_and_their_seeds(name):
    df = _frame(load_plan(name, "smoke"))
    for card in (c for c in claims_for(name) if "--preset smoke" in (c.command or "")):
        for metric in _readings(card):
            for baseline in (False, True):
                if baseline and not metric.get("baseline"):
                    continue
                rows = side(df, metric, baseline=baseline)
                assert len(rows), f"{card.id}: nothing planned for {metric}"
                assert rows["seed"].nunique() >= (card.seeds_needed or 1), f"{card.id}: too few seeds"
