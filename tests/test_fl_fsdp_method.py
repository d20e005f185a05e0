"""FL+FSDP's parts without launching: mesh shapes and their errors, parameters, the ring formulas, the
estimator at world sizes this machine cannot run (fake process group)."""

from __future__ import annotations

import pytest

from reproductions.fl_fsdp.formulas import ring_bytes
from reproductions.fl_fsdp.mesh import INTER, INTRA, Shape, shape_of
from reproductions.fl_fsdp.projection import formula, repriced, wire_per_tier
from suite.config import RunConfig
from suite.estimate.scale import estimate
from suite.run.strategy import get_strategy


def strategy(method: str, **variant):
    return get_strategy(RunConfig(method=method, variant=dict(variant)))


@pytest.mark.parametrize(
    "method,variant,world,shape",
    [
        ("fl-fsdp", {}, 4, Shape(2, 1, 2)),
        ("fl-fsdp", {"G": 3}, 6, Shape(2, 1, 3)),
        ("fl-hsdp", {}, 8, Shape(2, 2, 2)),
        ("fl-hsdp", {"G": 32, "S": 4}, 512, Shape(16, 8, 4)),
        ("diloco", {}, 4, Shape(4, 1, 1)),
        ("local-sgd", {"G": 2}, 4, Shape(2, 2, 1)),
        ("diloco", {"G": 2, "inner": "fsdp"}, 4, Shape(2, 1, 2)),
    ],
)
def test_mesh_shapes(method, variant, world, shape):
    assert strategy(method, **variant).shape(world) == shape


@pytest.mark.parametrize(
    "method,variant,world,fix",
    [
        ("fl-fsdp", {"G": 4}, 4, "at least 2 federation groups"),
        ("fl-fsdp", {"G": 4}, 6, "at least 2 federation groups"),
        ("fl-hsdp", {"G": 4, "S": 3}, 8, "must divide the group size"),
    ],
)
def test_bad_mesh_shapes_name_the_fix(method, variant, world, fix):
    with pytest.raises(ValueError, match=fix) as err:
        strategy(method, **variant).check(world)
    assert "\n" not in str(err.value) and "--set" in str(err.value)


@pytest.mark.parametrize(
    "variant,fix",
    [
        ({"F": 0}, "F must be a whole number >= 1"),
        ({"F": 1.5}, "F must be a whole number >= 1"),
        ({"G": "two"}, "G must be a whole number"),
        ({"outer": "adam"}, "outer must be one of"),
        ({"outer_lr": 1.0}, "need an outer optimizer"),
        ({"data_split": "iid"}, "data_split must be one of"),
        ({"S": 2}, "has no parameter 'S'"),
    ],
)
def test_bad_parameters_name_the_fix(variant, fix):
    with pytest.raises(ValueError, match=fix) as err:
        strategy("fl-fsdp", **variant)
    assert "\n" not in str(err.value)


def test_each_method_sets_its_period_and_outer_optimizer():
    assert strategy("fl-fsdp").comm_period == 8 and strategy("fl-fsdp", F=3).comm_period == 3
    assert strategy("diloco").variant["outer"] == "nesterov"
    assert (strategy("diloco").variant["outer_lr"], strategy("diloco").variant["outer_momentum"]) == (0.7, 0.9)
    assert strategy("local-sgd").variant["outer"] == "none"


def test_ring_formulas_follow_claims_md():
    p, b = 8_000_000_000, 2
    # paper shapes: 512 ranks; HSDP 4 x 128; FL+FSDP 128 groups of 4; FL+HSDP 16 groups of 32 (4 x 8), F = 8
    fsdp = ring_bytes("fsdp", p, b, 512)
    hsdp = ring_bytes("hsdp", p, b, 512, s=4)
    fl = ring_bytes("fl-fsdp", p, b, 512, g=4, f=8)
    flh = ring_bytes("fl-hsdp", p, b, 512, g=32, s=4, f=8)
    assert fsdp == {INTRA: 0.0, INTER: pytest.approx(3 * b * p * 511 / 512)}
    assert hsdp[INTRA] == fl[INTRA] == pytest.approx(3 * b * p * 3 / 4)
    assert hsdp[INTER] == pytest.approx(2 * b * p / 4 * 127 / 128)
    assert fl[INTER] == pytest.approx(2 * b * p / 4 * 127 / 128 / 8)
    # the bytes-only model: FL+HSDP's inter-group bytes per step are HSDP's replicate bytes over F (and
    # its intra-group all-reduce over 8 replicas is what HSDP sends between nodes): no byte saving at F = 1
    assert ring_bytes("fl-hsdp", p, b, 512, g=32, s=4, f=1)[INTER] == pytest.approx(2 * b * p / 4 * 15 / 16)
    assert flh[INTRA] == pytest.approx(3 * b * p * 3 / 4 + 2 * b * p / 4 * 7 / 8)
    with pytest.raises(ValueError, match="no ring formula"):
        ring_bytes("ddp", p, b, 8)


def tiny_estimate(method: str, grad_clip: float = 1.0, **variant) -> dict:
    """8 ranks on nodes of 2 (fake process group): llama-tiny's 256-row tensors shard evenly over 2, 4 or 8."""
    cfg = RunConfig(
        method=method, model="llama-tiny", nproc=8, micro_batch=1, seq_len=32, grad_clip=grad_clip, variant=variant
    )
    return estimate(cfg, gpus_per_node=2)


def test_estimated_inter_group_bytes_fall_as_one_over_f():
    """4 groups of 2: the ledger's fed all-reduce per step is the shard / F, and re-pricing an F = 1 ledger for
    F = 2 (projection.py) gives the F = 2 ledger's bytes."""
    inter, records = {}, {}
    for f in (1, 2):
        records[f] = rec = tiny_estimate("fl-fsdp", F=f)
        ops = rec["comm"]["per_rank"][0]["ops"]
        inter[f] = sum(o["bytes"] for o in ops if o["tier"] == INTER) / rec["comm"]["steps"]
        assert inter[f] == rec["parallel"]["fl"]["averaged_bytes_per_rank"] / f
    assert inter[1] == 2 * inter[2]
    assert wire_per_tier(repriced(records[1], 2)) == pytest.approx(wire_per_tier(records[2]), rel=1e-12)


@pytest.mark.parametrize(
    "method,variant",
    [("fsdp", {}), ("hsdp", {"shard": 2}), ("fl-fsdp", {"F": 2, "G": 4}), ("fl-hsdp", {"F": 2, "G": 4, "S": 2})],
)
def test_ring_model_equals_the_ledger_with_even_shards(method, variant):
    """The ring model's per-tier formulas (formulas.py) against the estimator's ledger (itself checked equal to a
    measured run): exact when every tensor's rows divide by the shard count. The model prices parameters and
    gradients; clipping's norm all-reduce (4 bytes a parameter tensor a step) is not in it, so clipping is off."""
    rec = tiny_estimate(method, grad_clip=0.0, **variant)
    assert wire_per_tier(rec) == pytest.approx(formula(rec), rel=1e-9)


def test_shapes_of_paper_configurations():
    assert shape_of(512, 4, None, "fl-fsdp") == Shape(128, 1, 4)
    assert shape_of(512, 32, 4, "fl-hsdp") == Shape(16, 8, 4)


def test_the_command_line_stops_before_launching_with_one_line():
    from tests.conftest import run_cli

    proc = run_cli(["run", "fl-fsdp", "--nproc", "4", "--tokens", "1000", "--set", "G=4"])
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "--set G=N" in proc.stderr
