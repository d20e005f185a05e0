"""Pipeline parallelism gives one process's loss and gradients on the same batch, for every schedule (gloo).

Each spawned rank builds the pp strategy through its own hooks (setup, build, forward_backward) with the seed one
process uses and runs one micro-batch through the schedule: GPipe and 1F1B at 2 ranks, 1F1B at 3 (4 blocks
over 3 stages: 1, 1 and 2), and interleaved 1F1B at 2 ranks of 2 stages each (one block per stage, rank 0
holding stages 0 and 2). The gradients are compared parameter by parameter with one process's on the whole
batch, since a loss trajectory under AdamW would hide a wrong gradient scale.
"""

from __future__ import annotations

import re

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from baselines.pp import VIRTUAL, local_stage_ids, stage_bounds
from suite import models
from suite.config import RunConfig
from suite.meters.comm import CommLedger
from suite.run.strategy import Context, get_strategy

pytestmark = pytest.mark.slow

ROWS, SEQ, MODEL = 6, 32, "llama-tiny"  # 6 rows: 2 or 3 microbatches of equal size
N_LAYERS = models.model_config(MODEL)["n_layers"]


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    tokens = torch.randint(0, 256, (ROWS, SEQ + 1), generator=torch.Generator().manual_seed(7))
    return tokens[:, :-1], tokens[:, 1:]


def loss_fn(model, x, y) -> torch.Tensor:
    out = model(x)
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


def one_process() -> tuple[float, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    model = models.build_model(MODEL)
    loss = loss_fn(model, *batch())
    loss.backward()
    return loss.item(), {n: p.grad for n, p in model.named_parameters()}


def _worker(rank: int, world: int, schedule: str, init: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)
    cfg = RunConfig(
        method="pp", model=MODEL, nproc=world, seq_len=SEQ, micro_batch=ROWS, variant={"schedule": schedule}
    )
    strategy = get_strategy(cfg)
    strategy.check(world)
    ctx = Context(cfg, rank, world, torch.device("cpu"), CommLedger())
    strategy.setup(ctx)
    torch.manual_seed(0)
    model = strategy.build(lambda: models.build_model(MODEL), ctx)
    loss = strategy.forward_backward(model, *batch(), loss_fn, lambda loss: loss.backward())
    grads = {n: p.grad for n, p in model.named_parameters()}
    torch.save({"loss": loss.item(), "grads": grads}, f"{out}.{rank}")
    dist.destroy_process_group()


def global_name(name: str, rank: int, world: int, virtual: int) -> str:
    """The one-process name of a rank's parameter: `[{local stage}.]layers.{i}...` -> `layers.{first + i}...`
    (a rank of one stage trains the stage itself, a rank of several their list)."""
    local, rest = name.split(".", 1) if virtual > 1 else ("0", name)
    stage = local_stage_ids(rank, world, virtual)[int(local)]
    if match := re.fullmatch(r"layers\.(\d+)(\..*)", rest):
        first = stage_bounds(N_LAYERS, world * virtual, stage)[0]
        return f"layers.{first + int(match[1])}{match[2]}"
    return rest


@pytest.mark.parametrize(("schedule", "world"), [("gpipe", 2), ("1f1b", 2), ("1f1b", 3), ("interleaved", 2)])
def test_pipeline_gradients_equal_one_process(schedule, world, tmp_path):
    mp.spawn(_worker, args=(world, schedule, str(tmp_path / "init"), str(tmp_path / "out")), nprocs=world, join=True)
    ref_loss, ref = one_process()
    covered = []
    for rank in range(world):
        got = torch.load(tmp_path / f"out.{rank}")
        assert got["loss"] == pytest.approx(ref_loss, abs=1e-5)  # every rank reports the last stage's loss
        for name, grad in got["grads"].items():
            full = global_name(name, rank, world, VIRTUAL[schedule])
            covered.append(full)
            torch.testing.assert_close(grad, ref[full], rtol=1e-4, atol=1e-6, msg=lambda m, n=full: f"{n}: {m}")
    assert sorted(covered) == sorted(ref)  # every parameter's gradient on exactly one rank
