"""SDP strategies: equality with DDP at C = 1, identical holders, bytes by the formula, memory, full gradient.

Launches real gloo runs (marked slow), one launch per world size (tests/conftest.py: SharedRuns); the last tests
run in one process.
"""

from __future__ import annotations

import copy

import pytest
import torch

from reproductions.sdp.masks import assign
from reproductions.sdp.method import SHARED, component_of_params, count_blocks, drop_blocks, freeze_blocks
from suite.config import RunConfig
from suite.models import blocks_of, build_model
from suite.run.strategy import get_strategy
from tests.conftest import SharedRuns

SMALL = ["--set", "micro_batch=4", "--tokens", "6144"]  # 3 steps at 4 ranks, 6 at 2


def command(method: str, nproc: int, *sets: str) -> tuple[str, ...]:
    args = [method, "--nproc", str(nproc), *SMALL, "--set", "check_every=1"]
    for s in sets:
        args += ["--set", s]
    return tuple(args)


def sdp(shared: SharedRuns, method: str, nproc: int, *sets: str) -> dict:
    return shared(*command(method, nproc, *sets))


DDP = ("ddp", "--nproc", "2", *SMALL)
FULL = ("b-sdp", "--nproc", "2", *SMALL, "--set", "C=1")
HOLDERS = [
    ("b-sdp", 4, ["C=0.75"]),
    ("b-sdp", 3, ["C=0.5"]),  # 4 blocks over 3 workers: holder counts 2, 1, 1, 2
    ("b-sdp", 2, ["C=0.75", "aggregation=dense"]),
    ("bb-sdp", 2, ["C=0.5"]),
]


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> SharedRuns:
    """Every run of the tests below, in one launch per world size (tests/conftest.py: SharedRuns)."""
    commands = [DDP, FULL] + [command(m, n, *sets) for m, n, sets in HOLDERS] + [command("b-sdp", 2, "C=0.75")]
    return SharedRuns(tmp_path_factory.mktemp("shared"), commands)


def losses(record: dict) -> list[tuple]:
    return [(p["step"], p["train_loss"], p["val_loss"]) for p in record["curve"]]


def aggregation_bytes(record: dict) -> tuple[list[float], list[float]]:
    """Per rank and step: payload and wire bytes of every op except the clipping norm's all-reduce."""
    steps = record["comm"]["steps"]
    ops = [[o for o in r["ops"] if o["group"] != "grad-norm"] for r in record["comm"]["per_rank"]]
    return ([sum(o["bytes"] for o in r) / steps for r in ops], [sum(o["wire_bytes"] for o in r) / steps for r in ops])


@pytest.mark.slow
def test_c1_equals_ddp_bit_for_bit(shared):
    ddp, full = shared(*DDP), shared(*FULL)
    assert ddp["status"] == full["status"] == "complete"
    assert len(ddp["curve"]) >= 2
    assert losses(full) == losses(ddp)


@pytest.mark.slow
@pytest.mark.parametrize("method,nproc,sets", HOLDERS)
def test_holders_stay_identical_and_bytes_match_the_formula(shared, method, nproc, sets):
    record = sdp(shared, method, nproc, *sets)
    assert record["status"] == "complete", record.get("error")
    info = record["parallel"]["sdp"]
    assert info["holder_checks"] == record["totals"]["steps"] >= 2
    payload, wire = aggregation_bytes(record)
    assert payload == info["formula"]["payload_bytes_per_rank"]
    assert wire == pytest.approx(info["formula"]["wire_bytes_per_rank"], rel=1e-12)


@pytest.mark.slow
def test_formula_is_about_c_times_ddp(shared):
    record = sdp(shared, "b-sdp", 4, "C=0.75")
    formula = record["parallel"]["sdp"]["formula"]
    ratio = max(formula["wire_bytes_per_rank"]) / formula["ddp_wire_bytes_per_rank"]
    # 3 of 4 blocks, each with 3 holders: (2/3) / (3/4) of DDP's wire bytes for the blocks
    assert 0.6 < ratio < 0.75


