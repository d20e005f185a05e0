"""FL+FSDP's smoke plan (issue 25: every smoke plan under 10 minutes on 2 cores): the four compared arms once, at equal
tokens, long enough for the meters' aggregation period and whole timed periods after it, evaluated after an
aggregation; the paper-scale estimates the cards read; the estimated wall time in the plan's notes."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from reproductions.fl_fsdp.plan import PAPER_ARMS, PAPER_WORKERS, SMOKE_STEPS, SMOKE_WORKERS, F, smoke_wall_s
from suite.judge.claims import claims_for
from suite.judge.sweeps import sweep_winners
from suite.plan.plans import load_plan

fl_plan = importlib.import_module("reproductions.fl_fsdp.plan")  # the package's `plan` is the function
TUNED = Path(__file__).parents[1] / "results" / "fl-fsdp-tune"


def _steps(cfg) -> int:
    return cfg.tokens // (cfg.nproc * cfg.micro_batch * cfg.seq_len)


def test_smoke_runs_the_four_compared_arms_once_at_equal_tokens():
    runs = load_plan("fl-fsdp", "smoke").runs
    assert [(c.method, c.nproc, c.seed) for c in runs] == [
        (m, SMOKE_WORKERS, 0) for m in ("fsdp", "hsdp", "fl-fsdp", "fl-hsdp")
    ]
    assert len({c.tokens for c in runs}) == 1 and {_steps(c) for c in runs} == {SMOKE_STEPS}


def test_smoke_runs_meter_a_whole_period_time_whole_periods_and_evaluate_after_an_aggregation():
    for cfg in load_plan("fl-fsdp", "smoke").runs:
        steps = _steps(cfg)
        metered_end = cfg.comm_step + F  # memory and bytes over one aggregation period (suite/meters/schedule.py)
        first_whole = -(-metered_end // F) * F  # throughput over whole periods only (suite/meters/clock.py)
        assert (steps - first_whole) // F >= 2
        assert cfg.eval_every == steps and steps % F == 0  # one closing evaluation, right after an aggregation


def test_smoke_estimates_the_paper_arms_the_cards_decide_on():
    plan = load_plan("fl-fsdp", "smoke")
    assert [(e.cfg.method, e.cfg.nproc, e.cfg.model) for e in plan.estimates] == [
        (m, PAPER_WORKERS, "llama-8b") for m, _ in PAPER_ARMS
    ]


def test_the_smoke_plan_notes_its_estimated_wall_time_under_the_goal():
    plan = load_plan("fl-fsdp", "smoke")
    minutes = smoke_wall_s(plan.runs) / 60
    assert f"estimated wall time {minutes:.1f} minutes on 2 quiet cores (not measured)" in plan.notes
    assert minutes < 7.5


def test_the_tuned_preset_waits_for_the_tune_with_the_fix_in_one_line(monkeypatch):
    monkeypatch.setattr(fl_plan, "LR_TUNED", dict.fromkeys(fl_plan.LR_TUNED))
    with pytest.raises(ValueError, match="--preset tune") as err:
        load_plan("fl-fsdp", "tuned")
    assert "\n" not in str(err.value)


def test_the_tuned_preset_runs_the_tunes_arms_at_their_rates_on_the_other_seeds(monkeypatch):
    rates = {"fsdp": 1.5e-3, "hsdp": 3e-3, "fl-fsdp": 6e-3, "fl-hsdp": 1.2e-2}
    monkeypatch.setattr(fl_plan, "LR_TUNED", rates)
    tune, tuned = load_plan("fl-fsdp", "tune").runs, load_plan("fl-fsdp", "tuned").runs
    assert sorted((c.method, c.seed, c.lr) for c in tuned) == sorted(
        (m, s, rates[m]) for m in rates for s in fl_plan.TUNED_SEEDS
    )
    assert 0 not in fl_plan.TUNED_SEEDS and {c.reproduction for c in tuned} == {"fl-fsdp"}
    assert {_arm_but_rate(c) for c in tuned} == {_arm_but_rate(c) for c in tune}


def _arm_but_rate(cfg) -> tuple:
    return cfg.method, cfg.tokens, cfg.warmup_steps, cfg.lr_decay, cfg.data, cfg.micro_batch, str(cfg.variant)


def test_the_tuned_rates_are_the_committed_tunes_winners_inside_their_grid():
    winners = sweep_winners(TUNED, fl_plan.LR_SWEEP)
    assert {w.label.split()[0]: w.lr for w in winners.values()} == fl_plan.LR_TUNED
    assert {w.grid for w in winners.values()} == {fl_plan.LR_GRID}


def test_the_tuned_cards_read_each_side_at_its_tuned_rate_and_the_others_at_the_shared_rate():
    """The cards of the tuned protocol name each side's LR_TUNED rate, those of the paper's protocol the shared
    3e-3 (the shape preset's, the paper's own 3e-4), so no card of one protocol matches the other's runs."""
    for claim in claims_for("fl-fsdp"):
        m = claim.metric
        if "arm" not in m or m["name"] not in ("quality", "to-target"):
            continue
        sides = ((m["method"], m["arm"]), (m["baseline"], m["baseline_arm"]))
        shared = fl_plan.PAPER["lr"] if claim.id.endswith("-shape") else 3e-3
        expected = {method: fl_plan.LR_TUNED[method] if claim.id.endswith("-tuned") else shared for method, _ in sides}
        assert {method: arm["lr"] for method, arm in sides} == expected, claim.id


