"""The merges of reproductions/merging/merge.py on tiny models: the identities the papers' definitions imply, hand
computed TIES cases, SWA against the mean of its checkpoints, DCP-sharded checkpoints against the full models,
and bad input as one line."""

from __future__ import annotations

import math
import os

import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from hypothesis import given
from hypothesis import strategies as st
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

from reproductions.merging.merge import (
    MergeError,
    StateDict,
    ensemble_log_probs,
    greedy_soup,
    load_dcp,
    swa,
    task_arithmetic,
    ties_merging,
    uniform_soup,
)

seeds = st.integers(0, 2**16)
counts = st.integers(1, 5)


def model(seed: int) -> StateDict:
    """A tiny network's state dict (linear, batch norm with its integer counter, linear), entries drawn from
    `seed` at magnitudes from 1e-3 to 1e3, so that sums cross exponents."""
    gen = torch.Generator().manual_seed(seed)
    state = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.Linear(3, 2)).state_dict()
    out = {}
    for key, t in state.items():
        if t.is_floating_point():
            scale = 10.0 ** torch.randint(-3, 4, t.shape, generator=gen)
            out[key] = torch.randn(t.shape, generator=gen) * scale
        else:
            out[key] = torch.randint(0, 100, t.shape, generator=gen)
    return out


def assert_equal(a: StateDict, b: StateDict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].dtype == b[key].dtype and torch.equal(a[key], b[key]), key


# ---- soups ------------------------------------------------------------------------------------------------
@given(seed=seeds, k=counts)
def test_a_uniform_soup_of_identical_models_is_that_model(seed, k):
    one = model(seed)
    assert_equal(uniform_soup([one] * k), one)


def test_a_uniform_soup_is_the_mean_and_keeps_the_first_models_counters():
    models = [model(s) for s in range(3)]
    soup = uniform_soup(models)
    for key, t in soup.items():
        if t.is_floating_point():
            torch.testing.assert_close(t, torch.stack([m[key] for m in models]).mean(0))
        else:
            assert torch.equal(t, models[0][key])  # an integer counter is not averaged


def distance_to(target: StateDict):
    """A held-out score: minus the squared distance of the floating entries to `target` (higher is better)."""

    def score(state: StateDict) -> float:
        return -sum(float((state[k] - t).pow(2).sum()) for k, t in target.items() if t.is_floating_point())

    return score


@given(seed=seeds, k=st.integers(2, 5))
def test_a_greedy_soup_scores_at_least_its_best_ingredient_and_is_the_mean_of_its_ingredients(seed, k):
    models = [model(seed + i) for i in range(k)]
    score = distance_to(model(seed + k))
    soup = greedy_soup(models, score)
    scores = [score(m) for m in models]
    assert soup.ingredients[0] == max(range(k), key=scores.__getitem__)
    assert soup.score >= max(scores) and soup.score == score(soup.state)
    assert_equal(soup.state, uniform_soup([models[i] for i in soup.ingredients]))


def test_a_greedy_soup_adds_an_ingredient_only_if_the_held_out_score_rises():
    target = {"w": torch.zeros(2)}
    near, opposite, far = (
        {"w": torch.tensor([1.0, 1.0])},
        {"w": torch.tensor([-1.0, -1.5])},
        {"w": torch.full((2,), 9.0)},
    )
    soup = greedy_soup([far, opposite, near], distance_to(target))
    # near first (score -2), then opposite (mean [0, -0.25], score -0.0625); far would pull the mean away
    assert soup.ingredients == [2, 1]
    torch.testing.assert_close(soup.state["w"], torch.tensor([0.0, -0.25]))


def test_a_diverged_ingredient_is_never_added():
    good, diverged = {"w": torch.ones(2)}, {"w": torch.full((2,), math.nan)}
    soup = greedy_soup([diverged, good], lambda s: -float(s["w"].sum()))
    assert soup.ingredients == [1]


# ---- task arithmetic and TIES -----------------------------------------------------------------------------
@given(seed=seeds, k=counts)
def test_task_arithmetic_at_lambda_zero_is_the_base(seed, k):
    base = model(seed)
    assert_equal(task_arithmetic(base, [model(seed + 1 + i) for i in range(k)], 0.0), base)


