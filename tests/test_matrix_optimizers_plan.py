"""The matrix-optimizer row's plan (reproductions/matrix_optimizers): the derived value of its bytes card, the arms
its smoke preset runs, and the refusal of a preset it does not have."""

from __future__ import annotations

import statistics
from collections import Counter
from pathlib import Path

import pytest

from reproductions.matrix_optimizers.bytes import layerwise_gather_bytes, layerwise_ratio, matrix_shapes
from reproductions.matrix_optimizers.plan import (
    ADAMW_GRID,
    ADAMW_TUNED,
    ARMS,
    AT_EDGE,
    BYTES_WORLD,
    EXTENDED,
    FIRST_GRIDS,
    MATRIX_TUNED,
    MODEL,
    PRESETS,
    QUALITY_ARMS,
    QUALITY_SEEDS,
    QUALITY_STEPS,
    TIME_WORLD,
    TREND_ADAMW_TUNED,
    TREND_EXTENSION,
    TREND_GRIDS,
    TREND_MODEL,
    TREND_TUNED,
    TUNE_GRIDS,
    TUNE_SWEEP,
    TUNED,
    plan,
)
from suite.judge.claims import claims_for
from suite.judge.sweeps import sweep_winners
from suite.models import build_model
from suite.records import load_records

ROOT = Path(__file__).resolve().parent.parent


def _final_losses(*tunes: str) -> dict[str, dict[float, float]]:
    """Each optimizer's final validation loss by learning rate in results/matrix-optimizers-tune-TUNE folders."""
    losses: dict[str, dict[float, float]] = {}
    for tune in tunes:
        for rec in load_records(ROOT / "results" / f"matrix-optimizers-tune-{tune}")[0]:
            final = [p["val_loss"] for p in rec["curve"] if p["val_loss"] is not None][-1]
            losses.setdefault(rec["optimizer"]["name"], {})[rec["settings"]["lr"]] = final
    return losses


def card(claim_id: str):
    return next(c for c in claims_for("matrix-optimizers") if c.id == claim_id)


def test_the_layerwise_bytes_card_holds_the_value_derived_for_its_model_and_world():
    claim = card("matrix-layerwise-muon-ddp-bytes")
    assert claim.metric["model"] == MODEL and claim.metric["arm"] == {"world_size": BYTES_WORLD}
    assert claim.paper_value == pytest.approx(layerwise_ratio(MODEL, BYTES_WORLD), abs=claim.band.value / 2)


def test_layerwise_gathers_pad_each_shape_to_the_world_and_skip_a_shape_held_once():
    shapes = Counter({(4, 3): 5, (2, 2): 1})
    assert layerwise_gather_bytes(shapes, 2) == 2 * 3 * 4 * 3 * 2  # 5 matrices padded to 6; (2, 2) not gathered
    assert layerwise_gather_bytes(shapes, 5) == 5 * 1 * 4 * 3 * 2
    assert matrix_shapes(build_model(MODEL)) == Counter({(64, 64): 16, (160, 64): 8, (64, 160): 4})


def test_the_bytes_runs_and_the_timed_runs_are_told_apart_by_their_world_size():
    runs = plan("smoke").runs
    assert BYTES_WORLD != TIME_WORLD and {cfg.nproc for cfg in runs} == {BYTES_WORLD, TIME_WORLD}
    assert {(cfg.optimizer, tuple(sorted(cfg.variant.items()))) for cfg in runs} >= {
        (optimizer, tuple(sorted({**variant, **({"scalar_lr": 3e-3} if optimizer != "adamw" else {})}.items())))
        for optimizer, variant in ARMS.values()
    }


def test_a_preset_the_plan_does_not_have_is_refused_naming_the_ones_it_has():
    with pytest.raises(ValueError, match=f"presets {', '.join(PRESETS)}, not 'gpu'"):
        plan("gpu")
    assert PRESETS[:5] == ("smoke", "tune-adamw", "tune-matrix", "tune-extend", "quality")


def test_the_adamw_tune_gives_every_rate_of_its_grid_one_seed_0_run_of_equal_tokens_apart_from_the_evidence():
    runs = plan("tune-adamw").runs
    assert [cfg.lr for cfg in runs] == list(ADAMW_GRID)
    assert {(cfg.optimizer, cfg.seed, cfg.tokens, cfg.reproduction) for cfg in runs} == {
        ("adamw", 0, QUALITY_STEPS * 8 * 128, TUNE_SWEEP)
    }