@pytest.mark.slow
def test_dense_and_groups_agree_bit_for_bit_with_at_most_two_holders(shared):
    """x/2 + y/2 == (x + y)/2 exactly, so with holder counts <= 2 the two aggregations give the same run."""
    groups = sdp(shared, "b-sdp", 2, "C=0.75")
    dense = sdp(shared, "b-sdp", 2, "C=0.75", "aggregation=dense")
    assert losses(groups) == losses(dense)
    ddp_bytes = dense["parallel"]["sdp"]["formula"]["ddp_payload_bytes_per_rank"]
    assert aggregation_bytes(dense)[0] == [ddp_bytes, ddp_bytes]
    assert max(aggregation_bytes(groups)[0]) < ddp_bytes


@pytest.mark.slow
def test_forward_masked_worker_allocates_nothing_for_dropped_blocks(shared):
    ddp = shared(*DDP)
    record = sdp(shared, "b-sdp", 4, "C=0.75")
    info = record["parallel"]["sdp"]
    full = ddp["memory"]["per_rank"][0]["params"]
    assert full == 4 * (info["shared_params"] + sum(info["block_params"]))
    for mem in record["memory"]["per_rank"]:
        held = info["held"][mem["rank"]]
        assert mem["params"] == 4 * (info["shared_params"] + sum(info["block_params"][b] for b in held))
        # AdamW: two moments of what the rank holds, plus one step counter per tensor
        assert mem["optimizer"] == pytest.approx(2 * mem["params"], rel=1e-3)
        assert 0.7 < mem["params"] / full < 0.8  # C = 0.75 of the blocks plus the shared parts


@pytest.mark.parametrize("workers,coverage", [(2, 0.5), (3, 0.5), (4, 0.75)])
def test_backward_masking_with_identical_batches_gives_the_full_gradient(workers, coverage):
    """Each worker runs the full forward with its foreign blocks frozen; holder-averaging restores every gradient."""
    torch.manual_seed(0)
    model = build_model("llama-tiny")
    tokens = torch.randint(0, 256, (2, 32))

    def grads(m):
        out = m(tokens[:, :-1])
        torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), tokens[:, 1:].reshape(-1)).backward()
        return {n: p.grad for n, p in m.named_parameters() if p.grad is not None}

    expected = grads(copy.deepcopy(model))
    mask = assign(len(blocks_of(model)), workers, coverage)
    component = component_of_params(model)
    total = {n: torch.zeros_like(g) for n, g in expected.items()}
    for rank in range(workers):
        for n, g in grads(freeze_blocks(copy.deepcopy(model), set(mask.held[rank]))).items():
            holders = workers if component[n] == SHARED else len(mask.holders[component[n]])
            total[n] += g / holders
    for n, g in expected.items():
        torch.testing.assert_close(total[n], g, rtol=1e-5, atol=1e-7)


def test_dropped_blocks_are_the_identity_and_own_no_parameters():
    torch.manual_seed(0)
    model = build_model("llama-tiny")
    before = sum(p.numel() for p in model.parameters())
    block = sum(p.numel() for p in model.layers[1].parameters())
    drop_blocks(model, {0, 2, 3})
    assert sum(p.numel() for p in model.parameters()) == before - block
    x = torch.randn(2, 5, 256)
    assert model.layers[1](x, model.rope_cos, model.rope_sin) is x


@pytest.mark.parametrize(
    "variant,nproc,fix",
    [
        ({"K": 4}, 2, "--nproc 4"),
        ({"C": 1.5}, 2, r"C must be a number in \(0, 1\]"),
        ({"C": "half"}, 2, "--set C=0.5"),
        ({"C": 0.25}, 2, "C=0.5 or more"),
        ({"aggregation": "ring"}, 2, "aggregation=groups"),
        ({"K": "four"}, 2, "K must be a whole number >= 1"),
        ({"check_every": -1}, 2, "check_every must be a whole number >= 0"),
    ],
)
def test_bad_parameters_name_the_fix(variant, nproc, fix):
    with pytest.raises(ValueError, match=fix):
        get_strategy(RunConfig(method="b-sdp", variant=dict(variant))).check(nproc)


def test_count_blocks_reads_the_model_without_building_it():
    assert count_blocks("llama-1b") == 16
