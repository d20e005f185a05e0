"""Issue 26 item 3: each arm's learning rate picked from a sweep by AlgoPerf's rule (suite/judge/sweeps.py). The winner
is the rate of the lowest final validation loss, a diverged run losing; a winner at the grid's edge, unequal trial
counts, an unfinished run or a second seed is refused with the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from suite.judge.sweeps import pick_winners, sweep_winners
from tests.report_fixtures import make_record, write_records

SWEEP = "toy-lr-sweep"
BSDP = {"C": 0.5}
RESULTS = Path(__file__).parents[1] / "results" / "dion-smoke"


def _record(method: str, lr: float, loss: float, status: str = "complete", seed: int = 0) -> dict:
    rec = make_record(method, seed, reproduction=SWEEP, variant=BSDP if method == "b-sdp" else {}, status=status)
    rec["settings"] = {"lr": lr}
    rec["run_id"] += f"-lr{lr:g}"
    rec["curve"][-1]["val_loss"] = loss
    return rec


def _sweep(losses: dict[str, dict[float, float]], diverged: tuple = ()) -> list[dict]:
    """Records of method -> rate -> final loss; (method, rate) in `diverged` diverged."""
    return [
        _record(m, lr, loss, "diverged" if (m, lr) in diverged else "complete")
        for m, by_lr in losses.items()
        for lr, loss in by_lr.items()
    ]


def _rates(winners: dict) -> dict[str, float]:
    return {w.label.split()[0]: w.lr for w in winners.values()}


def test_each_arm_wins_at_its_lowest_loss_and_a_diverged_run_loses():
    # b-sdp at 8e-3 diverged after its lowest loss: it loses, and the winner below it is inside the grid
    losses = {
        "ddp": {1e-3: 3.0, 2e-3: 2.8, 4e-3: 2.9, 8e-3: 3.3},
        "b-sdp": {1e-3: 3.2, 2e-3: 3.1, 4e-3: 3.0, 8e-3: 1.0},
    }
    winners = pick_winners(_sweep(losses, diverged={("b-sdp", 8e-3)}))
    assert _rates(winners) == {"ddp": 2e-3, "b-sdp": 4e-3}
    ddp = next(w for w in winners.values() if w.label.startswith("ddp"))
    assert ddp.val_loss == 2.8 and ddp.grid == (1e-3, 2e-3, 4e-3, 8e-3)


@pytest.mark.parametrize(
    "ddp, fix",
    [
        ({1e-3: 2.7, 2e-3: 2.8, 4e-3: 2.9}, "lowest rate swept: extend the grid below 0.001"),
        ({1e-3: 3.0, 2e-3: 2.9, 4e-3: 2.8}, "highest rate swept: extend the grid above 0.004"),
    ],
    ids=["below", "above"],
)
def test_a_winner_at_the_grids_edge_names_the_extension(ddp, fix):
    with pytest.raises(ValueError, match=fix):
        pick_winners(_sweep({"ddp": ddp, "b-sdp": {1e-3: 3.2, 2e-3: 3.0, 4e-3: 3.1}}))


def test_every_arm_at_an_edge_is_named_in_one_message():
    losses = {"ddp": {1e-3: 2.7, 2e-3: 2.8, 4e-3: 2.9}, "b-sdp": {1e-3: 3.2, 2e-3: 3.1, 4e-3: 3.0}}
    with pytest.raises(ValueError, match="below 0.001; .*above 0.004"):
        pick_winners(_sweep(losses))


def test_a_diverged_top_rate_moves_the_winner_inside_but_an_arm_that_always_diverged_asks_for_lower_rates():
    # ddp's lowest loss is at the top rate, which diverged: the rate below it wins, inside the grid
    losses = {"ddp": {1e-3: 3.0, 2e-3: 2.9, 4e-3: 2.0}, "b-sdp": {1e-3: 3.2, 2e-3: 3.0, 4e-3: 3.1}}
    assert _rates(pick_winners(_sweep(losses, diverged={("ddp", 4e-3)})))["ddp"] == 2e-3
    every = {("b-sdp", lr) for lr in losses["b-sdp"]}
    with pytest.raises(ValueError, match="every rate of b-sdp .* diverged: extend the grid below 0.001"):
        pick_winners(_sweep(losses, diverged=every))


def test_unequal_trial_counts_between_arms_are_refused():
    losses = {"ddp": {1e-3: 3.0, 2e-3: 2.8, 4e-3: 2.9}, "b-sdp": {1e-3: 3.2, 2e-3: 3.0, 4e-3: 3.1, 8e-3: 3.3}}
    with pytest.raises(ValueError, match=r"unequal trial counts \(b-sdp .*: 4, ddp .*: 3\)"):
        pick_winners(_sweep(losses))


def test_an_unfinished_run_a_second_seed_or_a_repeated_rate_is_refused():
    losses = {"ddp": {1e-3: 3.0, 2e-3: 2.8, 4e-3: 2.9}}
    with pytest.raises(ValueError, match="the sweep is not finished"):
        pick_winners([*_sweep(losses), _record("ddp", 8e-3, 3.1, status="failed")])
    with pytest.raises(ValueError, match=r"the sweep ran seeds \[0, 1\]"):
        pick_winners([*_sweep(losses), _record("ddp", 8e-3, 3.1, seed=1)])
    with pytest.raises(ValueError, match="two runs at lr=0.002"):
        pick_winners([*_sweep(losses), _record("ddp", 2e-3, 2.7)])


def test_sweep_winners_reads_only_the_sweeps_records_in_a_folder(tmp_path):
    with pytest.raises(ValueError, match="no records of sweep 'toy-lr-sweep'.*run the plan's tune preset first"):
        sweep_winners(tmp_path, SWEEP)
    losses = {"ddp": {1e-3: 3.0, 2e-3: 2.8, 4e-3: 2.9}, "b-sdp": {1e-3: 3.2, 2e-3: 3.0, 4e-3: 3.1}}
    evidence = _record("ddp", 4e-3, 1.0, seed=1)  # a run of the reproduction itself: not a trial
    evidence["reproduction"] = "toy"
    write_records(tmp_path, [*_sweep(losses), evidence])
    assert _rates(sweep_winners(tmp_path, SWEEP)) == {"ddp": 2e-3, "b-sdp": 2e-3}


@pytest.mark.skipif(not RESULTS.is_dir(), reason="no committed smoke results")
def test_dions_committed_sweep_gives_its_picked_rates_arm_by_arm():
    """Dion's smoke sweep swept AdamW at 4 rates and Muon and Dion at 6: the rule refuses them together (unequal
    trial counts), and each alone gives the rate its plan picked."""
    from reproductions.dion.plan import LR_PICKED
    from suite.records import load_records

    records = [r for r in load_records(RESULTS)[0] if r["reproduction"] == "dion-lr-sweep"]
    with pytest.raises(ValueError, match="unequal trial counts"):
        pick_winners(records)
    for name, picked in LR_PICKED.items():
        (winner,) = pick_winners([r for r in records if r["optimizer"]["name"] == name]).values()
        assert winner.lr == picked


def test_one_arm_tuned_at_two_budgets_is_two_arms_named_by_their_budget():
    """A tune at each card's horizon (dion's tune-adamw: 500 and 1,000 steps): the label shows no budget, so the
    arms that share it are told apart by the fields they differ in, each with its own winner."""
    from suite.arms import arm_of

    records = []
    short, long = {1e-3: 2.9, 2e-3: 2.8, 4e-3: 2.95, 8e-3: 3.1}, {1e-3: 2.7, 2e-3: 2.6, 4e-3: 2.5, 8e-3: 2.8}
    for budget, losses in ((512_000, short), (1_024_000, long)):
        for rec in _sweep({"ddp": losses}):
            rec["protocol"]["budget"] = budget
            rec["arm"] = arm_of({k: v for k, v in rec.items() if k != "arm"})
            rec["run_id"] += f"-{budget}"
            records.append(rec)
    winners = pick_winners(records)
    assert sorted(w.label.rsplit(" ", 1)[1] for w in winners.values()) == ["budget=1024000", "budget=512000"]
    assert {w.label.rsplit(" ", 1)[1]: w.lr for w in winners.values()} == {
        "budget=512000": 2e-3,
        "budget=1024000": 4e-3,
    }


def _outer(method: str, outer_lr: float, loss: float, lr: float = 1e-3) -> dict:
    """A sweep record of a DiLoCo-family arm at the outer rate `outer_lr` (its variant's), its inner rate `lr`."""
    rec = make_record(method, 0, reproduction=SWEEP, variant={"outer_lr": outer_lr})
    rec["settings"] = {"lr": lr}
    rec["run_id"] += f"-outer{outer_lr:g}-lr{lr:g}"
    rec["curve"][-1]["val_loss"] = loss
    return rec


def test_an_arm_may_sweep_its_outer_rate_and_its_winner_says_so():
    records = [_outer("diloco", r, loss) for r, loss in {0.35: 3.0, 0.7: 2.8, 1.4: 2.9}.items()]
    edge = records + [_outer("isoloco", r, loss) for r, loss in {0.35: 3.1, 0.7: 3.0, 1.4: 2.95}.items()]
    with pytest.raises(ValueError, match=r"isoloco.* winner outer_lr=1.4 is the highest rate swept"):
        pick_winners(edge)
    (winner,) = pick_winners(records).values()
    assert (winner.lr, winner.rate, winner.grid) == (0.7, "outer_lr", (0.35, 0.7, 1.4))


def test_trials_that_vary_both_rates_are_refused():
    records = [_outer("diloco", 0.35, 3.0), _outer("diloco", 0.7, 2.8, lr=2e-3), _outer("diloco", 1.4, 2.9)]
    with pytest.raises(ValueError, match="trials vary lr and outer_lr: a sweep varies one rate"):
        pick_winners(records)