def test_the_adamw_part_of_stage_two_is_stage_ones_winner_inside_its_grid():
    """suite.judge.sweeps' rule picks ADAMW_TUNED from results/matrix-optimizers-tune-adamw (it refuses a winner at
    its grid's edge)."""
    (winner,) = sweep_winners(ROOT / "results" / "matrix-optimizers-tune-adamw", TUNE_SWEEP).values()
    assert (winner.lr, winner.grid) == (ADAMW_TUNED, ADAMW_GRID)


def test_stage_two_gives_every_matrix_optimizer_six_trials_on_its_grid_with_the_adamw_part_at_the_winner():
    runs = plan("tune-matrix").runs
    for arm in QUALITY_ARMS[1:]:
        optimizer, variant = ARMS[arm]
        mine = [c for c in runs if c.optimizer == optimizer]
        assert [c.lr for c in mine] == list(FIRST_GRIDS[arm]) and len(FIRST_GRIDS[arm]) == len(ADAMW_GRID)
        assert all(c.variant == {**variant, "scalar_lr": ADAMW_TUNED} and c.reproduction == TUNE_SWEEP for c in mine)


def test_stage_two_winners_are_the_declared_rates_inside_their_grids_and_the_edge_ones_are_named():
    """Each optimizer's lowest final validation loss in results/matrix-optimizers-tune-matrix: MATRIX_TUNED's rates,
    none at an end of its grid; Dion2's and Dion3's at the lowest rate (AT_EDGE), which suite.judge.sweeps refuses."""
    losses = _final_losses("matrix")
    winners = {name: min(trials, key=trials.get) for name, trials in losses.items()}
    assert {name: sorted(trials) for name, trials in losses.items()} == {
        a: list(FIRST_GRIDS[a]) for a in QUALITY_ARMS[1:]
    }
    assert {a: winners[a] for a in MATRIX_TUNED} == MATRIX_TUNED
    assert all(FIRST_GRIDS[a][0] < lr < FIRST_GRIDS[a][-1] for a, lr in MATRIX_TUNED.items())
    assert {a for a, lr in winners.items() if lr == FIRST_GRIDS[a][0]} == set(AT_EDGE)
    with pytest.raises(ValueError, match="extend the grid below 0.0125"):
        sweep_winners(ROOT / "results" / "matrix-optimizers-tune-matrix", TUNE_SWEEP)


def test_round_two_gives_every_arm_two_more_rates_so_that_all_have_eight_trials():
    """Dion2's and Dion3's edge extends the matrix grid below it; every other arm gets two more rates too (equal
    trials), each its own grid's factor-2 neighbours, all on seed 0 apart from the evidence."""
    runs = plan("tune-extend").runs
    for arm in QUALITY_ARMS:
        optimizer, _ = ARMS[arm]
        assert [c.lr for c in runs if c.optimizer == optimizer] == list(EXTENDED[arm])
        grid = TUNE_GRIDS[arm]
        assert len(grid) == 8 and all(b / a == pytest.approx(2) for a, b in zip(grid, grid[1:]))
    assert {(c.seed, c.reproduction) for c in runs} == {(0, TUNE_SWEEP)}


def test_every_arms_tuned_rate_is_its_winner_over_eight_trials_in_the_three_tune_folders():
    """suite.judge.sweeps' rule (equal trials, no winner at an edge) over both rounds picks TUNED for every arm."""
    folders = [ROOT / "results" / f"matrix-optimizers-tune-{name}" for name in ("adamw", "matrix", "extend")]
    winners = sweep_winners(folders, TUNE_SWEEP)
    assert len(winners) == len(QUALITY_ARMS)
    by_optimizer = {w.label.split()[1]: w for w in winners.values()}  # labels read "ddp OPTIMIZER ..."
    assert {a: (by_optimizer[ARMS[a][0]].lr, by_optimizer[ARMS[a][0]].grid) for a in QUALITY_ARMS} == {
        a: (TUNED[a], TUNE_GRIDS[a]) for a in QUALITY_ARMS
    }


