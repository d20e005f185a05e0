"""Rank 0 evaluates alone where the evaluation forward needs no peers (DDP, SDP: Strategy.eval_on_every_rank), and
every rank gets its loss: the record's validation curve is rank 0's model scored on the validation batches, as
when every rank scored its own, at world sizes 2 and 4 and one that divides the model unevenly (3)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from suite.data import load_data
from suite.evals.model_file import load_checkpoint
from suite.run.strategy import methods

# 3 to 6 steps, evaluated every 2 and at the end on 2 batches of 8 sequences (conftest.TINY); meters off: only the
# losses are read here
COMMON = ("--tokens", "12288", "--no-meters")
CASES = {
    "ddp-2": ("ddp", "--nproc", "2"),
    "b-sdp-4": ("b-sdp", "--nproc", "4", "--set", "C=0.5"),
    "b-sdp-3": ("b-sdp", "--nproc", "3", "--set", "C=0.5"),
    "fsdp-2": ("fsdp", "--nproc", "2"),  # a sharded model: every rank evaluates, as before
}


@pytest.fixture(scope="module")
def records(runs, tmp_path_factory) -> dict[str, tuple[dict, str]]:
    folder = tmp_path_factory.mktemp("models")
    commands = {name: (*args, *COMMON, "--checkpoint", str(folder / f"{name}.pt")) for name, args in CASES.items()}
    runs.share(list(commands.values()))
    return {name: (runs(*args), str(folder / f"{name}.pt")) for name, args in commands.items()}


def test_the_strategies_that_evaluate_on_rank_0_alone():
    alone = {name for name, cls in methods().items() if not cls.eval_on_every_rank}
    assert {"ddp", "zero1", "b-sdp", "bb-sdp", "n-sdp", "b-sdp-fsdp-holders", "b-sdp-fsdp-worker"} <= alone
    assert not alone & {"fsdp", "tp", "pp", "cp", "ep", "fsdp-tp"}


@pytest.mark.slow
@pytest.mark.parametrize("name", CASES)
def test_the_recorded_validation_loss_is_rank_0s_model_on_the_validation_batches(records, name):
    record, path = records[name]
    assert record["status"] == "complete"
    model, _ = load_checkpoint(path)
    model.eval()
    cfg = record["settings"]
    batches = load_data(record["data"]["name"]).val_batches(cfg["eval_batches"], cfg["eval_batch"], cfg["seq_len"])
    with torch.no_grad():
        losses = [F.cross_entropy(model(x).float().flatten(0, 1), y.flatten()).item() for x, y in batches]
    steps = record["totals"]["steps"]
    evaluated = [p["step"] for p in record["curve"] if p["val_loss"] is not None]
    assert evaluated == sorted({*range(2, steps + 1, 2), steps}) and len(evaluated) >= 2
    # the same forward in another process, whose thread count may differ: equal to float32 rounding
    assert record["curve"][-1]["val_loss"] == pytest.approx(sum(losses) / len(losses), rel=1e-6)
