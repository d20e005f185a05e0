"""Dion's plan: the arms of the smoke preset, the sweep kept out of the verdicts, the picked rates, the
microbenchmark function, the paper preset's refusal, and the declared pairs and cards."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from reproductions.dion import REPRODUCTION
from reproductions.dion.micro import optimizer_step
from reproductions.dion.plan import LR_GRID, LR_PICKED, SCALAR_LR, SWEEP, TIME_SEEDS, TIME_WORLD, plan
from suite.claims import load_claims
from suite.config import RunConfig
from suite.plans import load_plan

RESULTS = Path(__file__).parents[1] / "results" / "dion-smoke"


@pytest.fixture(scope="module")
def smoke() -> list[RunConfig]:
    return load_plan("dion", "smoke").runs


def arm(cfg: RunConfig) -> tuple:
    return (cfg.method, cfg.nproc, cfg.optimizer, cfg.variant.get("rank_fraction"))


def test_smoke_covers_the_optimizers_rank_fractions_and_world_sizes(smoke):
    runs = [c for c in smoke if c.reproduction == "dion" and c.micro_batch == 4]
    arms = {arm(c) for c in runs}
    for world in (1, 2, 4):
        assert {("ddp", world, "adamw", None), ("ddp", world, "muon", None), ("ddp", world, "dion", 0.25)} <= arms
    assert {("ddp", 2, "dion", f) for f in (1.0, 0.5, 0.25, 0.0625)} <= arms
    assert {("fsdp", w, o, f) for w in (2, 4) for o, f in (("muon", None), ("dion", 0.25))} <= arms


def test_sweep_is_tagged_apart_and_seeds_run_at_the_picked_rates(smoke):
    sweep = [c for c in smoke if c.reproduction == SWEEP]
    assert {(c.optimizer, c.lr) for c in sweep} == {(o, lr) for o, grid in LR_GRID.items() for lr in grid}
    assert {c.seed for c in sweep} == {0}
    quality = [c for c in smoke if c.reproduction == "dion" and c.nproc == 1 and c.micro_batch == 8]
    by_arm = defaultdict(set)
    for c in quality:
        assert c.lr == LR_PICKED[c.optimizer]
        by_arm[(c.optimizer, c.variant.get("rank_fraction"))].add(c.seed)
    assert by_arm == {k: {1, 2, 3} for k in (("adamw", None), ("muon", None), ("dion", 0.25), ("dion", 1.0))}


def test_every_comparison_sees_equal_tokens_and_one_rule_for_the_adamw_part(smoke):
    """Quality arms once had equal FLOPs with optimizer FLOPs booked as model FLOPs (AdamW 40,960 tokens, Muon
    21,504), and AdamW trained its embeddings and head at 1e-3 while Muon and Dion trained theirs at 3e-3."""
    assert all(c.tokens and c.flops is None for c in smoke)
    quality = [c for c in smoke if c.micro_batch == 8]
    assert len({c.tokens for c in quality}) == 1
    assert SCALAR_LR == LR_PICKED["adamw"]
    assert all(c.variant.get("scalar_lr") == SCALAR_LR for c in quality if c.optimizer != "adamw")


def test_the_whole_step_time_card_has_interleaved_repeats(smoke):
    timed = [c for c in smoke if c.method == "ddp" and c.nproc == TIME_WORLD and c.micro_batch == 4]
    arms = {(c.optimizer, c.variant.get("rank_fraction")) for c in timed}
    assert [c.seed for c in timed] == [s for s in TIME_SEEDS for _ in arms]  # every arm once, then again


def _sweep_losses() -> dict[str, dict[float, float]]:
    """optimizer -> learning rate -> final validation loss of the committed seed-0 sweep."""
    out: dict[str, dict[float, float]] = defaultdict(dict)
    for path in RESULTS.glob("*.json"):
        rec = json.loads(path.read_text())
        if rec.get("reproduction") != SWEEP or rec["status"] != "complete":
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


@pytest.mark.skipif(not RESULTS.is_dir(), reason="no committed smoke results")
def test_the_equivalence_margin_is_the_committed_sweeps_resolution():
    """The margin's source: the median over the optimizers of the gap between each one's best and second-best rate."""
    gaps = [sorted(by_lr.values())[1] - min(by_lr.values()) for by_lr in _sweep_losses().values()]
    card = next(c for c in load_claims(REPRODUCTION.claims) if c.test == "equivalence")
    assert len(gaps) == 3 and card.margin.value == pytest.approx(float(np.median(gaps)), abs=5e-4)


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
    assert {o.name for o in REPRODUCTION.optimizers} == {"dion"}
    if REPRODUCTION.claims.is_file():
        assert load_claims(REPRODUCTION.claims)