def test_the_quality_preset_runs_every_arm_at_its_tuned_rate_on_seeds_other_than_the_tunes():
    runs = plan("quality").runs
    assert [(c.optimizer, c.lr, c.seed) for c in runs] == [
        (ARMS[a][0], TUNED[a], seed) for seed in QUALITY_SEEDS for a in QUALITY_ARMS
    ]
    assert 0 not in QUALITY_SEEDS and {c.reproduction for c in runs} != {TUNE_SWEEP}


def test_the_equivalence_margin_is_the_tunes_median_gap_between_best_and_second_best_rate():
    """matrix-dion2-quality-as-muon's margin, the tuning's resolution, read again from the three tune folders."""
    losses = _final_losses("adamw", "matrix", "extend")
    gaps = [sorted(trials.values())[1] - sorted(trials.values())[0] for trials in losses.values()]
    assert len(gaps) == len(QUALITY_ARMS)
    assert card("matrix-dion2-quality-as-muon").margin.value == pytest.approx(statistics.median(gaps), abs=5e-4)


def test_the_trend_tune_gives_every_arm_three_factor_2_rates_centred_on_its_width_64_winner_at_width_128():
    runs = plan("trend-tune-adamw").runs + plan("trend-tune-matrix").runs
    for arm in QUALITY_ARMS:
        optimizer, variant = ARMS[arm]
        mine = [c for c in runs if c.optimizer == optimizer]
        assert [c.lr for c in mine] == list(TREND_GRIDS[arm]) == [TUNED[arm] / 2, TUNED[arm], TUNED[arm] * 2]
        scalar = {} if optimizer == "adamw" else {"scalar_lr": TREND_ADAMW_TUNED}
        assert all(c.variant == {**variant, **scalar} for c in mine)
    assert {(c.model, c.seed, c.reproduction, c.tokens) for c in runs} == {
        (TREND_MODEL, 0, TUNE_SWEEP, QUALITY_STEPS * 8 * 128)
    }


def test_the_adamw_part_at_width_128_is_stage_ones_winner_there_inside_its_grid():
    (winner,) = sweep_winners(ROOT / "results" / "matrix-optimizers-trend-tune-adamw", TUNE_SWEEP).values()
    assert (winner.lr, winner.grid) == (TREND_ADAMW_TUNED, TREND_GRIDS["adamw"])


def test_round_two_at_width_128_gives_every_arm_one_factor_2_neighbour_outside_its_three_rates():
    runs = plan("trend-tune-extend").runs
    assert [(c.optimizer, c.lr) for c in runs] == [(ARMS[a][0], TREND_EXTENSION[a]) for a in QUALITY_ARMS]
    for arm, lr in TREND_EXTENSION.items():
        grid = TREND_GRIDS[arm]
        assert lr in (grid[0] / 2, grid[-1] * 2)
    assert {(c.model, c.seed, c.reproduction) for c in runs} == {(TREND_MODEL, 0, TUNE_SWEEP)}


def test_every_arms_rate_at_width_128_is_its_winner_over_four_trials_in_the_three_trend_tune_folders():
    folders = [ROOT / "results" / f"matrix-optimizers-trend-tune-{name}" for name in ("adamw", "matrix", "extend")]
    winners = sweep_winners(folders, TUNE_SWEEP)
    by_optimizer = {w.label.split()[1]: w for w in winners.values()}  # labels read "ddp OPTIMIZER ..."
    assert {a: by_optimizer[ARMS[a][0]].lr for a in QUALITY_ARMS} == TREND_TUNED
    assert {len(w.grid) for w in winners.values()} == {4} and len(winners) == len(QUALITY_ARMS)


def test_the_trend_preset_runs_every_arm_at_its_width_128_rate_on_the_quality_seeds():
    runs = plan("trend").runs
    assert [(c.model, c.optimizer, c.lr, c.seed) for c in runs] == [
        (TREND_MODEL, ARMS[a][0], TREND_TUNED[a], seed) for seed in QUALITY_SEEDS for a in QUALITY_ARMS
    ]
    assert all(c.variant.get("scalar_lr", TREND_ADAMW_TUNED) == TREND_ADAMW_TUNED for c in runs)
    assert {c.tokens for c in runs} == {c.tokens for c in plan("quality").runs}
