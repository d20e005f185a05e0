"""Runs sharing a launch (suite/plan/multirun.py) make the records separate launches make: the same losses, bytes,
counts, FLOPs and memory categories, for the second run of a worker process as for the first; a run that fails
in a shared launch is recorded failed and the runs after it still run."""

from __future__ import annotations

import dataclasses

import pytest

from suite.config import RunConfig
from suite.meters.memory import CATEGORIES
from suite.plan.multirun import launch_runs, shares_launch
from suite.records import read_record
from suite.run.launch import launch
from tests.peaks import exact_memory, peaks_agree

pytestmark = pytest.mark.slow

# 6 steps: FLOPs on step 0, memory and bytes on step 2 (one period), 3 timed steps, validation every 2
TINY = dict(model="llama-tiny", nproc=2, micro_batch=2, seq_len=32, tokens=6 * 2 * 2 * 32, eval_every=2, eval_batches=1)


def _runs(results) -> list[RunConfig]:
    return [
        RunConfig(method="fsdp", ac=True, results=str(results), **TINY),
        RunConfig(method="ddp", seed=1, results=str(results), **TINY),
    ]


def _measured(rec: dict) -> dict:
    """What a run measured, without its timings, identity, process-level numbers (RSS) and FSDP2's split at the
    peak (tests/peaks.py)."""
    return {
        "status": rec["status"],
        "curve": [{k: p[k] for k in ("step", "tokens", "flops", "train_loss", "val_loss")} for p in rec["curve"]],
        "totals": {k: v for k, v in rec["totals"].items() if k != "wall_s"},
        "comm": rec["comm"]["per_rank"],
        "comm_steps": rec["comm"]["steps"],
        "memory": exact_memory(rec, (*CATEGORIES, "peak_bytes")),
        "state": [{k: v for k, v in row.items() if k.startswith("state")} for row in rec["memory"]["per_rank"]],
        "model": rec["model"],
        "parallel": rec["parallel"],
        "variant": rec["variant"],
        "timed_steps": rec["throughput"]["timed_steps"],
    }


def test_each_run_of_a_shared_launch_equals_a_separate_launch(tmp_path):
    shared = [read_record(p) for p in launch_runs([(f"run {i}", c) for i, c in enumerate(_runs(tmp_path / "shared"))])]
    alone = [read_record(launch(cfg)) for cfg in _runs(tmp_path / "alone")]
    for together, apart in zip(shared, alone, strict=True):
        assert together["status"] == "complete"
        assert _measured(together) == _measured(apart)
        assert peaks_agree(together, apart)
    assert shared[1]["timing"]["before_s"] < alone[1]["timing"]["before_s"]  # no start-up for the second run
    assert all(r["timing"]["steps_s"]["timed"] > 0 for r in shared)


def test_a_failed_run_of_a_shared_launch_is_recorded_and_the_next_still_runs(tmp_path):
    bad = dataclasses.replace(RunConfig(method="ddp", results=str(tmp_path), **TINY), model="no-such-model")
    good = RunConfig(method="ddp", results=str(tmp_path), seed=2, **TINY)
    first, second = (read_record(p) for p in launch_runs([("bad", bad), ("good", good)]))
    assert first["status"] == "failed" and first["error"].startswith("worker ")
    assert second["status"] == "complete"


def test_runs_kept_alive_by_checkpoints_restarts_or_faults_launch_alone():
    assert shares_launch(RunConfig(method="ddp"))
    assert not shares_launch(RunConfig(method="ddp", checkpoint_every=5))
    assert not shares_launch(RunConfig(method="ddp", max_restarts=1))
    assert not shares_launch(RunConfig(method="ddp", fault_step=2, kill_rank=1))