def test_task_arithmetic_adds_lambda_times_the_summed_task_vectors():
    base = {"w": torch.tensor([1.0, 2.0])}
    models = [{"w": torch.tensor([2.0, 2.0])}, {"w": torch.tensor([4.0, 0.0])}]  # vectors [1, 0] and [3, -2]
    torch.testing.assert_close(task_arithmetic(base, models, 0.5)["w"], torch.tensor([3.0, 1.0]))


def agreeing(seed: int, k: int, zeros: bool) -> tuple[StateDict, list[StateDict]]:
    """A base and k models whose task vectors agree in sign at every entry (magnitudes 0.1 to 1, far above
    float32 rounding of the base); with `zeros`, about a third of each vector's entries are exactly zero."""
    base = {key: t for key, t in model(seed).items() if t.is_floating_point()}
    gen = torch.Generator().manual_seed(seed + 1)
    signs = {key: torch.randint(0, 2, t.shape, generator=gen) * 2.0 - 1 for key, t in base.items()}
    models = []
    for _ in range(k):
        vector = {key: signs[key] * (0.1 + 0.9 * torch.rand(t.shape, generator=gen)) for key, t in base.items()}
        if zeros:
            vector = {key: v * (torch.rand(v.shape, generator=gen) > 1 / 3) for key, v in vector.items()}
        models.append({key: base[key] + vector[key] for key in base})
    return base, models


@given(seed=seeds, k=counts, lam=st.floats(-3, 3))
def test_ties_at_k_100_without_sign_conflicts_is_task_arithmetic_at_lambda_over_k(seed, k, lam):
    """With nothing trimmed, no conflict and every task vector nonzero everywhere, the disjoint mean is the sum
    of the K task vectors over K at every entry, so TIES at lambda is task arithmetic at lambda / K. Both are
    computed in float64 in different orders and rounded to float32: equal to float32 rounding."""
    base, models = agreeing(seed, k, zeros=False)
    torch.testing.assert_close(ties_merging(base, models, k=100, lam=lam), task_arithmetic(base, models, lam / k))


@given(seed=seeds, k=counts, lam=st.floats(-3, 3))
def test_ties_at_k_100_without_conflicts_divides_each_entry_by_its_nonzero_task_vectors(seed, k, lam):
    """Where some task vectors are zero the disjoint mean divides by the n nonzero ones at that entry, not by K:
    TIES = base + lambda * sum / n per entry (and the base where all are zero)."""
    base, models = agreeing(seed, k, zeros=True)
    merged = ties_merging(base, models, k=100, lam=lam)
    for key, b in base.items():
        vectors = torch.stack([m[key].double() - b.double() for m in models])
        n = (vectors != 0).sum(0).clamp(min=1)
        torch.testing.assert_close(merged[key], (b.double() + lam * vectors.sum(0) / n).float())


def test_ties_elects_signs_by_mass_and_averages_the_agreeing_entries():
    base = {"w": torch.zeros(4)}
    vectors = [[1.0, -2.0, 0.1, 3.0], [2.0, 1.0, -0.2, -1.0], [-0.5, 1.0, 0.3, -4.0]]
    # sums 2.5, 0, 0.2, -2: signs +, (none: the majority of the elected signs, +1 + 1 - 1 > 0, so +), +, -
    merged = ties_merging(base, [{"w": torch.tensor(v)} for v in vectors], k=100, lam=2.0)
    torch.testing.assert_close(merged["w"], 2.0 * torch.tensor([1.5, 1.0, 0.2, -2.5]))


@pytest.mark.parametrize("k,kept", [(50, [4.0, 3.0, 0.0, 0.0]), (25, [4.0, 0.0, 0.0, 0.0]), (30, [4.0, 3.0, 0.0, 0.0])])
def test_ties_trims_over_the_whole_model_not_per_tensor(k, kept):
    """One model: TIES is the base plus its trimmed task vector. Of the 4 entries, ceil(4 k / 100) are kept; a
    per-tensor trim would keep -1 of b at k = 50."""
    base = {"a": torch.zeros(2), "b": torch.zeros(2)}
    merged = ties_merging(base, [{"a": torch.tensor([4.0, 3.0]), "b": torch.tensor([-1.0, 0.5])}], k=k, lam=1.0)
    torch.testing.assert_close(torch.cat([merged["a"], merged["b"]]), torch.tensor(kept))