def test_the_shape_preset_runs_the_papers_configuration_on_emulated_workers():
    """128 groups, F = 8, 64 steps, lr 3e-4, 10% warm-up then cosine (docs/sources.md#fl-fsdp), each group's 4 ranks x
    micro-batch 2 as one emulated worker of micro-batch 8, against FSDP over the same global batch; equal tokens;
    three seeds; its estimate stated."""
    plan = load_plan("fl-fsdp", "shape")
    assert {(c.method, c.variant.get("G"), c.variant.get("F")) for c in plan.runs} == {
        ("fsdp", None, None),
        ("fl-fsdp", 1, 8),
    }
    for cfg in plan.runs:
        assert (cfg.nproc, cfg.micro_batch, cfg.emulate) == (128, 8, True)
        assert cfg.tokens == 64 * 128 * 8 * cfg.seq_len and cfg.lr == 3e-4 and cfg.weight_decay == 0.1
        assert (cfg.warmup_steps, cfg.lr_decay, cfg.eval_every % F) == (6, "cosine", 0)
    assert sorted(c.seed for c in plan.runs) == [0, 0, 1, 1, 2, 2]
    minutes = fl_plan.shape_wall_s(plan.runs) / 60
    assert f"estimated wall time {minutes:.0f} minutes on 2 quiet cores (not measured)" in plan.notes


def test_the_shape_preset_fits_90_minutes_on_2_cores():
    assert fl_plan.shape_wall_s(load_plan("fl-fsdp", "shape").runs) < 90 * 60


def test_the_trend_preset_runs_the_shapes_comparison_at_fewer_groups_under_90_minutes():
    """Issue 44: the shape's arms, settings and steps at 2, 8 and 32 groups (its 128 is the shape preset), each at the
    global batch its groups make; the shape cards read them along the world size."""
    shape, trend = load_plan("fl-fsdp", "shape").runs, load_plan("fl-fsdp", "trend").runs

    def same(cfg):
        return (cfg.method, str(cfg.variant), cfg.micro_batch, cfg.seq_len, cfg.lr, cfg.warmup_steps, cfg.seed)

    assert {c.nproc for c in trend} == set(fl_plan.TREND_GROUPS) == {2, 8, 32}
    assert {same(c) for c in trend} == {same(c) for c in shape}
    assert all(c.tokens == 64 * c.nproc * c.micro_batch * c.seq_len and c.emulate for c in trend)
    assert fl_plan.shape_wall_s(trend) < 90 * 60
    cards = [c for c in claims_for("fl-fsdp") if c.trend]
    assert {c.id for c in cards} == {"fl-perplexity-fsdp-shape", "fl-train-perplexity-fsdp-shape"}
    assert {c.trend.command for c in cards} == {"python -m suite reproduce fl-fsdp --preset trend"}
    assert {c.trend.paper for c in cards} == {fl_plan.SHAPE_GROUPS}
