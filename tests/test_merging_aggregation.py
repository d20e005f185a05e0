"""Merging as DiLoCo's aggregation against DiLoCo (reproductions/merging/aggregation_plan.py): the tune gives both
arms the same trials on one seed, the arms differ only in how the outer step aggregates, and the comparison waits
for the tune's committed winners."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from reproductions.merging import aggregation_plan as agg
from suite.judge.claims import claims_for
from suite.judge.sweeps import sweep_winners
from suite.plan.plans import load_plan
from suite.run.checks import check_config

TUNED = Path(__file__).parents[1] / "results" / "merging-aggregation-tune"


def _without(cfg, *fields: str) -> dict:
    """The run's configuration without its method, learning rate, seed and the merge's own parameters."""
    config = dataclasses.asdict(cfg)
    config["variant"] = {k: v for k, v in cfg.variant.items() if k not in fields}
    return {k: v for k, v in config.items() if k not in ("method", "lr", "seed", "command")}


def test_the_tune_gives_both_arms_every_rate_on_seed_0_filed_apart():
    runs = load_plan("merging", "aggregation-tune").runs
    for cfg in runs:
        check_config(cfg, machine=False)
    assert {c.reproduction for c in runs} == {agg.SWEEP} and {c.seed for c in runs} == {0}
    rates = {m: sorted(c.lr for c in runs if c.method == m) for m, _ in agg.ARMS}
    assert rates == {m: sorted(agg.LR_GRID) for m, _ in agg.ARMS}


def test_the_arms_differ_only_in_the_aggregation():
    diloco, merged = load_plan("merging", "aggregation-tune").runs[:2]
    assert (diloco.method, merged.method) == ("diloco", "diloco-merge") and merged.variant["merge"] == "ties"
    assert _without(diloco) == _without(merged, "merge")
    assert diloco.tokens == agg.STEPS * agg.WORLD * diloco.micro_batch * diloco.seq_len
    assert diloco.lr_decay == "cosine" and diloco.warmup_steps == round(0.1 * agg.STEPS)


def test_the_comparison_waits_for_the_tune_with_the_fix_in_one_line(monkeypatch):
    monkeypatch.setattr(agg, "LR_TUNED", {"diloco": None, "diloco-merge": None})
    with pytest.raises(ValueError, match="--preset aggregation-tune") as err:
        load_plan("merging", "aggregation")
    assert "\n" not in str(err.value)


def test_the_comparison_runs_seeds_1_to_3_of_each_arm_at_its_tuned_rate(monkeypatch):
    monkeypatch.setattr(agg, "LR_TUNED", {"diloco": 3e-3, "diloco-merge": 6e-3})
    runs = load_plan("merging", "aggregation").runs
    assert sorted((c.method, c.seed, c.lr) for c in runs) == sorted(
        (m, s, agg.LR_TUNED[m]) for m, _ in agg.ARMS for s in agg.SEEDS
    )
    assert {c.reproduction for c in runs} == {"merging"}


def test_the_tuned_rates_are_the_committed_tunes_winners_inside_their_grid():
    winners = sweep_winners(TUNED, agg.SWEEP)
    assert {w.label.split()[0]: w.lr for w in winners.values()} == agg.LR_TUNED
    assert {w.grid for w in winners.values()} == {agg.LR_GRID}


def test_the_card_reads_each_arm_at_its_tuned_rate():
    (card,) = [c for c in claims_for("merging") if c.id == "merging-diloco-ties"]
    m = card.metric
    assert {m["method"]: m["arm"]["lr"], m["baseline"]: m["baseline_arm"]["lr"]} == agg.LR_TUNED
    assert card.command.endswith("--preset aggregation")