def test_ties_keeps_ties_at_the_threshold():
    base = {"w": torch.zeros(4)}
    merged = ties_merging(base, [{"w": torch.tensor([2.0, -1.0, 1.0, 0.5])}], k=50)
    torch.testing.assert_close(merged["w"], torch.tensor([2.0, -1.0, 1.0, 0.0]))


# ---- SWA and the output ensemble --------------------------------------------------------------------------
def trajectory(steps: int) -> list[StateDict]:
    """The checkpoints of `steps` SGD steps of a small network on a fixed regression, one after each step."""
    gen = torch.Generator().manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 1))
    x, y = torch.randn(32, 4, generator=gen), torch.randn(32, 1, generator=gen)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    checkpoints = []
    for _ in range(steps):
        opt.zero_grad()
        nn.functional.mse_loss(net(x), y).backward()
        opt.step()
        checkpoints.append({k: t.detach().clone() for k, t in net.state_dict().items()})
    return checkpoints


def test_swa_is_the_mean_of_its_checkpoints():
    checkpoints = trajectory(6)
    averaged = swa(iter(checkpoints))  # read one at a time
    for key, t in averaged.items():
        stacked = torch.stack([c[key] for c in checkpoints])
        if t.is_floating_point():  # AveragedModel's running mean in float64, rounded to float32
            torch.testing.assert_close(t, stacked.double().mean(0).float(), rtol=0, atol=1e-7)
        else:
            assert torch.equal(t, checkpoints[0][key])


def test_swa_of_one_checkpoint_is_that_checkpoint():
    one = trajectory(1)[0]
    assert_equal(swa([one]), one)


def test_the_output_ensemble_is_the_mean_of_the_predicted_probabilities():
    gen = torch.Generator().manual_seed(0)
    logits = [torch.randn(5, 7, generator=gen) * 10 for _ in range(3)]
    expected = torch.stack([t.softmax(-1) for t in logits]).mean(0)
    torch.testing.assert_close(ensemble_log_probs(logits).exp(), expected)
    torch.testing.assert_close(ensemble_log_probs([logits[0]] * 4), logits[0].log_softmax(-1))


# ---- DCP-sharded checkpoints ------------------------------------------------------------------------------
DCP_MODELS = 3


def _save_sharded(rank: int, world: int, init: str, folder: str) -> None:
    """Each model's floating entries row-sharded over the ranks (DTensor Shard(0)), saved under model/ beside
    an optimizer-like entry, as every rank's DCP save of its shards."""
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    for i in range(DCP_MODELS + 1):
        state = {f"model/{k}": distribute_tensor(t, mesh, [Shard(0)]) for k, t in floating(model(i)).items()}
        state["optim/step"] = distribute_tensor(torch.tensor([float(i)] * 4), mesh, [Shard(0)])
        dcp.save(state, checkpoint_id=os.path.join(folder, f"m{i}"))
    dist.destroy_process_group()


def floating(state: StateDict) -> StateDict:
    return {k: t for k, t in state.items() if t.is_floating_point()}


