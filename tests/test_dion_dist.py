"""Distributed Dion and Muon equal the single-process result on the same inputs (gloo, world sizes 2 and 4).

Three matrices whose rows do not divide evenly (13 x 5 tall, 3 x 10 wide, 6 x 6 square: at 4 ranks FSDP2's
shards hold 4/4/4/1, 1/1/1/0 and 2/2/2/0 rows) and a bias on AdamW, three steps of fixed gradients:
- FSDP2 (`fully_shard`, DTensor row shards, gradients already reduced): Dion reduces only small factors,
  Muon gathers, orthogonalizes and scatters; both equal one process given the same gradients;
- data parallel (each rank its own gradient, Dion owning the sync): equals one process given the mean
  gradient, and the bytes the communication meter counts are the (m + n) r per compressed matrix.
The run through the harness (DDP with its all-reduce silenced) is checked against one process too.
"""

from __future__ import annotations

import math
import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, Shard, distribute_tensor

from baselines.muon import Muon
from reproductions.dion.dion import Dion
from suite.meters.comm import CommLedger

STEPS, FRACTION, LR = 3, 0.5, 0.05


class Toy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tall = nn.Linear(5, 13)  # weight 13 x 5, bias 13
        self.wide = nn.Linear(10, 3, bias=False)
        self.square = nn.Linear(6, 6, bias=False)


def gradient(shape: torch.Size, step: int, index: int, rank: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(1000 * step + 10 * index + rank)
    return torch.randn(shape, generator=gen)


def make(kind: str, model: nn.Module, replicate=None) -> torch.optim.Optimizer:
    matrices = [model.tall.weight, model.wide.weight, model.square.weight]
    groups = [{"params": matrices}, {"params": [model.tall.bias], "algorithm": "adamw", "weight_decay": 0.0}]
    if kind == "muon":
        return Muon(groups, lr=LR, weight_decay=0.1)
    return Dion(groups, lr=LR, rank_fraction=FRACTION, weight_decay=0.1, replicate_group=replicate)


def train(kind: str, model: nn.Module, grads, replicate=None) -> tuple[dict, list[int]]:
    """STEPS steps; grads(step, index, param) gives each parameter's gradient; bytes counted on step 1."""
    torch.manual_seed(5)  # Dion's Q
    opt = make(kind, model, replicate)
    counted = []
    for step in range(STEPS):
        for index, p in enumerate(model.parameters()):
            p.grad = grads(step, index, p)
        ledger = CommLedger()
        with ledger:
            opt.step()
        if step == 1:
            counted = [sum(o["bytes"] for o in ledger.ops() if o["op"] == "all_reduce"), opt]
    state = {
        n: (p.full_tensor() if isinstance(p, DTensor) else p).detach().clone() for n, p in model.named_parameters()
    }
    return state, counted


def _worker(rank: int, world: int, init: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)
    results = {}
    mesh = init_device_mesh("cpu", (world,))
    for kind in ("dion", "muon"):
        torch.manual_seed(0)
        model = Toy()
        fully_shard(model, mesh=mesh)

        def sharded(step, index, p):
            return distribute_tensor(gradient(p.shape, step, index), mesh, [Shard(0)])

        state, (measured, opt) = train(kind, model, sharded)
        numbers = opt.comm_numbers()["matrices"] if kind == "dion" else None
        results[f"fsdp-{kind}"] = (state, measured, numbers)
    torch.manual_seed(0)
    model = Toy()
    state, (measured, opt) = train(
        "dion", model, lambda step, index, p: gradient(p.shape, step, index, rank), dist.group.WORLD
    )
    results["replicate-dion"] = (state, measured, opt.comm_numbers()["matrices"])
    if rank == 0:
        torch.save(results, out)
    dist.destroy_process_group()


def single(kind: str, world: int, mean: bool) -> dict:
    torch.manual_seed(0)
    model = Toy()

    def grads(step, index, p):
        if not mean:
            return gradient(p.shape, step, index)
        return sum(gradient(p.shape, step, index, r) for r in range(world)) / world

    return train(kind, model, grads)[0]


@pytest.fixture(scope="module", params=[2, 4])
def distributed(request, tmp_path_factory) -> tuple[int, dict]:
    world = request.param
    folder = tmp_path_factory.mktemp(f"dion-w{world}")
    out = str(folder / "results.pt")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.spawn(_worker, args=(world, str(folder / "init"), out), nprocs=world, join=True)
    return world, torch.load(out)


def assert_states_close(a: dict, b: dict, atol: float) -> None:
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=atol, msg=name)


@pytest.mark.slow
def test_fsdp_dion_equals_one_process(distributed):
    world, results = distributed
    state, measured, numbers = results["fsdp-dion"]
    assert_states_close(state, single("dion", world, mean=False), atol=1e-5)
    # only small factors travel: S P (k x r, k = 128) + P^T P for the row-sharded 13 x 5 and 6 x 6,
    # B Q (n x r) + column norms (r) for the 3 x 10 (a column-sharded working 10 x 3); never a matrix
    assert numbers == (128 * 3 + 9 + 5 * 3) + (10 * 2 + 2) + (128 * 3 + 9 + 6 * 3)
    assert measured == 4 * numbers


@pytest.mark.slow
def test_fsdp_muon_gathers_orthogonalizes_and_scatters_to_the_single_process_result(distributed):
    world, results = distributed
    state, measured, _ = results["fsdp-muon"]
    assert measured == 0  # gather and scatter only
    assert_states_close(state, single("muon", world, mean=False), atol=1e-6)


@pytest.mark.slow
def test_data_parallel_dion_equals_one_process_on_the_mean_gradient_with_low_rank_bytes(distributed):
    world, results = distributed
    state, measured, numbers = results["replicate-dion"]
    assert_states_close(state, single("dion", world, mean=True), atol=1e-5)
    r_tall, r_wide = math.ceil(FRACTION * 5), math.ceil(FRACTION * 3)
    # (m + n) r for the two matrices where that is smaller than m n; the square one (36 = 36) sends its gradient
    assert numbers == (13 + 5) * r_tall + (3 + 10) * r_wide + 6 * 6
    assert measured == 4 * (numbers + 13)  # and the bias's gradient, for AdamW


@pytest.mark.slow
def test_ddp_run_with_dion_equals_one_process(runs):
    """The harness's DDP at 2 ranks (all-reduce silenced, Dion syncing) against 1 rank reading both halves."""
    common = ["--optimizer", "dion", "--set", "rank_fraction=0.25", "--set", "grad_clip=0", "--tokens", "3072"]
    two = runs("ddp", "--nproc", "2", "--set", "micro_batch=4", *common)
    one = runs("ddp", "--nproc", "1", "--set", "micro_batch=8", *common)
    for a, b in zip(two["curve"], one["curve"], strict=True):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-4)
    assert two["optimizer"]["groups"]["matrices"]["tensors"] == 28
    ops = two["comm"]["per_rank"][0]["ops"]
    assert {o["op"] for o in ops} == {"all_reduce"} and {o["group"] for o in ops} == {"replicate"}
