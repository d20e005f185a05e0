"""Dion's plan: the arms of the smoke preset, the sweep kept out of the verdicts, the picked rates, the
microbenchmark function, the paper preset's refusal, and the declared pairs and cards."""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from reproductions.dion import REPRODUCTION
from reproductions.dion.micro import optimizer_step
from reproductions.dion.plan import (
    ADAMW_TUNED,
    BYTES_STEPS,
    HORIZON_MATRIX_GRID,
    LONG_STEPS,
    LR_GRID,
    LR_PICKED,
    LR_TUNED,
    MATRIX_TUNED,
    SCALAR_LR,
    SWEEP,
    TIME_SEEDS,
    TIME_STEPS,
    TIME_WORLD,
    TREND_MODELS,
    TUNE_GRID,
    TUNE_STEPS,
    TUNE_SWEEP,
    plan,
    quality_wall_s,
    smoke_wall_s,
)
from suite.config import RunConfig
from suite.judge.claims import load_claims
from suite.judge.sweeps import sweep_winners
from suite.models import model_config
from suite.plan.plans import load_plan

RESULTS = Path(__file__).parents[1] / "results" / "dion-smoke"
TUNED = Path(__file__).parents[1] / "results" / "dion-tune"
TUNED_ADAMW = Path(__file__).parents[1] / "results" / "dion-tune-adamw"
TUNED_MATRIX = Path(__file__).parents[1] / "results" / "dion-tune-matrix"


@pytest.fixture(scope="module")
def smoke() -> list[RunConfig]:
    return load_plan("dion", "smoke").runs


def arm(cfg: RunConfig) -> tuple:
    return (cfg.method, cfg.nproc, cfg.optimizer, cfg.variant.get("rank_fraction"))


