"""A plan's time breakdown (suite/timing.py): a launch splits into what its runs' workers reported and the launch's
own cost; the phases add up to the wall time; the summary is kept beside the records."""

from __future__ import annotations

import time

from suite.plan.summary import SUMMARY, write_summary
from suite.timing import PHASES, PlanTimer


def _record(before: float, setup: float, timed: float, metered: float, warmup: float, evals: float) -> dict:
    steps = {"timed": timed, "metered": metered, "warmup": warmup}
    run = setup + sum(steps.values()) + evals + 0.5  # 0.5 s of logging and record writes
    return {
        "timing": {
            "before_s": before,
            "setup_s": setup,
            "steps_s": steps,
            "eval_s": evals,
            "final_evals_s": 0.0,
            "run_s": run,
        }
    }


def test_a_launch_splits_into_its_runs_phases_and_its_own_cost():
    timer = PlanTimer()
    runs = [_record(10.0, 3.0, 20.0, 4.0, 1.0, 2.0), _record(0.1, 2.0, 30.0, 4.0, 1.0, 2.0)]
    timer.add_launch(100.0, runs)
    s = timer.seconds
    assert s["timed steps"] == 50.0 and s["metered steps"] == 8.0 and s["warm-up steps"] == 2.0
    assert s["worker imports"] == 10.1 and s["set-up"] == 5.0 and s["evaluation"] == 4.0
    assert s["loop and records"] == 1.0
    assert abs(s["launches"] - (100.0 - 80.1)) < 1e-9


def test_a_failed_run_leaves_its_launch_unsplit():
    timer = PlanTimer()
    timer.add_launch(30.0, [_record(1.0, 1.0, 5.0, 1.0, 1.0, 0.0), {"status": "failed"}])
    assert timer.seconds["launches"] == 0.0 and timer.seconds["failed runs"] > 0


def test_the_phases_add_up_to_the_wall_time_and_the_summary_is_kept(tmp_path):
    timer = PlanTimer()
    with timer.item("estimates"):
        time.sleep(0.05)
    summary = timer.breakdown()
    assert list(summary["phases_s"]) == list(PHASES)
    assert abs(sum(summary["phases_s"].values()) - summary["wall_s"]) < 0.05
    assert summary["phases_s"]["estimates"] >= 0.05
    printed = write_summary(tmp_path, "the table", timer)
    kept = (tmp_path / SUMMARY).read_text()
    assert kept.startswith("the table") and "estimates" in printed and printed in kept
