"""The learning-rate sweep's figure (suite/report/frames.lr_sweep, figures.lr_sweep): every swept arm's final loss at
every rate, its winner by suite.judge.sweeps' rule, and the rule's refusal where a winner sits at the grid's edge. Read
from the committed tune of fl-fsdp (4 arms x 5 rates, seed 0)."""

from __future__ import annotations

from pathlib import Path

from suite.records import load_records
from suite.report import figures, frames
from suite.report import labels as armlib

TUNE = Path(__file__).parents[1] / "results" / "fl-fsdp-tune"


def _records(low: float = 0.0) -> tuple[list[dict], list[str]]:
    records = [r for r in load_records(TUNE)[0] if r["settings"]["lr"] >= low]
    page = armlib.arms(records)
    return records, [page[armlib.key(r)].label for r in records]


def test_each_swept_arm_has_every_rate_and_its_winner():
    points = frames.lr_sweep(*_records())
    assert sorted(set(points["arm"])) == ["fl-fsdp", "fl-hsdp", "fsdp", "hsdp"]
    assert (points.groupby("arm")["lr"].apply(list) == [[7.5e-4, 1.5e-3, 3e-3, 6e-3, 1.2e-2]] * 4).all()
    assert set(points["winner"]) == {1.5e-3} and set(points["refusal"]) == {""}
    best = points.loc[points.groupby("arm")["val_loss"].idxmin()]
    assert set(best["lr"]) == {1.5e-3}
    assert figures.lr_sweep(points) is not None


def test_a_winner_at_the_grids_edge_is_drawn_without_rings_and_the_refusal_in_the_caption():
    points = frames.lr_sweep(*_records(low=1.5e-3))
    assert points["winner"].isna().all() and "extend the grid below 0.0015" in points["refusal"].iloc[0]
    assert "extend the grid below 0.0015" in figures.lr_sweep(points).caption


def test_arms_at_one_rate_each_draw_no_sweep():
    records, labels = _records()
    one_rate = [(r, name) for r, name in zip(records, labels) if r["settings"]["lr"] == 3e-3]
    assert frames.lr_sweep([r for r, _ in one_rate], [n for _, n in one_rate]).empty


def test_an_outer_rate_sweep_is_drawn_against_the_outer_learning_rate():
    """The committed tunes of low-comm sweep each arm's outer rate (its variant's outer_lr) at one inner rate, in two
    rounds (every arm five rates): each winner inside its grid."""
    folders = sorted((Path(__file__).parents[1] / "results").glob("low-comm-tune*"))
    records = [r for folder in folders for r in load_records(folder)[0]]
    page = armlib.arms(records)
    points = frames.lr_sweep(records, [page[armlib.key(r)].label for r in records])
    assert set(points["rate"]) == {"outer_lr"} and len(set(points["arm"])) == 5
    assert set(points.groupby("arm")["lr"].count()) == {5} and set(points["refusal"]) == {""}
    assert points["winner"].notna().all() and "outer learning rate" in figures.lr_sweep(points).svg


def test_a_sweep_in_one_panel_draws_no_panel_title():
    points = frames.lr_sweep(*_records())
    assert set(points["panel"]) == {""} and "(unnamed)" not in figures.lr_sweep(points).svg