def test_smoke_plans_the_arms_its_cards_read_and_no_others(smoke):
    """DDP at 2 ranks (AdamW against Dion at rank 1/4, with 1/16, 1/2 and full rank beside), FSDP2 at 2 ranks (Dion
    1/4 against Muon, AdamW beside) and at 4 (Dion 1/4 against Muon), DDP at 4 ranks for the whole-step time (Dion
    1/4 against Muon, AdamW beside); no run at 1 rank and no 1-process quality seeds (the quality cards read the
    quality preset), which no smoke card read (tests/test_card_commands.py checks every run is read)."""
    runs = [c for c in smoke if c.reproduction == "dion"]
    bytes_arms = {("ddp", 2, "adamw", None), *{("ddp", 2, "dion", f) for f in (1.0, 0.5, 0.25, 0.0625)}}
    bytes_arms |= {("fsdp", 2, o, f) for o, f in (("adamw", None), ("muon", None), ("dion", 0.25))}
    bytes_arms |= {("fsdp", 4, o, f) for o, f in (("muon", None), ("dion", 0.25))}
    time_arms = {("ddp", TIME_WORLD, o, f) for o, f in (("adamw", None), ("muon", None), ("dion", 0.25))}
    assert {arm(c) for c in runs} == bytes_arms | time_arms
    assert all(c.micro_batch == 4 and c.eval_batches == 1 for c in runs)
    steps = {arm(c): c.tokens // (c.nproc * c.micro_batch * c.seq_len) for c in runs}
    assert {steps[a] for a in bytes_arms} == {BYTES_STEPS} and {steps[a] for a in time_arms} == {TIME_STEPS}


def test_bytes_runs_reach_the_counted_step_and_time_runs_have_timed_steps(smoke):
    """The ledger counts one whole period from comm_step (period 1 for DDP and FSDP2), after DDP's bucket rebuild;
    the whole-step card's median is over the steps after the meters' (clock_warmup, mem_step, comm_step)."""
    for c in smoke:
        if c.reproduction == "dion":
            steps = c.tokens // (c.nproc * c.micro_batch * c.seq_len)
            assert steps > max(c.comm_step, c.mem_step, c.flop_step)
            if c.nproc == TIME_WORLD and c.method == "ddp":
                assert steps - (max(c.comm_step, c.mem_step, c.clock_warmup - 1) + 1) >= 5


def test_sweep_is_tagged_apart_and_unchanged_and_the_quality_preset_runs_the_picked_rates(smoke):
    sweep = [c for c in smoke if c.reproduction == SWEEP]
    assert {(c.optimizer, c.lr) for c in sweep} == {(o, lr) for o, grid in LR_GRID.items() for lr in grid}
    assert {c.seed for c in sweep} == {0}
    # the configuration whose committed records picked LR_PICKED (results/dion-smoke): 40 steps of 8 x 128 tokens,
    # an evaluation of 4 batches every 10 steps, constant rate after 10 warm-up steps
    assert {(c.tokens, c.micro_batch, c.seq_len, c.eval_every, c.eval_batches, c.lr_decay) for c in sweep} == {
        (40 * 8 * 128, 8, 128, 10, 4, "constant")
    }
    by_arm = defaultdict(set)
    for c in load_plan("dion", "quality").runs:
        steps = c.tokens // (8 * 128)
        assert c.lr == {"adamw": ADAMW_TUNED[steps], **MATRIX_TUNED[steps]}[c.optimizer]
        by_arm[(c.optimizer, c.variant.get("rank_fraction"))].add(c.seed)
    assert by_arm == {k: {1, 2, 3} for k in (("adamw", None), ("muon", None), ("dion", 0.25), ("dion", 1.0))}


def test_the_tune_gives_every_optimizer_as_many_rates_on_seed_0_under_the_quality_schedule():
    """AlgoPerf's rule: the same trials for every arm, one seed, filed apart; the quality preset's corpus and schedule
    rule at TUNE_STEPS, the AdamW part of Muon and Dion at the fixed SCALAR_LR."""
    runs = load_plan("dion", "tune").runs
    assert {c.reproduction for c in runs} == {TUNE_SWEEP} and {c.seed for c in runs} == {0}
    by_optimizer = defaultdict(list)
    for c in runs:
        by_optimizer[(c.optimizer, c.variant.get("rank_fraction"))].append(c.lr)
    assert by_optimizer == {
        ("adamw", None): list(TUNE_GRID["adamw"]),
        ("muon", None): list(TUNE_GRID["muon"]),
        ("dion", 0.25): list(TUNE_GRID["dion"]),
    }
    assert len({len(g) for g in TUNE_GRID.values()}) == 1
    assert {(c.tokens, c.data, c.warmup_steps, c.lr_decay) for c in runs} == {
        (TUNE_STEPS * 8 * 128, "stdlib", TUNE_STEPS // 10, "cosine")
    }
    assert {c.variant.get("scalar_lr") for c in runs if c.optimizer != "adamw"} == {SCALAR_LR}
    assert [c.lr for c in runs[:3]] == [TUNE_GRID[o][0] for o in ("adamw", "muon", "dion")]  # rate by rate


def test_the_tune_at_the_cards_horizon_trains_the_adamw_part_at_stage_ones_winner():
    """Stage one tunes the AdamW arm at each quality budget; stage two tunes Muon and Dion 1/4 there, on the same grid
    length, their AdamW part at stage one's winner for that budget."""
    stage_one, stage_two = load_plan("dion", "tune-adamw").runs, load_plan("dion", "tune-matrix").runs
    for runs in (stage_one, stage_two):
        assert {c.reproduction for c in runs} == {TUNE_SWEEP} and {c.seed for c in runs} == {0}
        assert {c.tokens // (8 * 128) for c in runs} == set(LONG_STEPS)
    assert sorted((c.tokens // 1024, c.lr) for c in stage_one) == sorted(
        (steps, lr) for steps in LONG_STEPS for lr in TUNE_GRID["adamw"]
    )
    arms = {(c.tokens // 1024, c.optimizer, c.variant.get("rank_fraction"), c.lr) for c in stage_two}
    assert arms == {
        (steps, o, f, lr)
        for steps in LONG_STEPS
        for o, f in (("muon", None), ("dion", 0.25))
        for lr in HORIZON_MATRIX_GRID[steps]
    }
    assert all(c.variant["scalar_lr"] == ADAMW_TUNED[c.tokens // 1024] for c in stage_two)
    assert {c.warmup_steps for c in stage_two} == {steps // 10 for steps in LONG_STEPS}


def _horizon_losses(folder: Path) -> dict[tuple[int, str], dict[float, float]]:
    """(steps, optimizer) -> learning rate -> final validation loss of a committed tune at the cards' horizon."""
    out: dict[tuple[int, str], dict[float, float]] = defaultdict(dict)
    for path in folder.glob("*.json"):
        rec = json.loads(path.read_text())
        loss = next(p["val_loss"] for p in reversed(rec["curve"]) if p["val_loss"] is not None)
        out[(rec["totals"]["steps"], rec["optimizer"]["name"])][rec["settings"]["lr"]] = loss
    return out


def test_the_matrix_rates_at_each_budget_are_stage_twos_winners_inside_their_grids():
    """suite.judge.sweeps' rule picks MATRIX_TUNED from results/dion-tune-matrix, one arm per optimizer and budget,
    each on its budget's grid (HORIZON_MATRIX_GRID)."""
    import re

    winners = sweep_winners(TUNED_MATRIX, TUNE_SWEEP).values()
    found = defaultdict(dict)
    for w in winners:
        steps = int(re.search(r"budget=(\d+)", w.label).group(1)) // (8 * 128)
        found[steps][w.label.split()[1]] = w.lr
        assert w.grid == HORIZON_MATRIX_GRID[steps]
    assert found == MATRIX_TUNED


def test_the_adamw_rate_at_each_budget_is_stage_ones_winner_inside_its_grid():
    """suite.judge.sweeps' rule picks ADAMW_TUNED from results/dion-tune-adamw, one arm per budget (budget=tokens)."""
    import re

    winners = sweep_winners(TUNED_ADAMW, TUNE_SWEEP).values()
    steps = {w: int(re.search(r"budget=(\d+)", w.label).group(1)) // (8 * 128) for w in winners}
    assert {steps[w]: w.lr for w in winners} == ADAMW_TUNED
    assert {w.grid for w in winners} == {TUNE_GRID["adamw"]}


def test_every_comparison_sees_equal_tokens_and_one_rule_for_the_adamw_part(smoke):
    """Quality arms once had equal FLOPs with optimizer FLOPs booked as model FLOPs (AdamW 40,960 tokens, Muon
    21,504), and AdamW trained its embeddings and head at 1e-3 while Muon and Dion trained theirs at 3e-3."""
    assert all(c.tokens and c.flops is None for c in smoke)
    budgets = defaultdict(set)  # the arms a card compares share a method, world size and micro-batch
    for c in smoke:
        budgets[(c.reproduction, c.method, c.nproc, c.micro_batch)].add(c.tokens)
    assert all(len(tokens) == 1 for tokens in budgets.values()), budgets
    quality = load_plan("dion", "quality").runs
    assert all(len({c.tokens for c in quality if c.warmup_steps == w}) == 1 for w in {c.warmup_steps for c in quality})
    assert SCALAR_LR == LR_PICKED["adamw"]
    assert all(c.variant.get("scalar_lr") == SCALAR_LR for c in [*smoke, *quality] if c.optimizer != "adamw")


def _adamw_part_rate(cfg: RunConfig) -> float:
    """The rate of the parameters AdamW trains: all of an AdamW arm's, the embeddings, head and norms of a Muon or
    Dion arm (scalar_lr; unset, the run's lr)."""
    return cfg.lr if cfg.optimizer == "adamw" else cfg.variant.get("scalar_lr") or cfg.lr


def test_one_rate_rule_for_the_adamw_part_of_every_arm_a_loss_card_compares(monkeypatch):
    """One learning-rate rule for the AdamW part of every arm: in the runs each card that reads losses compares (a
    quality card, tokens or wall time to a target), in the preset its command names, the parameters AdamW trains
    train at one rate on both sides. The quality preset once trained the AdamW arm at the 200-step tune's 2e-3 and
    the AdamW part of Muon and Dion at 1e-3."""
    import re

    import pandas as pd
    import torch

    from suite.judge.claims import claims_for
    from suite.judge.metrics import side
    from tests.test_card_commands import planned_row

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)  # the target preset plans on 8 GPUs
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    rates = {}
    for card in claims_for("dion"):
        if not (card.kind == "quality" or card.metric["name"] == "to-target" or card.protocol == "target"):
            continue  # time and bytes do not depend on the rate
        preset = re.search(r"--preset (\S+)", card.command).group(1)
        runs = [c for c in load_plan("dion", preset).runs if c.reproduction == "dion"]
        df = pd.DataFrame([planned_row(c) for c in runs])
        read = [runs[i] for baseline in (False, True) for i in side(df, card.metric, baseline=baseline).index]
        assert read, f"{card.id}: no runs in --preset {preset}"
        rates[card.id] = sorted({(c.optimizer, _adamw_part_rate(c)) for c in read})
    differ = {card: r for card, r in rates.items() if len({rate for _, rate in r}) > 1}
    assert not differ, f"the AdamW part trains at more than one rate (optimizer, rate): {differ}"


def test_the_trend_preset_runs_the_half_cards_matrix_arms_on_narrower_models_as_the_quality_preset_does():
    """Issue 44: Muon and Dion at both ranks, as the quality preset runs them at 500 steps (seeds, schedule, rates),
    on models narrower than llama-tiny; the two half cards that compare them read the width; under 90 minutes."""
    trend = plan("trend")
    half = [c for c in plan("quality").runs if c.tokens == trend.runs[0].tokens and c.optimizer != "adamw"]

    def same(cfg: RunConfig) -> str:
        return repr(dataclasses.replace(cfg, model=""))

    assert {c.model for c in trend.runs} == set(TREND_MODELS)
    assert sorted(model_config(m)["dim"] for m in TREND_MODELS) == [64, 128]  # llama-tiny's 256 is the quality's
    for model in TREND_MODELS:
        assert sorted(same(c) for c in trend.runs if c.model == model) == sorted(same(c) for c in half)
    cards = {c.id: c.trend for c in load_claims(REPRODUCTION.claims) if c.trend}
    assert set(cards) == {"dion-quality-vs-muon-half", "dion-rank-quarter-vs-full-half"}
    assert all(t.axis == "width" and t.command.endswith("--preset trend") for t in cards.values())
    assert quality_wall_s(trend.runs) < 90 * 60


def test_the_whole_step_time_card_has_interleaved_repeats(smoke):
    timed = [c for c in smoke if c.method == "ddp" and c.nproc == TIME_WORLD and c.micro_batch == 4]
    arms = {(c.optimizer, c.variant.get("rank_fraction")) for c in timed}
    assert [c.seed for c in timed] == [s for s in TIME_SEEDS for _ in arms]  # every arm once, then again


def test_the_smoke_plan_notes_its_estimated_wall_time_under_the_goal():
    """Issue 25: every smoke plan under 10 minutes on 2 cores; estimated (smoke_wall_s), sized for 7.5."""
    plan = load_plan("dion", "smoke")
    minutes = smoke_wall_s(plan.runs) / 60
    assert f"estimated wall time {minutes:.1f} minutes on 2 quiet cores (not measured)" in plan.notes
    assert minutes < 7.5


def _sweep_losses(folder: Path = RESULTS, sweep: str = SWEEP) -> dict[str, dict[float, float]]:
    """optimizer -> learning rate -> final validation loss of a committed seed-0 sweep."""
    out: dict[str, dict[float, float]] = defaultdict(dict)
    for path in folder.glob("*.json"):
        rec = json.loads(path.read_text())
        if rec.get("reproduction") != sweep or rec["status"] != "complete":
            continue
        loss = next(p["val_loss"] for p in reversed(rec["curve"]) if p["val_loss"] is not None)
        out[rec["optimizer"]["name"]][rec["settings"]["lr"]] = loss
    return out


@pytest.mark.skipif(not RESULTS.is_dir(), reason="no committed smoke results")
def test_picked_rates_are_the_committed_sweeps_winners_inside_their_grids():
    losses = _sweep_losses()
    assert {name: set(by_lr) for name, by_lr in losses.items()} == {k: set(v) for k, v in LR_GRID.items()}
    for name, by_lr in losses.items():
        winner = min(by_lr, key=by_lr.get)
        assert winner == LR_PICKED[name]
        assert min(LR_GRID[name]) < winner < max(LR_GRID[name]), f"{name}'s winner {winner} is at its grid's edge"


@pytest.mark.skipif(not TUNED.is_dir(), reason="no committed tune results")
def test_tuned_rates_are_the_committed_tunes_winners_inside_their_grids():
    """suite.judge.sweeps' rule (equal trials, one seed, no winner at an edge) picks LR_TUNED from results/dion-tune."""
    winners = sweep_winners(TUNED, TUNE_SWEEP)
    assert {w.label.split()[1]: w.lr for w in winners.values()} == LR_TUNED
    assert {w.label.split()[1]: w.grid for w in winners.values()} == TUNE_GRID


def test_the_equivalence_margins_are_the_tunes_resolution_at_each_cards_budget():
    """Each equivalence card's margin: the median over AdamW, Muon and Dion 1/4 of the gap between each one's best
    and second-best rate in the tune at the card's budget (stages one and two)."""
    gaps = defaultdict(list)
    for folder in (TUNED_ADAMW, TUNED_MATRIX):
        for (steps, _), by_lr in _horizon_losses(folder).items():
            gaps[steps].append(sorted(by_lr.values())[1] - min(by_lr.values()))
    cards = [c for c in load_claims(REPRODUCTION.claims) if c.test == "equivalence"]
    assert cards and {len(g) for g in gaps.values()} == {3}
    for card in cards:
        steps = card.metric["arm"]["warmup_steps"] * 10  # warm-up over 10% of the budget names it
        assert card.margin.value == pytest.approx(float(np.median(gaps[steps])), abs=5e-4), card.id


def test_micro_step_times_one_step_and_reports_rank_and_state():
    import torch

    step = optimizer_step(torch.device("cpu"), "dion", 64, 32, 0.25)
    out = step()
    assert out["rank"] == 8
    # momentum (64 x 32) and Q (32 x 8), float32
    assert out["state_bytes"] == 4 * (64 * 32 + 32 * 8)
    with pytest.raises(ValueError, match="optimizer must be one of"):
        optimizer_step(torch.device("cpu"), "sgd", 8, 8)


def test_paper_preset_refuses_with_the_fix():
    with pytest.raises(ValueError, match="--preset smoke, gpu or target"):
        plan("paper")


def test_declares_its_optimizer_pairs_and_readable_cards():
    assert [p.name for p in REPRODUCTION.pairs] == ["dion/adamw", "muon/adamw"]
    assert {o.name for o in REPRODUCTION.optimizers} == {"dion", "normuon", "dion2", "dion3", "soap"}
    if REPRODUCTION.claims.is_file():
        assert load_claims(REPRODUCTION.claims)


@pytest.mark.parametrize("optimizer", ["dion", "normuon", "dion2", "dion3", "soap"])
@pytest.mark.parametrize("method", ["tp", "fsdp-tp"])
def test_dion_under_tensor_parallelism_is_refused_before_launch(tmp_path, capsys, method, optimizer):
    """Its workers once failed with "sharded matrices must be split along rows" after start-up."""
    from suite.cli import main

    argv = ["run", method, "--nproc", "4", "--optimizer", optimizer, "--tokens", "1000", "--results", str(tmp_path)]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and "column-split" in err and len(err.strip().splitlines()) == 1
