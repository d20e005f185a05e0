"""Layer-wise distributed Muon under DDP (baselines/muon.py, `replicate_group`): each rank orthogonalizes its block
of each shape's matrices and all-gathers them; the update equals one process's bit for bit (the same Newton-Schulz
on the same averaged gradients), on real gloo workers at world sizes 2, 3 and 4.

Five 8 x 6 matrices (3 per rank at 2 ranks, one padding matrix; 2 at 3, one padding; 2 at 4, three padding),
two 6 x 8 (one each at 2; padded at 3 and 4) and one 4 x 4 (alone: every rank does it, no collective), three
steps: one all-gather per shape of two or more matrices, its bytes world x ceil(N / world) x m x n x 2 (bf16).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.distributed as dist
from torch import nn

from baselines.muon import Muon
from suite.meters.comm import CommLedger

from .conftest import spawn_gloo

pytestmark = pytest.mark.slow

SHAPES = [(8, 6)] * 5 + [(6, 8)] * 2 + [(4, 4)]
STEPS = 3


def train(group: dist.ProcessGroup | None) -> tuple[list[torch.Tensor], list[dict]]:
    """STEPS steps from fixed weights and gradients (every rank the same: DDP's averaged ones); step 1's ledger."""
    gen = torch.Generator().manual_seed(0)
    params = [nn.Parameter(torch.randn(s, generator=gen)) for s in SHAPES]
    opt = Muon(params, lr=0.05, weight_decay=0.1, replicate_group=group)
    ops = []
    for step in range(STEPS):
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen)
        ledger = CommLedger()
        with ledger:
            opt.step()
        if step == 1:
            ops = ledger.ops()
    return [p.detach() for p in params], ops


def _worker(rank: int, world: int, init: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)
    torch.save(train(dist.group.WORLD), f"{out}.{rank}")
    dist.destroy_process_group()


@pytest.fixture(scope="module", params=[2, 3, 4])
def distributed(request, tmp_path_factory) -> tuple[int, list]:
    world = request.param
    return world, spawn_gloo(_worker, world, tmp_path_factory.mktemp(f"muon-layerwise-w{world}"))


def test_every_rank_ends_with_the_single_process_weights_exactly(distributed):
    _, per_rank = distributed
    single, _ = train(None)
    for weights, _ in per_rank:
        for got, want in zip(weights, single):
            torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_one_all_gather_per_shared_shape_bytes_as_derived(distributed):
    world, per_rank = distributed
    shared = {s: SHAPES.count(s) for s in SHAPES if SHAPES.count(s) > 1}
    expected = sum(world * math.ceil(n / world) * rows * cols * 2 for (rows, cols), n in shared.items())
    for _, ops in per_rank:
        assert [(o["op"], o["count"], o["bytes"]) for o in ops] == [("all_gather", len(shared), expected)]
