"""Merging as DiLoCo's aggregation (reproductions/merging/aggregation.py): the merge of flat shards, the method's
one-line refusals, and real gloo runs at 2, 3 and 4 workers (task arithmetic at lambda 1/K is DiLoCo; TIES keeps the
groups equal and gathers K shards)."""

from __future__ import annotations

import pytest
import torch

from reproductions.merging.aggregation import MergedDiLoCo, merged_point
from suite.config import RunConfig

from .conftest import SharedRuns

K_SHARDS = 3


def _shards(anchor: torch.Tensor, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [anchor + 0.1 * torch.randn(anchor.shape, generator=g) for _ in range(K_SHARDS)]


def test_task_arithmetic_at_one_over_k_is_the_mean():
    anchor = torch.randn(50, generator=torch.Generator().manual_seed(0))
    shards = _shards(anchor, 1)
    merged = merged_point(anchor, shards, "task-arithmetic", 1 / K_SHARDS, 1.0)
    assert torch.allclose(merged, torch.stack(shards).mean(0), atol=1e-6)


def test_ties_keeps_the_agreeing_values_of_the_top_fraction():
    anchor = torch.zeros(4)
    shards = [torch.tensor([1.0, -0.1, 0.5, 0.0]), torch.tensor([3.0, 0.2, -0.4, 0.0])]
    # density 1: entry 1's elected sign is + (0.1), entry 2's is + (0.1): the disjoint mean of the agreeing values
    assert merged_point(anchor, shards, "ties", 1.0, 1.0).tolist() == pytest.approx([2.0, 0.2, 0.5, 0.0])
    # density 0.5: each task vector keeps its two largest magnitudes (1.0 and 0.5; 3.0 and -0.4)
    assert merged_point(anchor, shards, "ties", 1.0, 0.5).tolist() == pytest.approx([2.0, 0.0, 0.5, 0.0])


def test_ties_at_full_density_without_sign_conflicts_is_the_mean():
    anchor = torch.zeros(30)
    shards = [torch.rand(30, generator=torch.Generator().manual_seed(s)) + 0.01 for s in range(K_SHARDS)]
    assert torch.allclose(merged_point(anchor, shards, "ties", 1.0, 1.0), torch.stack(shards).mean(0), atol=1e-6)


@pytest.mark.parametrize(
    ("variant", "fix"),
    [
        ({"merge": "task-arithmetic", "density": 0.5}, "density is TIES's"),
        ({"outer": "none"}, "keep an outer optimizer"),
    ],
)
def test_bad_combinations_name_the_fix(variant, fix):
    with pytest.raises(ValueError, match=fix):
        MergedDiLoCo(RunConfig(method="diloco-merge", nproc=2), variant)


@pytest.mark.parametrize("density", [0, 1.5])
def test_density_outside_zero_to_one_is_refused(density):
    with pytest.raises(ValueError, match="density"):
        MergedDiLoCo(RunConfig(method="diloco-merge", nproc=2), {"density": density})


# ---- real gloo runs ----------------------------------------------------------------------------------------
F_SETS = ("--set", "F=2")
# the task-arithmetic pairs compare losses only: the meters' steps would be about 40% of each run's time
UNMETERED = ("--no-meters",)


def _tokens(nproc: int) -> tuple[str, ...]:
    return ("--tokens", str(4 * nproc * 8 * 128))  # 4 steps: two aggregations


def _merge(nproc: int, *sets: str) -> tuple[str, ...]:
    return ("diloco-merge", "--nproc", str(nproc), *_tokens(nproc), *F_SETS, *sets)


def _diloco(nproc: int) -> tuple[str, ...]:
    return ("diloco", "--nproc", str(nproc), *_tokens(nproc), *F_SETS, *UNMETERED)


NPROCS = (2, 3, 4)
TA = ("--set", "merge=task-arithmetic", *UNMETERED)
TIES = ("--set", "merge=ties", "--set", "check=true")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> SharedRuns:
    commands = [c for n in NPROCS for c in (_merge(n, *TA), _diloco(n))] + [_merge(4, *TIES)]
    return SharedRuns(tmp_path_factory.mktemp("merged-diloco"), commands)


def _losses(record: dict) -> list[float]:
    return [p["train_loss"] for p in record["curve"]]


@pytest.mark.slow
@pytest.mark.parametrize("nproc", NPROCS)
def test_task_arithmetic_at_one_over_k_trains_as_diloco(runs, nproc):
    merged, diloco = runs(*_merge(nproc, *TA)), runs(*_diloco(nproc))
    assert merged["parallel"]["fl"]["K"] == nproc
    assert _losses(merged) == pytest.approx(_losses(diloco), abs=1e-5)
    assert "task-arithmetic" in merged["parallel"]["fl"]["averaging"]


@pytest.mark.slow
def test_ties_keeps_the_groups_equal_and_gathers_every_groups_shard(runs):
    record = runs(*_merge(4, *TIES))  # check=true: every aggregation compares the groups after merging
    assert record["status"] == "complete"
    shard = record["parallel"]["fl"]["averaged_bytes_per_rank"]
    ops = {(o["op"], o["group"]): o for o in record["comm"]["per_rank"][0]["ops"]}
    gathers = [o for (op, group), o in ops.items() if op == "all_gather" and group == "fed"]
    assert gathers and gathers[0]["bytes"] == record["comm"]["steps"] / 2 * 4 * shard  # K shards every F = 2 steps
