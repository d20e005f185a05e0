"""Issue 26 item 1: the quality protocol at small scale. Every arm of a quality card, in its reproduction's
`quality` preset, warms up and decays (cosine) over its whole budget under the same rule as its baseline, on the
stdlib corpus, with at least 3 seeds; each card has a twin at a budget a factor 2 or more away; and the preset's
estimated wall time on 2 quiet cores is under 90 minutes. Item 3: the `tune` preset gives every quality arm the same
trials, on seed 0 at the shorter budget under the same rule."""

from __future__ import annotations

import dataclasses
import importlib
import json

import pandas as pd
import pytest

from suite.judge.claims import claims_for
from suite.judge.metrics import side
from suite.plan.plans import load_plan
from suite.run.checks import check_config
from tests.test_card_commands import planned_row

# the quality cards issue 26 names, by reproduction (the time-to-target cards read the same arms)
QUALITY_CARDS = {
    "sdp": ("sdp-quality-flop-matched", "sdp-quality-equal-steps"),
    "fl-fsdp": ("fl-perplexity-fsdp", "fl-perplexity-hsdp"),
    "dion": ("dion-quality-vs-adamw", "dion-quality-vs-muon", "dion-rank-quarter-vs-full"),
}
PLANS = {"sdp": "reproductions.sdp.plan", "fl-fsdp": "reproductions.fl_fsdp.plan", "dion": "reproductions.dion.plan"}
CASES = [(name, cid) for name, ids in QUALITY_CARDS.items() for cid in (*ids, *(f"{i}-half" for i in ids))]
MINUTES = 90


def _sides(name: str, card_id: str) -> tuple[list, list]:
    """The quality preset's runs on the card's method side and on its baseline side."""
    card = {c.id: c for c in claims_for(name)}[card_id]
    runs = [c for c in load_plan(name, "quality").runs if c.reproduction == name]
    df = pd.DataFrame([planned_row(c) for c in runs])
    pick = [(False, card.protocol), (True, card.baseline_protocol or card.protocol)]
    out = []
    for baseline, protocol in pick:
        rows = side(df, card.metric, baseline=baseline)
        out.append([runs[i] for i in rows.index if rows.loc[i, "protocol"] == protocol])
    return out[0], out[1]


def _schedule(cfg) -> tuple:
    return cfg.warmup_steps, cfg.lr_decay, cfg.min_lr_ratio


@pytest.mark.parametrize("name, card_id", CASES, ids=[c for _, c in CASES])
def test_every_arm_warms_up_and_decays_over_its_budget_like_its_baseline(name, card_id):
    mine, theirs = _sides(name, card_id)
    assert mine and theirs, f"{card_id}: the quality preset plans no runs on one of its sides"
    for cfg in (*mine, *theirs):
        assert cfg.warmup_steps > 0 and cfg.lr_decay == "cosine" and cfg.min_lr_ratio < 1, _schedule(cfg)
        assert cfg.time_s is None and (cfg.tokens or cfg.flops), "cosine follows a tokens or FLOPs budget"
        assert cfg.data == "stdlib"
    assert {_schedule(c) for c in (*mine, *theirs)} == {_schedule(theirs[0])}, f"{card_id}: one schedule rule"
    for arm in (mine, theirs):
        assert len({c.seed for c in arm}) >= 3


@pytest.mark.parametrize("name, card_id", [(n, c) for n, ids in QUALITY_CARDS.items() for c in ids])
def test_each_card_is_judged_at_two_budgets_a_factor_2_apart(name, card_id):
    budgets = []
    for cid in (card_id, f"{card_id}-half"):
        _, baseline = _sides(name, cid)
        budgets.append({c.tokens or c.flops for c in baseline})
    (long,), (short,) = budgets
    assert long >= 2 * short


@pytest.mark.parametrize("name", sorted(PLANS))
def test_the_quality_preset_is_estimated_under_90_minutes(name):
    runs = load_plan(name, "quality").runs
    wall_s = importlib.import_module(PLANS[name]).quality_wall_s(runs)
    assert 0 < wall_s < MINUTES * 60, f"{name}: estimated {wall_s / 60:.0f} minutes"


# ---- the tune preset (issue 26 item 3): every quality arm at every rate of one grid, seed 0, the shorter budget ----

TUNED = ("sdp", "fl-fsdp")  # dion tunes at each quality budget, in two stages (tests/test_dion_plan.py)
NOT_THE_ARM = ("lr", "seed", "reproduction", "command")


def _arm(cfg) -> str:
    """A planned run's whole configuration but its rate, seed and filing: what a sweep trial shares with its arm."""
    fields = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in NOT_THE_ARM}
    return json.dumps(fields, sort_keys=True)


@pytest.mark.parametrize("name", TUNED)
def test_the_tune_preset_sweeps_every_quality_arm_equally_on_seed_0_at_the_shorter_budget(name):
    module = importlib.import_module(PLANS[name])
    shorter = module.QUALITY_SCHEDULE.settings(min(module.QUALITY_STEPS))
    quality = load_plan(name, "quality").runs
    # the shorter budget's seed-0 runs: warm-up over 10% of the baseline's steps names the budget (docs/plans.md)
    arms = {_arm(c) for c in quality if c.seed == 0 and c.warmup_steps == shorter["warmup_steps"]}
    assert len(arms) == len({_arm(c) for c in quality if c.seed == 0}) / 2
    runs = load_plan(name, "tune").runs
    rates: dict[str, list[float]] = {}
    for cfg in runs:
        rates.setdefault(_arm(cfg), []).append(cfg.lr)
        assert (cfg.seed, cfg.data, cfg.reproduction) == (0, "stdlib", module.LR_SWEEP)
        assert _schedule(cfg) == (shorter["warmup_steps"], "cosine", shorter["min_lr_ratio"])
    assert set(rates) == arms
    assert all(sorted(lrs) == sorted(module.LR_GRID) for lrs in rates.values()), "the same rates for every arm"


@pytest.mark.parametrize("name", TUNED)
def test_the_grid_holds_the_untuned_rate_inside(name):
    grid = importlib.import_module(PLANS[name]).LR_GRID
    (rate,) = {c.lr for c in load_plan(name, "quality").runs}
    assert len(set(grid)) == len(grid) >= 5 and min(grid) < rate < max(grid)


@pytest.mark.parametrize("name", (*TUNED, "dion"))
def test_every_tune_run_passes_the_checks_of_a_run_and_the_plan_notes_its_wall_time(name, tmp_path):
    plan = load_plan(name, "tune")
    for cfg in plan.runs:
        check_config(dataclasses.replace(cfg, results=str(tmp_path)))
    minutes = importlib.import_module(PLANS[name]).quality_wall_s(plan.runs) / 60
    assert f"estimated wall time {minutes:.0f} minutes on 2 quiet cores (not measured)" in plan.notes
    assert minutes < MINUTES
