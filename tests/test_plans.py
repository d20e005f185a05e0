"""Plans: every run's recorded command gives back its config, and a plan's estimates write estimated and
simulated records whose commands say how they were made."""

from __future__ import annotations

import dataclasses
import shlex

import pytest

from suite.cli import config_from_args, parser
from suite.config import RunConfig, command_line
from suite.extensions import reproductions
from suite.plan.items import run_estimate
from suite.plan.plans import Estimate, Plan, load_plan
from suite.plan.reproduce import run_plan
from suite.records import read_record, validate
from suite.run.optim import split_variant
from suite.run.strategy import get_strategy

A100 = "4xA100-nvlink-4x200gbIB"


@pytest.mark.parametrize("name", sorted(reproductions()))
def test_smoke_commands_give_back_their_runs(name):
    for cfg in load_plan(name, "smoke").runs:
        argv = shlex.split(command_line(cfg))[3:]
        back = config_from_args(parser().parse_args(argv), argv)
        plain = dataclasses.replace(back, command="", results=cfg.results, variant=cfg.variant)
        assert plain == dataclasses.replace(cfg, command="")
        # the command carries parameters as text; the method's and optimizer's Params read them back the same
        assert _parsed(back) == _parsed(cfg)


def _parsed(cfg: RunConfig) -> tuple[dict, dict]:
    method, optimizer = split_variant(cfg)
    return get_strategy(cfg, method).variant, optimizer


def test_estimates_write_estimated_and_simulated_records(tmp_path):
    cfg = RunConfig(method="ddp", model="llama-tiny", nproc=8, micro_batch=2, seq_len=64, reproduction="demo")
    estimated, simulated = run_estimate(Estimate(cfg, gpus_per_node=4, topologies=(A100,)), tmp_path, "1/1")
    for rec in (estimated, simulated):
        validate(rec)
        assert read_record(tmp_path / f"{rec['run_id']}.json")["provenance"] == rec["provenance"]
    assert estimated["provenance"] == "estimated" and simulated["provenance"] == "simulated"
    assert estimated["command"] == (
        "python -m suite estimate ddp --model llama-tiny --world-size 8 "
        "--set micro_batch=2 --set seq_len=64 --set reproduction=demo "
        f"--gpus-per-node 4 --results {tmp_path}"
    )
    assert simulated["command"].startswith(
        f"python -m suite simulate {tmp_path}/{estimated['run_id']}.json --topology {A100} --mfu 0.4"
    )
    # 8 ranks on nodes of 4: DDP's all-reduce crosses nodes, and the projection prices it on InfiniBand
    assert any(op["tier"] == "inter-node" for op in estimated["comm"]["per_rank"][0]["ops"])
    assert simulated["simulation"]["comm_s"] > 0


def _estimated(rec: dict) -> dict:
    """What an estimate found, without its identity and timings."""
    return {k: rec[k] for k in ("memory", "comm", "totals", "model", "parallel", "variant")} | {
        "estimate": {k: v for k, v in rec["estimate"].items() if k != "wall_s"}
    }


@pytest.mark.slow
def test_estimates_side_by_side_equal_estimates_in_turn(tmp_path):
    """A plan's estimates run one per core (suite.plan.items._estimates); each equals the estimate made alone."""
    ests = [
        Estimate(RunConfig(method=m, model="llama-tiny", nproc=4, micro_batch=2, seq_len=64, variant=v), 2)
        for m, v in (("ddp", {}), ("b-sdp", {"C": 0.5}))
    ]
    side_by_side = run_plan(Plan("smoke", [], protocol="none", estimates=ests, name="demo"), tmp_path / "plan")
    alone = [run_estimate(est, tmp_path / "alone", "1/1")[0] for est in ests]
    assert [_estimated(r) for r in side_by_side] == [_estimated(r) for r in alone]
