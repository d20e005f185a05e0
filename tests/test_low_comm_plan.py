"""The low-communication row's plan (reproductions/low_comm/plan.py) and cards: the derived values of the bytes cards,
equal tokens along the workers axis, the tune's equal trials, the trend's refusal before the tune and its rates from
the committed tune."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from reproductions.low_comm.plan import (
    BYTES_SYNC,
    GLOBAL_ROWS,
    OUTER_GRIDS,
    OUTER_TUNED,
    QUALITY_ARMS,
    QUALITY_STEPS,
    QUALITY_SYNC,
    SEEDS,
    SYNC,
    TREND_ARMS,
    TUNE_PRESETS,
    TUNE_SWEEP,
    TUNE_WORKERS,
    WORKERS,
    plan,
    quality_run,
)
from reproductions.low_comm.streaming import exchange_bytes, fragment_params
from suite.judge.claims import claims_for
from suite.judge.sweeps import sweep_winners
from suite.models import build_model

ROOT = Path(__file__).resolve().parent.parent
TUNE = ROOT / "results" / "low-comm-tune"


def _sizes(model_name: str) -> tuple[int, list[int]]:
    """The model's parameters and the elements of each of Streaming DiLoCo's 2 strided fragments."""
    model = build_model(model_name)
    parts = fragment_params(model, 2, "strided")
    return sum(t.numel() for t in model.parameters()), [sum(t.numel() for t in part) for part in parts]


def card(claim_id: str):
    return next(c for c in claims_for("low-comm") if c.id == claim_id)


def test_the_bytes_cards_hold_the_values_derived_for_llama_tiny_at_the_smoke_period():
    n, sizes = _sizes("llama-tiny")
    streaming = sum(exchange_bytes(m, 2, "e3m0") for m in sizes) / SYNC  # both replicas' messages, once a period
    assert card("streaming-diloco-bytes-vs-ddp").paper_value == streaming / (4 * n)
    assert card("streaming-diloco-bytes-vs-diloco").paper_value == streaming / (4 * n / SYNC)
    assert card("isoloco-bytes-vs-diloco").paper_value == 1.0


def test_diloco_at_the_bytes_h_sends_about_what_streaming_diloco_sends_at_the_trends_h():
    """The equal-bytes arm: the ledger's payload per step of DiLoCo at H = BYTES_SYNC against Streaming DiLoCo's (E3M0,
    2 fragments, every worker's message gathered) at H = QUALITY_SYNC, TUNE_WORKERS workers, llama-tiny-w64."""
    n, sizes = _sizes("llama-tiny-w64")
    streaming = sum(exchange_bytes(m, TUNE_WORKERS, "e3m0") for m in sizes) / QUALITY_SYNC
    assert 4 * n / BYTES_SYNC / streaming == pytest.approx(0.94, abs=0.01)


def test_every_point_of_the_workers_axis_trains_the_same_tokens_in_the_same_steps():
    points = [quality_run("diloco", k, 0.7, 1) for k in WORKERS]
    assert {(c.tokens, c.micro_batch * c.nproc) for c in points} == {(QUALITY_STEPS * GLOBAL_ROWS * 128, GLOBAL_ROWS)}
    assert all(c.emulate and c.variant == {"F": QUALITY_SYNC, "outer_lr": 0.7} for c in points)
    with pytest.raises(ValueError, match="3 workers do not split 16 rows a step evenly"):
        quality_run("diloco", 3, 0.7, 1)


@pytest.mark.parametrize("preset", sorted(p for p, grids in TUNE_PRESETS.items() if grids))
def test_each_tune_runs_its_arms_rates_once_at_one_point_on_seed_0(preset):
    runs, grids = plan(preset).runs, TUNE_PRESETS[preset]
    assert {(c.nproc, c.seed, c.reproduction) for c in runs} == {(TUNE_WORKERS, 0, TUNE_SWEEP)}
    rates = Counter((_arm(c), c.variant["outer_lr"]) for c in runs)
    assert set(rates) == {(a, r) for a, rs in grids.items() for r in rs} and set(rates.values()) == {1}


def test_every_arm_gets_the_same_number_of_trials_over_the_tunes():
    assert len({len(OUTER_GRIDS[arm]) for arm in QUALITY_ARMS}) == 1
    for arm in QUALITY_ARMS:
        assert set(OUTER_GRIDS[arm]) == {r for grids in TUNE_PRESETS.values() for r in grids.get(arm, ())}


def test_the_trend_refuses_to_run_while_a_rate_is_unset_naming_its_tune(monkeypatch):
    monkeypatch.setitem(OUTER_TUNED, "isoloco-sgd", None)
    with pytest.raises(ValueError, match=r"no tuned outer rate for isoloco-sgd: run .*--preset tune-sgd`"):
        plan("trend")


def test_the_trend_runs_every_arm_at_its_tuned_rate_inside_the_committed_tunes_grid():
    folders = [ROOT / "results" / f"low-comm-{preset}" for preset in TUNE_PRESETS]
    winners = {w.label: (w.lr, w.rate, w.grid) for w in sweep_winners(folders, TUNE_SWEEP).values()}
    assert sorted(winners.values()) == sorted((OUTER_TUNED[a], "outer_lr", OUTER_GRIDS[a]) for a in QUALITY_ARMS)
    runs = plan("trend").runs
    expected = {(arm, k, seed) for arm in TREND_ARMS for k in WORKERS for seed in SEEDS}
    expected |= {("diloco-h32", TUNE_WORKERS, seed) for seed in SEEDS}  # the equal-bytes arm at one point
    assert {(_arm(c), c.nproc, c.seed) for c in runs} == expected and len(runs) == len(expected)
    assert all(c.variant["outer_lr"] == OUTER_TUNED[_arm(c)] for c in runs)
    assert len({(c.tokens, c.micro_batch * c.nproc) for c in runs}) == 1


def _arm(cfg) -> str:
    """The name in QUALITY_ARMS of a run's arm: the most specific whose method and variant it has."""
    named = [a for a, (m, v) in QUALITY_ARMS.items() if m == cfg.method and v.items() <= cfg.variant.items()]
    return max(named, key=lambda a: len(QUALITY_ARMS[a][1]))


def test_an_unknown_preset_is_refused_naming_the_presets():
    presets = "smoke, tune, tune-sgd, tune-bytes, tune-extend, trend"
    with pytest.raises(ValueError, match=f"the low-comm plan has the presets {presets}, not 'paper'"):
        plan("paper")
