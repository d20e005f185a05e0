"""The merge step's claim metric (reproductions/merging/metrics.py) reads the items of one preset: smoke's and
quality's items share their names, so a card reads its own preset's (the one its command names), never the newest
record of an item across presets, and never one side from one preset and the other side from another."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

from reproductions.merging.plan import base_path
from suite.errors import ClaimsError
from suite.judge.claims import claims_for
from suite.judge.metrics import METRICS
from suite.judge.verdicts import claim_frame, judge_all
from suite.plan.micro import Microbench, micro_record
from suite.records import read_record, write_record

# the card's own preset is quality (its command), and smoke's records are the newer: the newest is the wrong one
SCORES = {
    ("smoke", "greedy-soup"): (2.00, 2.01, 2.02),
    ("smoke", "best-single"): (2.10, 2.11, 2.12),
    ("quality", "greedy-soup"): (1.30, 1.31, 1.32),
    ("quality", "best-single"): (1.36, 1.37, 1.38),
}
STAMP = {"quality": "20261205-030818", "smoke": "20261205-033353"}  # the card's own preset ran first


def _scored(device: torch.device, merge: str, seed: int, base: str, avg_loss: float) -> Callable[[], dict]:
    """A merge-step item's row that scores `avg_loss` (the record's shape, without a model)."""
    return lambda: {"avg_loss": avg_loss, "worst_loss": avg_loss, "ood_loss": avg_loss}


def _record(folder, preset: str, item: str, scores: tuple[float, ...], stamp: str | None = None) -> dict:
    """One merge-step record of `item` in `preset` (its rows merge the preset's models: plan.py), as load_records
    gives it to the verdicts."""
    shapes = [{"merge": item, "seed": s, "base": base_path(preset), "avg_loss": v} for s, v in enumerate(scores)]
    bench = Microbench(item, f"{__name__}:_scored", shapes=shapes, warmup=0, repeat=1, once=True)
    rec = micro_record(bench, "merging", f"python -m suite micro merging {item} --preset {preset}", str(folder))
    rec["run_id"] = f"micro-{item}-reproductions.merging.step-merge_item-n1-s0-{stamp or STAMP[preset]}-{preset}"
    path = str(write_record(rec, folder / f"{rec['run_id']}.json"))
    return {**read_record(path), "_path": path}


def _card(claim_id: str):
    return next(c for c in claims_for("merging") if c.id == claim_id)


def _samples(claim, records: list[dict]):
    return METRICS[claim.metric["name"]](claim_frame(records), **{k: v for k, v in claim.metric.items() if k != "name"})


def test_a_card_reads_its_own_presets_items_not_the_newest_record_of_another_preset(tmp_path):
    claim = _card("merging-greedy-soup")
    assert "--preset quality" in claim.command  # the card's own preset
    records = [_record(tmp_path, p, item, v) for (p, item), v in SCORES.items()]
    own = {r["run_id"] for r in records if r["run_id"].endswith("-quality")}
    samples = _samples(claim, records)
    assert set(samples.rows["run_id"]) == own, (
        f"the card (command --preset quality) read {sorted(samples.rows['run_id'])}, not its own preset's {sorted(own)}"
    )
    assert np.allclose(samples.values, SCORES["quality", "greedy-soup"])
    assert np.allclose(samples.baseline, SCORES["quality", "best-single"])
    [(_, verdict)] = judge_all([claim], records)
    assert set(verdict.run_ids) == own and verdict.measured == pytest.approx(1.31), verdict.reason


def test_one_other_presets_items_alone_are_read_and_the_reason_says_whose(tmp_path):
    claim = _card("merging-greedy-soup")
    records = [_record(tmp_path, p, item, v) for (p, item), v in SCORES.items() if p == "smoke"]
    samples = _samples(claim, records)
    assert np.allclose(samples.values, SCORES["smoke", "greedy-soup"])
    assert "preset smoke" in samples.note and "quality" in samples.note


def test_a_card_never_compares_one_presets_item_with_another_presets(tmp_path):
    claim = _card("merging-greedy-soup")
    records = [
        _record(tmp_path, "smoke", "greedy-soup", SCORES["smoke", "greedy-soup"]),
        _record(tmp_path, "quality", "best-single", SCORES["quality", "best-single"]),
    ]
    samples = _samples(claim, records)
    assert len(samples.values) == 0 and len(samples.baseline) == 0


def test_two_records_of_one_item_in_the_cards_preset_are_an_error_naming_both(tmp_path):
    claim = _card("merging-greedy-soup")
    records = [_record(tmp_path, p, item, v) for (p, item), v in SCORES.items() if p == "quality"]
    again = _record(tmp_path, "quality", "greedy-soup", (1.9, 1.9, 1.9), stamp="20261206-000000")
    with pytest.raises(ClaimsError, match="'greedy-soup' of preset quality has 2 records") as err:
        _samples(claim, [*records, again])
    assert again["run_id"] in str(err.value) and records[0]["run_id"] in str(err.value)


def test_several_presets_and_none_the_cards_own_are_an_error_naming_them(tmp_path):
    claim = _card("merging-swa")  # its own preset is swa-seeds
    records = [
        _record(tmp_path, p, item, (2.0, 2.0, 2.0), stamp=f"2026120{i}-000000")
        for i, p in enumerate(("smoke", "quality"), start=1)
        for item in ("swa", "final-iterate")
    ]
    with pytest.raises(ClaimsError, match=r"2 presets \(quality, smoke\) and none of the card's own \(swa-seeds\)"):
        _samples(claim, records)
