"""Dion's plan: the arms of the smoke preset, the sweep kept out of the verdicts, the picked rates, the
microbenchmark function, the paper preset's refusal, and the declared pairs and cards."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from reproductions.dion import REPRODUCTION
from reproductions.dion.micro import optimizer_step
from reproductions.dion.plan import LR_GRID, LR_PICKED, SWEEP, plan
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
    runs = smoke
    sweep = [c for c in runs if c.reproduction == SWEEP]
    assert {(c.optimizer, c.lr) for c in sweep} == {(o, lr) for o, grid in LR_GRID.items() for lr in grid}
    assert {c.seed for c in sweep} == {0} and all(c.flops and c.tokens is None for c in sweep)
    assert all(c.tokens and not c.flops for c in runs if c.micro_batch == 4)  # cost runs: another protocol
    quality = [c for c in runs if c.reproduction == "dion" and c.nproc == 1 and c.micro_batch == 8]
    by_arm = defaultdict(set)
    for c in quality:
        assert c.lr == LR_PICKED[c.optimizer] and c.flops == sweep[0].flops and c.tokens is None
        by_arm[(c.optimizer, c.variant.get("rank_fraction"))].add(c.seed)
    assert by_arm == {k: {1, 2, 3} for k in (("adamw", None), ("muon", None), ("dion", 0.25), ("dion", 1.0))}
    assert all(c.variant.get("scalar_lr") == 3e-3 for c in runs if c.optimizer != "adamw")


@pytest.mark.skipif(not RESULTS.is_dir(), reason="no committed smoke results")
def test_picked_rates_are_the_committed_sweeps_winners():
    best: dict[str, tuple[float, float]] = {}
    for path in RESULTS.glob("*.json"):
        rec = json.loads(path.read_text())
        if rec.get("reproduction") != SWEEP or rec["status"] != "complete":
            continue
        name = rec["optimizer"]["name"]
        loss = next(p["val_loss"] for p in reversed(rec["curve"]) if p["val_loss"] is not None)
        if name not in best or loss < best[name][0]:
            best[name] = (loss, rec["settings"]["lr"])
    assert {k: lr for k, (_, lr) in best.items()} == LR_PICKED


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
    with pytest.raises(ValueError, match="--preset smoke or --preset gpu"):
        plan("paper")


def test_declares_its_optimizer_pairs_and_readable_cards():
    assert [p.name for p in REPRODUCTION.pairs] == ["dion/adamw", "muon/adamw"]
    assert {o.name for o in REPRODUCTION.optimizers} == {"dion"}
    if REPRODUCTION.claims.is_file():
        assert load_claims(REPRODUCTION.claims)