@pytest.mark.slow
def test_merging_dcp_sharded_checkpoints_equals_merging_the_full_models(tmp_path):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.spawn(_save_sharded, args=(2, str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    metadata = dcp.FileSystemReader(tmp_path / "m0").read_metadata()
    assert len(metadata.state_dict_metadata["model/0.weight"].chunks) == 2  # really saved as two shards
    loaded = [load_dcp(tmp_path / f"m{i}", prefix="model/") for i in range(DCP_MODELS + 1)]
    full = [floating(model(i)) for i in range(DCP_MODELS + 1)]
    for got, expected in zip(loaded, full):
        assert_equal(got, expected)
    base, tasks, base_full, tasks_full = loaded[0], loaded[1:], full[0], full[1:]
    assert_equal(uniform_soup(tasks), uniform_soup(tasks_full))
    assert_equal(task_arithmetic(base, tasks, 0.4), task_arithmetic(base_full, tasks_full, 0.4))
    assert_equal(ties_merging(base, tasks, k=20), ties_merging(base_full, tasks_full, k=20))
    assert_equal(swa(tasks), swa(tasks_full))


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_a_folder_without_the_prefix_is_one_line(tmp_path):
    dcp.save({"w": torch.ones(2)}, checkpoint_id=tmp_path, no_dist=True)
    with pytest.raises(MergeError, match="holds no tensor under 'model/'"):
        load_dcp(tmp_path, prefix="model/")


# ---- bad input --------------------------------------------------------------------------------------------
A = {"w": torch.zeros(2, 3), "b": torch.zeros(2)}
OTHER_SHAPE = {"w": torch.zeros(3, 3), "b": torch.zeros(2)}
OTHER_KEYS = {"w": torch.zeros(2, 3), "bias": torch.zeros(2)}
OTHER_DTYPE = {"w": torch.zeros(2, 3, dtype=torch.float64), "b": torch.zeros(2)}


@pytest.mark.parametrize(
    "call,fix",
    [
        (lambda: uniform_soup([A, OTHER_SHAPE]), "'w' is (3, 3) torch.float32 in model 1 but (2, 3)"),
        (lambda: uniform_soup([A, OTHER_KEYS]), "model 1 and model 0 differ in keys: missing ['b'], extra ['bias']"),
        (lambda: uniform_soup([A, OTHER_DTYPE]), "merge models of one architecture"),
        (lambda: uniform_soup([A, [1, 2]]), "model 1 must be a state dict of tensors"),
        (lambda: task_arithmetic(OTHER_SHAPE, [A], 1.0), "in model 0 but (3, 3) torch.float32 in the base"),
        (lambda: ties_merging(A, [A, OTHER_KEYS]), "differ in keys"),
        (lambda: swa([A, OTHER_SHAPE]), "in checkpoint 1 but"),
        (lambda: greedy_soup([A, OTHER_SHAPE], lambda s: 0.0), "in model 1 but"),
        (lambda: task_arithmetic(A, [A], math.nan), "lambda must be a finite number, got nan"),
        (lambda: task_arithmetic(A, [A], math.inf), "lambda must be a finite number, got inf"),
        (lambda: task_arithmetic(A, [A], "0.5"), "lambda must be a finite number, got '0.5'"),
        (lambda: task_arithmetic(A, [A], None), "lambda must be a finite number, got None"),
        (lambda: ties_merging(A, [A], lam=True), "lambda must be a finite number, got True"),
        (lambda: ties_merging(A, [A], k=0), "k must be a percentage in (0, 100], got 0"),
        (lambda: ties_merging(A, [A], k=-5), "k must be a percentage in (0, 100], got -5"),
        (lambda: ties_merging(A, [A], k=100.5), "k must be a percentage in (0, 100], got 100.5"),
        (lambda: ties_merging(A, [A], k=math.nan), "k must be a finite number, got nan"),
        (lambda: uniform_soup([]), "a uniform soup needs at least one model, got none"),
        (lambda: greedy_soup([], lambda s: 0.0), "a greedy soup needs at least one model"),
        (lambda: task_arithmetic(A, [], 1.0), "task arithmetic needs at least one model"),
        (lambda: ties_merging(A, iter([])), "TIES-Merging needs at least one model"),
        (lambda: swa(iter([])), "SWA needs at least one checkpoint, got none"),
        (lambda: ensemble_log_probs([]), "needs at least one model's logits"),
        (lambda: ensemble_log_probs([torch.zeros(2, 3), torch.zeros(2, 4)]), "logits must have one shape"),
    ],
)
def test_bad_input_is_one_line(call, fix):
    with pytest.raises(MergeError) as err:
        call()
    message = str(err.value)
    assert isinstance(err.value, ValueError) and "\n" not in message
    assert fix in message, message


def test_a_folder_that_is_no_checkpoint_is_one_line(tmp_path):
    with pytest.raises(ValueError, match="no DCP metadata") as err:
        load_dcp(tmp_path)
    assert "\n" not in str(err.value)
